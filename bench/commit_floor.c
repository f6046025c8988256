/*
 * commit_floor: what SQLite alone costs a durable drain's commit, with no
 * server around it: one thread, BEGIN IMMEDIATE, K deletes by id (dsjobd's
 * own statement), COMMIT, again and again, on a copy of a dsjobd.db full
 * of jobs. It prints the CPU and the wall time a commit, so that the
 * server's store CPU a job can be set against its floor (K ends a commit)
 * and a drain's rate against the disk's (--store-sync full: a commit is
 * an fdatasync). Not built by make:
 *
 *   cc -O2 -o commit_floor bench/commit_floor.c -lsqlite3
 *   cp WORKDIR/dsjobd.db /tmp/t.db   # a stopped dsjobd's store, N jobs
 *   ./commit_floor /tmp/t.db normal|full K exec|prep COMMITS
 *
 * exec parses BEGIN and COMMIT each time (sqlite3_exec), prep steps
 * statements prepared once; the rows deleted are ids 1, 2, ... in order,
 * as a drain in submission order deletes them.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double
cpu_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

static double
wall_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
step(sqlite3_stmt *stmt)
{
    int rc = sqlite3_step(stmt);

    sqlite3_reset(stmt);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int
main(int argc, char **argv)
{
    sqlite3 *db;
    sqlite3_stmt *del, *begin, *commit;
    sqlite3_int64 id = 1;
    double c0, w0, c, w;
    int k, n, i, j, prep, full;

    if (argc != 6) {
        fprintf(stderr, "usage: commit_floor DB normal|full K exec|prep COMMITS\n");
        return 2;
    }
    full = strcmp(argv[2], "full") == 0;
    k = atoi(argv[3]);
    prep = strcmp(argv[4], "prep") == 0;
    n = atoi(argv[5]);
    if (k < 1 || n < 1 || sqlite3_open(argv[1], &db) != SQLITE_OK) {
        fprintf(stderr, "commit_floor: bad arguments or cannot open %s\n", argv[1]);
        return 2;
    }
    sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
    sqlite3_exec(db, full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL", NULL, NULL,
                 NULL);
    if (sqlite3_prepare_v2(db, "DELETE FROM jobs WHERE id = ?", -1, &del, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "BEGIN IMMEDIATE", -1, &begin, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "COMMIT", -1, &commit, NULL) != SQLITE_OK) {
        fprintf(stderr, "commit_floor: %s\n", sqlite3_errmsg(db));
        return 1;
    }
    c0 = cpu_s();
    w0 = wall_s();
    for (i = 0; i < n; i++) {
        int rc = prep ? step(begin) : sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);

        for (j = 0; j < k && rc == SQLITE_OK; j++) {
            rc = sqlite3_bind_int64(del, 1, id++);
            if (rc == SQLITE_OK)
                rc = step(del);
        }
        if (rc == SQLITE_OK)
            rc = prep ? step(commit) : sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        if (rc != SQLITE_OK) {
            fprintf(stderr, "commit_floor: commit %d: %s\n", i, sqlite3_errmsg(db));
            return 1;
        }
    }
    c = cpu_s() - c0;
    w = wall_s() - w0;
    printf("sync=%s per_commit=%d mode=%s commits=%d cpu_us_per_commit=%.1f "
           "wall_us_per_commit=%.1f cpu_us_per_end=%.2f commits_per_s=%.0f\n",
           argv[2], k, argv[4], n, c * 1e6 / n, w * 1e6 / n, c * 1e6 / n / k, n / w);
    sqlite3_finalize(del);
    sqlite3_finalize(begin);
    sqlite3_finalize(commit);
    sqlite3_close(db);
    return 0;
}
