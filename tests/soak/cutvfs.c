/*
 * cutvfs: a shim over the default (unix) SQLite VFS for power-cut and
 * I/O-error tests, after the idea of SQLite's crash tests (test6.c). Writes
 * go through to the real file at once, so reads need no overlay; before
 * each write or truncate the bytes it replaces are appended to an undo log,
 * and an xSync of a file marks that file's records as durable. A power cut
 * is then a SIGKILL of the process followed by cutvfs_apply, which rolls
 * back (drops), keeps, or tears sector by sector the writes no sync
 * covered: exactly the state a disk can be left in when the machine loses
 * power with those writes still in its page cache. The same shim can fail
 * the Nth write, sync, open or truncate with an SQLite error code.
 * doc/reliability.md has the model and what it does not cover.
 */
#include "config.h"
#include "cutvfs.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#define REC_MAGIC 0x56545543u /* "CUTV" */
#define MAX_NAMES 32          /* distinct files journaled per process */

enum rec_type { REC_WRITE = 'W', REC_TRUNC = 'T', REC_SYNC = 'S', REC_DELETE = 'D' };

/*
 * One undo log record; the file name, then len bytes of old data, follow
 * it, padded to a multiple of 8 so that the next header is aligned.
 */
struct rec_head {
    uint32_t magic;    /* REC_MAGIC */
    uint32_t type;     /* enum rec_type */
    uint32_t name_len; /* bytes of the name */
    uint32_t len;      /* bytes of old data */
    uint64_t off;      /* REC_WRITE: where; REC_TRUNC: the new size */
    uint64_t old_size; /* the file's size before the write or truncate */
};

/* An open file: ours, then the real VFS's file right after it. */
struct cut_file {
    sqlite3_file base;  /* pMethods = cut_methods */
    sqlite3_file *real; /* the wrapped file */
    int slot;           /* index in G.names, or -1 when not journaled */
};

static struct {
    sqlite3_vfs vfs;             /* the wrapper, registered as default */
    sqlite3_vfs *real;           /* the VFS it wraps */
    int log_fd;                  /* the undo log, O_APPEND */
    pthread_mutex_t lock;        /* the log, the names and the counters */
    char *names[MAX_NAMES];      /* files journaled so far */
    uint64_t pending[MAX_NAMES]; /* records of each since its last sync */
    int nnames;                  /* entries of names */
    uint64_t count[CUTVFS_NOPS]; /* operations attempted */
    uint64_t fail_nth[CUTVFS_NOPS], fail_count[CUTVFS_NOPS]; /* cutvfs_fail */
    int fail_rc[CUTVFS_NOPS];
    bool nosync; /* cutvfs_skip_fsync: an xSync marks durable without fsync() */
    char *gate;  /* cutvfs_gate: a write waits while this file exists, or NULL */
} G = {.log_fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER};

static const sqlite3_io_methods cut_methods;

static size_t
rec_size(const struct rec_head *h)
{
    return (sizeof(*h) + h->name_len + h->len + 7) & ~(size_t)7;
}

/* op_fails counts one operation of kind op; true if it is to fail. */
static bool
op_fails(enum cutvfs_op op, int *rc)
{
    uint64_t n;
    bool fail;

    pthread_mutex_lock(&G.lock);
    n = ++G.count[op];
    fail = G.fail_nth[op] != 0 && n >= G.fail_nth[op] && n - G.fail_nth[op] < G.fail_count[op];
    *rc = G.fail_rc[op];
    pthread_mutex_unlock(&G.lock);
    return fail;
}

/* log_append writes one record with a single write(), so it is whole unless killed mid-way. */
static int
log_append(uint32_t type, int slot, uint64_t off, uint64_t old_size, const void *old, uint32_t len)
{
    struct rec_head h = {REC_MAGIC, type, (uint32_t)strlen(G.names[slot]), len, off, old_size};
    size_t total = rec_size(&h);
    unsigned char *buf = calloc(1, total);
    ssize_t n;

    if (buf == NULL)
        return -1;
    memcpy(buf, &h, sizeof(h));
    memcpy(buf + sizeof(h), G.names[slot], h.name_len);
    if (len > 0)
        memcpy(buf + sizeof(h) + h.name_len, old, len);
    do
        n = write(G.log_fd, buf, total);
    while (n < 0 && errno == EINTR);
    free(buf);
    return n == (ssize_t)total ? 0 : -1;
}

/* mark_durable: the file's records are covered; with none pending anywhere the log restarts. */
static void
mark_durable(int slot, uint32_t type)
{
    int i;

    if (G.pending[slot] == 0)
        return;
    G.pending[slot] = 0;
    for (i = 0; i < G.nnames; i++)
        if (G.pending[i] != 0)
            break;
    if (i == G.nnames) {
        if (ftruncate(G.log_fd, 0) == 0)
            return;
    }
    log_append(type, slot, 0, 0, NULL, 0);
}

static int
slot_of(const char *name)
{
    int i;

    for (i = 0; i < G.nnames; i++)
        if (strcmp(G.names[i], name) == 0)
            return i;
    if (G.nnames == MAX_NAMES)
        return -1;
    G.names[G.nnames] = strdup(name);
    if (G.names[G.nnames] == NULL)
        return -1;
    return G.nnames++;
}

static int
cut_close(sqlite3_file *f)
{
    struct cut_file *cf = (struct cut_file *)f;

    return cf->real->pMethods->xClose(cf->real);
}

static int
cut_read(sqlite3_file *f, void *buf, int amt, sqlite3_int64 off)
{
    struct cut_file *cf = (struct cut_file *)f;

    return cf->real->pMethods->xRead(cf->real, buf, amt, off);
}

/* journal_write records the bytes [off, off + amt) hold now, before they are overwritten. */
static int
journal_write(struct cut_file *cf, int amt, sqlite3_int64 off)
{
    sqlite3_int64 size = 0;
    unsigned char *old;
    int rc;

    old = malloc((size_t)amt);
    if (old == NULL)
        return SQLITE_NOMEM;
    rc = cf->real->pMethods->xFileSize(cf->real, &size);
    if (rc == SQLITE_OK) {
        rc = cf->real->pMethods->xRead(cf->real, old, amt, off);
        if (rc == SQLITE_IOERR_SHORT_READ) /* past the end: zeros, as the file system reads it */
            rc = SQLITE_OK;
    }
    if (rc == SQLITE_OK) {
        pthread_mutex_lock(&G.lock);
        if (log_append(REC_WRITE, cf->slot, (uint64_t)off, (uint64_t)size, old, (uint32_t)amt) == 0)
            G.pending[cf->slot]++;
        else
            rc = SQLITE_IOERR_WRITE; /* unrecorded, it could not be undone: do not write */
        pthread_mutex_unlock(&G.lock);
    }
    free(old);
    return rc;
}

/*
 * gate_wait: while the gate file exists, the write waits (a disk that does
 * not answer), and "<gate>.held" exists meanwhile, so that a test knows a
 * commit is stuck; it checks the gate every millisecond.
 */
static void
gate_wait(void)
{
    char held[4096];
    int fd;

    if (G.gate == NULL || access(G.gate, F_OK) != 0)
        return;
    snprintf(held, sizeof(held), "%s.held", G.gate);
    fd = open(held, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0)
        close(fd);
    while (access(G.gate, F_OK) == 0) {
        struct timespec ms = {0, 1000000};

        nanosleep(&ms, NULL);
    }
    unlink(held);
}

void
cutvfs_gate(const char *path)
{
    free(G.gate);
    G.gate = path != NULL && *path != '\0' ? strdup(path) : NULL;
}

static int
cut_write(sqlite3_file *f, const void *buf, int amt, sqlite3_int64 off)
{
    struct cut_file *cf = (struct cut_file *)f;
    int rc;

    gate_wait();
    if (op_fails(CUTVFS_WRITE, &rc))
        return rc;
    if (cf->slot >= 0 && (rc = journal_write(cf, amt, off)) != SQLITE_OK)
        return rc;
    return cf->real->pMethods->xWrite(cf->real, buf, amt, off);
}

static int
cut_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    struct cut_file *cf = (struct cut_file *)f;
    sqlite3_int64 cur = 0;
    unsigned char *old;
    int rc;

    if (op_fails(CUTVFS_TRUNCATE, &rc))
        return rc;
    if (cf->slot < 0)
        return cf->real->pMethods->xTruncate(cf->real, size);
    rc = cf->real->pMethods->xFileSize(cf->real, &cur);
    if (rc != SQLITE_OK)
        return rc;
    if (cur > size) {
        if (cur - size > (sqlite3_int64)1 << 30)
            return SQLITE_IOERR_TRUNCATE;
        old = malloc((size_t)(cur - size));
        if (old == NULL)
            return SQLITE_NOMEM;
        rc = cf->real->pMethods->xRead(cf->real, old, (int)(cur - size), size);
        if (rc == SQLITE_OK) {
            pthread_mutex_lock(&G.lock);
            if (log_append(REC_TRUNC, cf->slot, (uint64_t)size, (uint64_t)cur, old,
                           (uint32_t)(cur - size)) == 0)
                G.pending[cf->slot]++;
            else
                rc = SQLITE_IOERR_TRUNCATE;
            pthread_mutex_unlock(&G.lock);
        }
        free(old);
        if (rc != SQLITE_OK)
            return rc;
    }
    return cf->real->pMethods->xTruncate(cf->real, size);
}

static int
cut_sync(sqlite3_file *f, int flags)
{
    struct cut_file *cf = (struct cut_file *)f;
    int rc;

    if (op_fails(CUTVFS_SYNC, &rc))
        return rc; /* like a failed fsync: nothing is known to have reached the disk */
    rc = G.nosync ? SQLITE_OK : cf->real->pMethods->xSync(cf->real, flags);
    if (rc == SQLITE_OK && cf->slot >= 0) {
        pthread_mutex_lock(&G.lock);
        mark_durable(cf->slot, REC_SYNC);
        pthread_mutex_unlock(&G.lock);
    }
    return rc;
}

static int
cut_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
    struct cut_file *cf = (struct cut_file *)f;

    return cf->real->pMethods->xFileSize(cf->real, size);
}

static int
cut_lock(sqlite3_file *f, int level)
{
    struct cut_file *cf = (struct cut_file *)f;

    return cf->real->pMethods->xLock(cf->real, level);
}

static int
cut_unlock(sqlite3_file *f, int level)
{
    struct cut_file *cf = (struct cut_file *)f;

    return cf->real->pMethods->xUnlock(cf->real, level);
}

static int
cut_check_reserved(sqlite3_file *f, int *out)
{
    struct cut_file *cf = (struct cut_file *)f;

    return cf->real->pMethods->xCheckReservedLock(cf->real, out);
}

static int
cut_file_control(sqlite3_file *f, int op, void *arg)
{
    struct cut_file *cf = (struct cut_file *)f;

    return cf->real->pMethods->xFileControl(cf->real, op, arg);
}

static int
cut_sector_size(sqlite3_file *f)
{
    struct cut_file *cf = (struct cut_file *)f;

    return cf->real->pMethods->xSectorSize(cf->real);
}

static int
cut_device_characteristics(sqlite3_file *f)
{
    struct cut_file *cf = (struct cut_file *)f;

    /* POWERSAFE_OVERWRITE stays true: a cut never changes a byte outside a write. */
    return cf->real->pMethods->xDeviceCharacteristics(cf->real);
}

static int
cut_shm_map(sqlite3_file *f, int region, int size, int extend, void volatile **p)
{
    struct cut_file *cf = (struct cut_file *)f;

    return cf->real->pMethods->xShmMap(cf->real, region, size, extend, p);
}

static int
cut_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
    struct cut_file *cf = (struct cut_file *)f;

    return cf->real->pMethods->xShmLock(cf->real, offset, n, flags);
}

static void
cut_shm_barrier(sqlite3_file *f)
{
    struct cut_file *cf = (struct cut_file *)f;

    cf->real->pMethods->xShmBarrier(cf->real);
}

static int
cut_shm_unmap(sqlite3_file *f, int del)
{
    struct cut_file *cf = (struct cut_file *)f;

    return cf->real->pMethods->xShmUnmap(cf->real, del);
}

static int
cut_fetch(sqlite3_file *f, sqlite3_int64 off, int amt, void **p)
{
    struct cut_file *cf = (struct cut_file *)f;

    *p = NULL; /* no memory-mapped reads: every page is read through xRead */
    (void)cf;
    (void)off;
    (void)amt;
    return SQLITE_OK;
}

static int
cut_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    (void)f;
    (void)off;
    (void)p;
    return SQLITE_OK;
}

static const sqlite3_io_methods cut_methods = {
    .iVersion = 3,
    .xClose = cut_close,
    .xRead = cut_read,
    .xWrite = cut_write,
    .xTruncate = cut_truncate,
    .xSync = cut_sync,
    .xFileSize = cut_file_size,
    .xLock = cut_lock,
    .xUnlock = cut_unlock,
    .xCheckReservedLock = cut_check_reserved,
    .xFileControl = cut_file_control,
    .xSectorSize = cut_sector_size,
    .xDeviceCharacteristics = cut_device_characteristics,
    .xShmMap = cut_shm_map,
    .xShmLock = cut_shm_lock,
    .xShmBarrier = cut_shm_barrier,
    .xShmUnmap = cut_shm_unmap,
    .xFetch = cut_fetch,
    .xUnfetch = cut_unfetch,
};

static int
vfs_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out_flags)
{
    struct cut_file *cf = (struct cut_file *)f;
    int rc, durable = SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL | SQLITE_OPEN_MAIN_JOURNAL;

    (void)vfs;
    f->pMethods = NULL;
    cf->real = (sqlite3_file *)&cf[1];
    cf->slot = -1;
    if (name != NULL && op_fails(CUTVFS_OPEN, &rc))
        return rc;
    rc = G.real->xOpen(G.real, name, cf->real, flags, out_flags);
    if (cf->real->pMethods == NULL)
        return rc;
    f->pMethods = &cut_methods;
    if (name != NULL && (flags & durable) != 0 && (flags & SQLITE_OPEN_DELETEONCLOSE) == 0) {
        pthread_mutex_lock(&G.lock);
        cf->slot = slot_of(name);
        pthread_mutex_unlock(&G.lock);
        if (cf->slot < 0 && rc == SQLITE_OK) {
            cf->real->pMethods->xClose(cf->real);
            f->pMethods = NULL;
            return SQLITE_CANTOPEN;
        }
    }
    return rc;
}

/* A delete is taken as durable (SQLite asks for a directory sync): its pending records go. */
static int
vfs_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    int rc, i;

    (void)vfs;
    rc = G.real->xDelete(G.real, name, sync_dir);
    pthread_mutex_lock(&G.lock);
    for (i = 0; i < G.nnames; i++)
        if (strcmp(G.names[i], name) == 0)
            mark_durable(i, REC_DELETE);
    pthread_mutex_unlock(&G.lock);
    return rc;
}

static int
vfs_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    (void)vfs;
    return G.real->xAccess(G.real, name, flags, out);
}

static int
vfs_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    (void)vfs;
    return G.real->xFullPathname(G.real, name, n, out);
}

static void *
vfs_dlopen(sqlite3_vfs *vfs, const char *name)
{
    (void)vfs;
    return G.real->xDlOpen(G.real, name);
}

static void
vfs_dlerror(sqlite3_vfs *vfs, int n, char *msg)
{
    (void)vfs;
    G.real->xDlError(G.real, n, msg);
}

static void (*vfs_dlsym(sqlite3_vfs *vfs, void *h, const char *sym))(void)
{
    (void)vfs;
    return G.real->xDlSym(G.real, h, sym);
}

static void
vfs_dlclose(sqlite3_vfs *vfs, void *h)
{
    (void)vfs;
    G.real->xDlClose(G.real, h);
}

static int
vfs_randomness(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return G.real->xRandomness(G.real, n, out);
}

static int
vfs_sleep(sqlite3_vfs *vfs, int us)
{
    (void)vfs;
    return G.real->xSleep(G.real, us);
}

static int
vfs_current_time(sqlite3_vfs *vfs, double *out)
{
    (void)vfs;
    return G.real->xCurrentTime(G.real, out);
}

static int
vfs_last_error(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return G.real->xGetLastError(G.real, n, out);
}

static int
vfs_current_time64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    (void)vfs;
    return G.real->xCurrentTimeInt64(G.real, out);
}

int
cutvfs_register(const char *log)
{
    sqlite3_vfs *real;

    if (sqlite3_initialize() != SQLITE_OK || (real = sqlite3_vfs_find(NULL)) == NULL) {
        errno = ENOSYS;
        return -1;
    }
    G.log_fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (G.log_fd < 0)
        return -1;
    G.real = real;
    G.vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(struct cut_file) + real->szOsFile,
        .mxPathname = real->mxPathname,
        .zName = "cutvfs",
        .xOpen = vfs_open,
        .xDelete = vfs_delete,
        .xAccess = vfs_access,
        .xFullPathname = vfs_full_pathname,
        .xDlOpen = vfs_dlopen,
        .xDlError = vfs_dlerror,
        .xDlSym = vfs_dlsym,
        .xDlClose = vfs_dlclose,
        .xRandomness = vfs_randomness,
        .xSleep = vfs_sleep,
        .xCurrentTime = vfs_current_time,
        .xGetLastError = vfs_last_error,
        .xCurrentTimeInt64 = vfs_current_time64,
    };
    if (sqlite3_vfs_register(&G.vfs, 1) != SQLITE_OK) {
        errno = EINVAL;
        return -1;
    }
    return 0;
}

void
cutvfs_fail(enum cutvfs_op op, uint64_t nth, uint64_t count, int rc)
{
    pthread_mutex_lock(&G.lock);
    G.fail_nth[op] = nth;
    G.fail_count[op] = count;
    G.fail_rc[op] = rc;
    pthread_mutex_unlock(&G.lock);
}

void
cutvfs_skip_fsync(bool on)
{
    G.nosync = on;
}

uint64_t
cutvfs_count(enum cutvfs_op op)
{
    uint64_t n;

    pthread_mutex_lock(&G.lock);
    n = G.count[op];
    pthread_mutex_unlock(&G.lock);
    return n;
}

/* ---- the cut, applied after the process died ---- */

/* One file's records since its last sync, in the order they were made. */
struct pending {
    char *name;                   /* borrowed from the log buffer, NUL added */
    const struct rec_head **recs; /* into the log buffer */
    size_t n, cap;                /* used, allocated */
};

static uint64_t
rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static const unsigned char *
rec_old(const struct rec_head *h)
{
    return (const unsigned char *)(h + 1) + h->name_len;
}

static int
put_bytes(int fd, const void *p, size_t len, uint64_t off)
{
    const unsigned char *b = p;

    while (len > 0) {
        ssize_t n = pwrite(fd, b, len, (off_t)off);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        b += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

/* undo_rec rolls one record back whole. */
static int
undo_rec(int fd, const struct rec_head *h)
{
    if (h->type == REC_TRUNC && ftruncate(fd, (off_t)h->old_size) != 0)
        return -1;
    return put_bytes(fd, rec_old(h), h->len, h->off);
}

/* A set of sector numbers (open addressing; the value ~0 is never a sector). */
struct secset {
    uint64_t *slot; /* ~0 when empty */
    size_t mask;    /* capacity - 1 */
};

static bool
secset_add(struct secset *s, uint64_t sec)
{
    size_t i = (size_t)(sec * 0x9e3779b97f4a7c15ull) & s->mask;

    while (s->slot[i] != ~0ull) {
        if (s->slot[i] == sec)
            return false;
        i = (i + 1) & s->mask;
    }
    s->slot[i] = sec;
    return true;
}

static bool
secset_has(const struct secset *s, uint64_t sec)
{
    size_t i = (size_t)(sec * 0x9e3779b97f4a7c15ull) & s->mask;

    while (s->slot[i] != ~0ull) {
        if (s->slot[i] == sec)
            return true;
        i = (i + 1) & s->mask;
    }
    return false;
}

/*
 * tear: for each sector, walk its writes from the latest back; at each,
 * toss a coin: heads, this write (and so every earlier one) reached the
 * disk; tails, roll its piece of the sector back and look at the one
 * before. Each sector so ends in the state after some prefix of its
 * writes, which is what page-cache writeback can leave. The file keeps
 * at least its size at the last sync, and grows only as far as a kept
 * piece reaches.
 */
static int
tear(int fd, const struct pending *p, uint64_t *rng, struct cutvfs_stats *st)
{
    struct secset kept = {NULL, 0};
    uint64_t end = p->recs[0]->old_size, pieces = 0;
    size_t cap = 16, j;
    struct stat sb;
    int rc = 0;

    for (j = 0; j < p->n; j++)
        pieces += p->recs[j]->len / CUTVFS_SECTOR + 2;
    while (cap < pieces * 2)
        cap *= 2;
    kept.slot = malloc(cap * sizeof(*kept.slot));
    if (kept.slot == NULL)
        return -1;
    memset(kept.slot, 0xff, cap * sizeof(*kept.slot));
    kept.mask = cap - 1;
    for (j = p->n; j-- > 0 && rc == 0;) {
        const struct rec_head *h = p->recs[j];
        uint64_t a = h->off, b = h->off + h->len;

        while (a < b && rc == 0) {
            uint64_t sec = a / CUTVFS_SECTOR, e = (sec + 1) * CUTVFS_SECTOR;

            if (e > b)
                e = b;
            if (secset_has(&kept, sec) || (rnd(rng) & 1)) {
                secset_add(&kept, sec);
                st->kept++;
                if (e > end)
                    end = e;
            } else {
                rc = put_bytes(fd, rec_old(h) + (a - h->off), (size_t)(e - a), a);
                st->undone++;
            }
            a = e;
        }
    }
    free(kept.slot);
    if (rc == 0 && fstat(fd, &sb) == 0 && (uint64_t)sb.st_size > end)
        rc = ftruncate(fd, (off_t)end);
    return rc;
}

/* cut_one applies the cut to one file's pending records. */
static int
cut_one(const struct pending *p, enum cutvfs_mode mode, uint64_t *rng, struct cutvfs_stats *st)
{
    size_t j, keep = p->n, k;
    bool truncs = false;
    int fd, rc = 0;

    fd = open(p->name, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    st->files++;
    st->records += p->n;
    for (j = 0; j < p->n; j++)
        truncs |= p->recs[j]->type == REC_TRUNC;
    if (mode == CUTVFS_DROP)
        keep = 0;
    else if (mode == CUTVFS_TEAR && !truncs) {
        rc = tear(fd, p, rng, st);
        goto out;
    } else if (mode == CUTVFS_TEAR) {
        keep = (size_t)(rnd(rng) % (p->n + 1)); /* a truncate: whole records, a prefix */
    }
    for (k = p->n; k-- > keep && rc == 0;) {
        rc = undo_rec(fd, p->recs[k]);
        st->undone++;
    }
    st->kept += keep;
    if (rc == 0 && keep < p->n)
        rc = ftruncate(fd, (off_t)p->recs[keep]->old_size);
out:
    close(fd);
    return rc;
}

static struct pending *
pending_of(struct pending *files, size_t *nfiles, const char *name, uint32_t len)
{
    size_t i;

    for (i = 0; i < *nfiles; i++)
        if (strlen(files[i].name) == len && memcmp(files[i].name, name, len) == 0)
            return &files[i];
    if (*nfiles == MAX_NAMES)
        return NULL;
    files[*nfiles].name = strndup(name, len);
    if (files[*nfiles].name == NULL)
        return NULL;
    return &files[(*nfiles)++];
}

int
cutvfs_apply(const char *log, enum cutvfs_mode mode, uint64_t *rng, struct cutvfs_stats *st)
{
    struct pending files[MAX_NAMES];
    size_t nfiles = 0, off = 0, len, i;
    unsigned char *buf = NULL;
    struct stat sb;
    int fd, rc = -1;

    memset(st, 0, sizeof(*st));
    memset(files, 0, sizeof(files));
    fd = open(log, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        fprintf(stderr, "cutvfs: %s: %s\n", log, strerror(errno));
        return -1;
    }
    if (fstat(fd, &sb) != 0 || (buf = malloc((size_t)sb.st_size + 1)) == NULL)
        goto out;
    len = (size_t)sb.st_size;
    if (len > 0 && pread(fd, buf, len, 0) != (ssize_t)len)
        goto out;
    while (off + sizeof(struct rec_head) <= len) {
        struct rec_head h;
        struct pending *p;

        memcpy(&h, buf + off, sizeof(h));
        if (h.magic != REC_MAGIC || off + rec_size(&h) > len)
            break;
        p = pending_of(files, &nfiles, (const char *)buf + off + sizeof(h), h.name_len);
        if (p == NULL)
            goto out;
        if (h.type == REC_SYNC || h.type == REC_DELETE) {
            p->n = 0;
        } else {
            if (p->n == p->cap) {
                size_t cap = p->cap ? p->cap * 2 : 64;
                const struct rec_head **r = realloc(p->recs, cap * sizeof(*r));

                if (r == NULL)
                    goto out;
                p->recs = r;
                p->cap = cap;
            }
            p->recs[p->n++] = (const struct rec_head *)(buf + off); /* 8-aligned */
        }
        off += rec_size(&h);
    }
    st->bad_tail = len - off;
    rc = 0;
    for (i = 0; i < nfiles && rc == 0; i++) {
        if (files[i].n > 0 && mode != CUTVFS_KEEP) {
            rc = cut_one(&files[i], mode, rng, st);
        } else {
            st->records += files[i].n;
            st->kept += files[i].n;
        }
    }
    if (rc != 0)
        fprintf(stderr, "cutvfs: cannot apply the cut: %s\n", strerror(errno));
    else
        unlink(log);
out:
    for (i = 0; i < nfiles; i++) {
        free(files[i].name);
        free(files[i].recs);
    }
    free(buf);
    close(fd);
    return rc;
}
