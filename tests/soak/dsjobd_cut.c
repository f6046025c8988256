/*
 * dsjobd_cut: dsjobd for power-cut and I/O-error tests. It is server/main.c
 * (compiled again with main renamed dsjobd_main) behind a main that first
 * registers cutvfs as SQLite's default VFS, so every database file the
 * store opens goes through it. Built only as a test program; the installed
 * dsjobd never contains cutvfs. Controlled by the environment:
 *
 *   DSJOB_CUTVFS_LOG     the undo log of writes no sync covered (required)
 *   DSJOB_CUTVFS_FAIL    OP:N[:COUNT[:CODE]],... fail the Nth to (N+COUNT-1)th
 *                        OP (write, sync, open, truncate) with CODE (ioerr,
 *                        the default, or full)
 *   DSJOB_CUTVFS_COUNTS  a file that gets "write N sync N open N truncate N"
 *                        (the operations attempted) when the server exits
 *   DSJOB_CUTVFS_NOFSYNC 1: a sync is recorded but fsync() is not called (for
 *                        tests without power cuts)
 *   DSJOB_CUTVFS_GATE    a path: while that file exists, every write waits
 *                        (and PATH.held exists), so a test can hold a commit
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "cutvfs.h"

#undef main /* the build renames server/main.c's main (dsjobd_main.h), not this one */

static const char *const op_name[CUTVFS_NOPS] = {"write", "sync", "open", "truncate"};

static void
write_counts(void)
{
    const char *path = getenv("DSJOB_CUTVFS_COUNTS");
    FILE *fp;
    int i;

    if (path == NULL || *path == '\0' || (fp = fopen(path, "w")) == NULL)
        return;
    for (i = 0; i < CUTVFS_NOPS; i++)
        fprintf(fp, "%s%s %llu", i ? " " : "", op_name[i],
                (unsigned long long)cutvfs_count((enum cutvfs_op)i));
    fputc('\n', fp);
    fclose(fp);
}

/* parse_fail reads one OP:N[:COUNT[:CODE]]; false if it is not that. */
static bool
parse_fail(const char *spec)
{
    char op[16], code[16] = "ioerr";
    unsigned long long nth = 0, count = 1;
    int i, rc;

    if (sscanf(spec, "%15[a-z]:%llu:%llu:%15[a-z]", op, &nth, &count, code) < 2)
        return false;
    if (strcmp(code, "ioerr") == 0)
        rc = SQLITE_IOERR;
    else if (strcmp(code, "full") == 0)
        rc = SQLITE_FULL;
    else
        return false;
    for (i = 0; i < CUTVFS_NOPS; i++)
        if (strcmp(op, op_name[i]) == 0) {
            cutvfs_fail((enum cutvfs_op)i, nth, count, rc);
            return true;
        }
    return false;
}

int
main(int argc, char **argv)
{
    const char *log = getenv("DSJOB_CUTVFS_LOG");
    const char *fail = getenv("DSJOB_CUTVFS_FAIL");

    if (log == NULL || *log == '\0') {
        fprintf(stderr, "dsjobd_cut: set DSJOB_CUTVFS_LOG to the undo log's path\n");
        return 2;
    }
    if (cutvfs_register(log) != 0) {
        perror("dsjobd_cut: cannot register the test VFS");
        return 2;
    }
    while (fail != NULL && *fail != '\0') {
        if (!parse_fail(fail)) {
            fprintf(stderr, "dsjobd_cut: DSJOB_CUTVFS_FAIL: cannot read '%s'\n", fail);
            return 2;
        }
        fail = strchr(fail, ',');
        if (fail != NULL)
            fail++;
    }
    cutvfs_skip_fsync(getenv("DSJOB_CUTVFS_NOFSYNC") != NULL &&
                      strcmp(getenv("DSJOB_CUTVFS_NOFSYNC"), "1") == 0);
    cutvfs_gate(getenv("DSJOB_CUTVFS_GATE"));
    atexit(write_counts);
    return dsjobd_main(argc, argv);
}
