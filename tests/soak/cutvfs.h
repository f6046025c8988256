/*
 * cutvfs: a test-only SQLite VFS over the default one, for power cuts and
 * I/O errors (doc/reliability.md, "The power-cut model"). Never linked
 * into dsjobd; tests/soak/dsjobd_cut is dsjobd's main with it registered.
 */
#ifndef DSJOB_CUTVFS_H
#define DSJOB_CUTVFS_H

#include <stdbool.h>
#include <stdint.h>

#define CUTVFS_SECTOR 512 /* the unit a cut tears writes into */

enum cutvfs_op { CUTVFS_WRITE, CUTVFS_SYNC, CUTVFS_OPEN, CUTVFS_TRUNCATE, CUTVFS_NOPS };

/* How a cut treats the writes no xSync covered. */
enum cutvfs_mode {
    CUTVFS_KEEP, /* all reached the disk: a kill -9 */
    CUTVFS_DROP, /* none did */
    CUTVFS_TEAR, /* each sector of each write, latest first, reached it or not, at random */
    CUTVFS_NMODES
};

/* What one cut did. */
struct cutvfs_stats {
    uint64_t records;  /* writes and truncates no sync covered */
    uint64_t undone;   /* sector pieces (or truncates) rolled back */
    uint64_t kept;     /* sector pieces (or truncates) left as written */
    uint64_t bad_tail; /* bytes of an incomplete last record (ignored) */
    unsigned files;    /* files with pending records */
};

/*
 * cutvfs_register wraps the default VFS and makes the wrapper the default.
 * log is the side file of pending writes (the undo log), truncated here.
 * Returns 0 or -1 with errno set.
 */
int cutvfs_register(const char *log);

/*
 * cutvfs_fail makes the nth to (nth + count - 1)th operations of kind op
 * (counted from 1 over every named file) fail with rc (SQLITE_IOERR_* or
 * SQLITE_FULL), without touching the file. nth 0 turns it off.
 */
void cutvfs_fail(enum cutvfs_op op, uint64_t nth, uint64_t count, int rc);

/*
 * cutvfs_skip_fsync(true): xSync marks a file's writes durable in the undo
 * log without calling fsync(), for tests that make no power cut (the
 * I/O-error sweep), where the cost of fsync buys nothing. Default false.
 */
void cutvfs_skip_fsync(bool on);

/*
 * cutvfs_gate(path): every write waits while the file path exists (NULL:
 * never), with "path.held" present while one waits, so that a test can
 * hold a commit in flight and know that it is held (tests/integ/t_ends.sh).
 */
void cutvfs_gate(const char *path);

/* cutvfs_count is how many operations of kind op were attempted so far. */
uint64_t cutvfs_count(enum cutvfs_op op);

/*
 * cutvfs_apply simulates the power cut on the files named in log, after
 * the process that wrote it is dead: the writes no xSync covered are kept,
 * dropped or torn per mode, with random choices from *rng (xorshift64,
 * not 0). Removes the log. 0, or -1 with a message on stderr.
 */
int cutvfs_apply(const char *log, enum cutvfs_mode mode, uint64_t *rng, struct cutvfs_stats *st);

#endif
