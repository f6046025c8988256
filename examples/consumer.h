/*
 * The dataset's consumer on a libdsjobclient task set, shared by
 * dataset-consumer and dataset-embedded: submits every shard of a dataset
 * at once as a foreground dataset.shard job, prints the rows as they stream
 * in, keeps a progress line on a terminal, resubmits a shard that fails,
 * drops the rows of an attempt that the server restarted (its producer
 * died), and checks each shard's rows against its producer's summary.
 *
 * What it writes to out, one line each, for a program or a test to read:
 *   S<TAB>ROW               a row of shard S as it arrived (ROW is the
 *                           producer's line: id, value, label)
 *   # shard S drop N: WHY   the N rows of shard S printed since its last
 *                           drop line (or the start) belong to an attempt
 *                           that did not complete: forget them
 *   # shard S ok N ADLER    shard S completed and its N rows matched the
 *                           summary (count and Adler-32)
 *   # shard S bad: WHY      shard S did not match, or could not be had
 *   # shard S status N/D    a WORK_STATUS of shard S (only with statuses)
 * So the rows of a shard are those after its last drop line, and each row
 * of a completed shard appears there exactly once. The summary is the
 * WORK_COMPLETE payload or, when that is empty, a last WORK_DATA starting
 * with '{' (as produce.sh under dsjob worker --stream sends it).
 */
#ifndef EXAMPLES_CONSUMER_H
#define EXAMPLES_CONSUMER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <dsjob/client.h>

#include "dataset.h"

enum consumer_progress {
    CONSUMER_PROGRESS_AUTO = 0, /* on stderr when it is a terminal */
    CONSUMER_PROGRESS_FORCE,    /* on stderr anyway */
    CONSUMER_PROGRESS_NEVER,
};

struct consumer_opts {
    struct dataset_spec dataset;     /* name, seed, rows, shards (shard is not used) */
    unsigned attempts;               /* submits of one shard at most (a fail resubmits) */
    enum dsjob_priority prio;        /* of every shard's job */
    enum consumer_progress progress; /* the progress line on stderr */
    FILE *out;                       /* rows and markers; NULL: markers only, on stderr */
    bool statuses;                   /* also a marker line for each WORK_STATUS */
};

struct consumer_result {
    uint32_t ok;               /* shards that completed and matched */
    uint32_t bad;              /* shards that did not */
    uint64_t rows;             /* rows of the shards that matched */
    unsigned resubmits;        /* shards submitted again after a fail */
    unsigned restarts;         /* attempts the server restarted under the consumer */
    char why[DATASET_ERR_MAX]; /* the first shard's trouble, "" if none */
};

/*
 * consumer_run reads the whole dataset through c's servers (c borrowed).
 * Returns 0 when every shard completed and matched its summary, 1 when some
 * did not (see *res), -1 when the task set itself failed (out of memory).
 */
int consumer_run(struct dsjob_client *c, const struct consumer_opts *o,
                 struct consumer_result *res);

#endif
