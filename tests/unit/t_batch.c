/*
 * Batches (server/batch.c, store_sqlite.c's batch tables): the counters
 * and when callbacks are due, as plain data; and the sqlite store's rows:
 * a member row written with its job's add and gone with its end (remove,
 * or the rewrite to dead) in the same commit, a batch row replayed with
 * its counters and flags, a failed commit that made the tables leaves
 * nothing behind, and a delete takes the batch's members with it.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/dsjob/common.h"
#include "server/batch.h"
#include "server/job.h"
#include "server/store.h"
#include "tap.h"

static void
test_counts(void)
{
    struct batch_counts bc;

    memset(&bc, 0, sizeof(bc));
    tap_is_int(batch_due(&bc, true, true), 0, "counts: an open empty batch is not due");
    bc.closed = true;
    tap_is_int(batch_due(&bc, true, true), BATCH_FIRE_COMPLETE | BATCH_FIRE_SUCCESS,
               "counts: closed with none: both due");
    tap_is_int(batch_due(&bc, false, true), BATCH_FIRE_SUCCESS,
               "counts: only the callbacks it has");
    memset(&bc, 0, sizeof(bc));
    bc.total = 3;
    batch_count_end(&bc, JOB_OUTCOME_COMPLETE);
    batch_count_end(&bc, JOB_OUTCOME_COMPLETE);
    tap_is_int((long long)batch_pending(&bc), 1, "counts: 3 joined, 2 done: 1 pending");
    bc.closed = true;
    tap_is_int(batch_due(&bc, true, true), 0, "counts: closed, one pending: nothing due");
    batch_count_end(&bc, JOB_OUTCOME_DEAD);
    tap_ok(bc.done == 2 && bc.dead == 1 && bc.failed == 0, "counts: dead counted as dead");
    tap_is_int(batch_due(&bc, true, true), BATCH_FIRE_COMPLETE,
               "counts: all ended, one dead: on_complete only");
    bc.fired_complete = true;
    tap_is_int(batch_due(&bc, true, true), 0, "counts: fired is not due again");
    memset(&bc, 0, sizeof(bc));
    bc.total = 2;
    batch_count_end(&bc, JOB_OUTCOME_FAIL);
    batch_count_end(&bc, JOB_OUTCOME_NONE); /* cancelled, expired, dropped */
    tap_ok(bc.failed == 2 && batch_pending(&bc) == 0, "counts: failures and drops are failed");
    bc.closed = true;
    tap_is_int(batch_due(&bc, true, true), BATCH_FIRE_COMPLETE, "counts: no success after them");
    bc.total = 1; /* never below zero */
    tap_is_int((long long)batch_pending(&bc), 0, "counts: more ends than jobs: none pending");
}

#ifdef HAVE_SQLITE
#include <sqlite3.h>

int store_sqlite_test_fail_commits(struct store *st, bool on);

static const struct store_ops *ops = &store_sqlite_ops;

struct seen {
    int batches;        /* rows replayed */
    int members;        /* member rows replayed */
    uint64_t member_id; /* the last member's job */
    char member_of[16]; /* ... and its batch */
    struct store_batch last;
    char failed[64];
};

static int
on_batch(const struct store_batch *sb, void *arg)
{
    struct seen *s = arg;

    s->batches++;
    s->last = *sb;
    snprintf(s->failed, sizeof(s->failed), "%.*s", (int)sb->failed_len, sb->failed);
    s->last.id = s->last.on_complete = s->last.on_success = s->last.failed = NULL;
    return 0;
}

static int
on_member(const char *id, size_t len, uint64_t job_id, void *arg)
{
    struct seen *s = arg;

    s->members++;
    s->member_id = job_id;
    snprintf(s->member_of, sizeof(s->member_of), "%.*s", (int)len, id);
    return 0;
}

static void
job_of(struct store_job *sj, uint64_t id, const char *batch)
{
    static char handle[32];

    memset(sj, 0, sizeof(*sj));
    snprintf(handle, sizeof(handle), "H:t:%llu", (unsigned long long)id);
    sj->id = id;
    sj->seq = id;
    sj->handle = handle;
    sj->handle_len = strlen(handle);
    sj->func = "f";
    sj->func_len = 1;
    sj->unique = "";
    sj->data = "x";
    sj->data_len = 1;
    sj->batch = batch;
    sj->batch_len = batch ? strlen(batch) : 0;
}

static void
batch_of(struct store_batch *sb, const char *id)
{
    memset(sb, 0, sizeof(*sb));
    sb->id = id;
    sb->id_len = strlen(id);
    sb->on_complete = "cb";
    sb->on_complete_len = 2;
    sb->on_success = "";
    sb->failed = "";
}

static struct seen
replay(struct store *st)
{
    struct seen s;
    char err[STORE_ERRLEN];

    memset(&s, 0, sizeof(s));
    if (ops->batch_replay(st, on_batch, on_member, &s, err) != DSJOB_OK)
        tap_diag("batch_replay: %s", err);
    return s;
}

static void
test_sqlite(void)
{
    char tmpl[] = "/tmp/t_batch.XXXXXX", err[STORE_ERRLEN];
    char *dir = mkdtemp(tmpl);
    struct store_config cfg = {.work_dir = dir, .sync = 1};
    struct store *st = NULL;
    struct store_batch sb;
    struct store_job sj;
    struct seen s;

    if (dir == NULL || ops->open(&st, &cfg, err) != DSJOB_OK)
        tap_bail("open a store in %s: %s", dir ? dir : "?", err);
    s = replay(st);
    tap_ok(s.batches == 0 && s.members == 0, "sqlite: a new store has no batches");

    /* A commit that fails after the tables were made in it: nothing is left. */
    batch_of(&sb, "b0");
    store_sqlite_test_fail_commits(st, true);
    tap_is_int(ops->batch(st, STORE_BATCH_SET, &sb, err), DSJOB_OK, "sqlite: set in a batch");
    tap_ok(ops->flush(st, err) != DSJOB_OK, "sqlite: its commit fails");
    store_sqlite_test_fail_commits(st, false);
    s = replay(st);
    tap_is_int(s.batches, 0, "sqlite: the failed batch's row is not there");

    batch_of(&sb, "b1");
    sb.total = 2;
    job_of(&sj, 7, "b1");
    tap_ok(ops->batch(st, STORE_BATCH_SET, &sb, err) == DSJOB_OK &&
               ops->add(st, &sj, err) == DSJOB_OK,
           "sqlite: a batch and a member job in one batch");
    job_of(&sj, 8, "b1");
    tap_ok(ops->add(st, &sj, err) == DSJOB_OK && ops->flush(st, err) == DSJOB_OK,
           "sqlite: a second member, committed");
    job_of(&sj, 9, NULL);
    tap_ok(ops->add(st, &sj, err) == DSJOB_OK && ops->flush(st, err) == DSJOB_OK,
           "sqlite: a job of no batch");
    s = replay(st);
    tap_ok(s.batches == 1 && s.last.total == 2 && s.members == 2 && s.member_id == 8 &&
               strcmp(s.member_of, "b1") == 0,
           "sqlite: replay gives the batch and its two members (%d, %d)", s.batches, s.members);

    /* Job 7 ends (removed), job 8 goes dead (rewritten): the counters move with them. */
    sb.done = 1;
    sb.dead = 1;
    sb.failed = "H:t:8\n";
    sb.failed_len = 6;
    sb.closed = true;
    sb.fired_complete = true;
    tap_ok(ops->batch(st, STORE_BATCH_SET, &sb, err) == DSJOB_OK &&
               ops->remove(st, 7, err) == DSJOB_OK,
           "sqlite: the counters and a member's remove");
    job_of(&sj, 8, NULL);
    sj.state = STORE_DEAD;
    tap_ok(ops->update(st, &sj, err) == DSJOB_OK && ops->flush(st, err) == DSJOB_OK,
           "sqlite: the other member rewritten dead, committed");
    s = replay(st);
    tap_ok(s.members == 0, "sqlite: their member rows went with their ends");
    tap_ok(s.last.done == 1 && s.last.dead == 1 && s.last.closed && s.last.fired_complete &&
               !s.last.fired_success && strcmp(s.failed, "H:t:8\n") == 0,
           "sqlite: the row has the counters, flags and failed handles");

    /* A delete takes the batch's members (here one that is still live). */
    batch_of(&sb, "b2");
    job_of(&sj, 10, "b2");
    tap_ok(ops->batch(st, STORE_BATCH_SET, &sb, err) == DSJOB_OK &&
               ops->add(st, &sj, err) == DSJOB_OK && ops->flush(st, err) == DSJOB_OK,
           "sqlite: batch b2 with a member");
    tap_ok(ops->batch(st, STORE_BATCH_DELETE, &sb, err) == DSJOB_OK &&
               ops->flush(st, err) == DSJOB_OK,
           "sqlite: b2 deleted");
    s = replay(st);
    tap_ok(s.batches == 1 && s.members == 0, "sqlite: b2 and its member row are gone, b1 stays");
    ops->close(st);

    /* Reopened: the tables are found without a batch op first. */
    if (ops->open(&st, &cfg, err) != DSJOB_OK)
        tap_bail("reopen: %s", err);
    s = replay(st);
    tap_ok(s.batches == 1, "sqlite: after a reopen the batch is replayed");
    job_of(&sj, 11, "b1");
    tap_ok(ops->add(st, &sj, err) == DSJOB_OK && ops->flush(st, err) == DSJOB_OK &&
               replay(st).members == 1,
           "sqlite: and a member added after the reopen is kept");
    ops->close(st);
    {
        char cmd[64];

        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
            tap_diag("could not remove %s", dir);
    }
}
#endif

int
main(void)
{
    test_counts();
#ifdef HAVE_SQLITE
    test_sqlite();
#else
    tap_skip(1, "built without sqlite");
#endif
    return tap_done();
}
