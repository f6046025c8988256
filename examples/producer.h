/*
 * The dataset's producer as libdsjobworker job functions, shared by
 * dataset-producer (a worker process) and dataset-embedded (producer
 * threads inside the program that runs the server).
 *
 *   dataset.shard  payload: a spec (dataset.h). Streams each row of the
 *                  shard as one WORK_DATA as soon as it is made, reports
 *                  WORK_STATUS rows/count about twenty times, and ends with
 *                  WORK_COMPLETE carrying the summary line. A bad spec is a
 *                  WORK_EXCEPTION with the reason.
 *   dataset.save   payload: a spec. Writes the shard's rows to
 *                  SAVE_DIR/NAME-SHARD-of-SHARDS.tsv (through a temporary
 *                  file and a rename, so a file that exists is whole) and
 *                  completes with the summary; meant for background jobs.
 */
#ifndef EXAMPLES_PRODUCER_H
#define EXAMPLES_PRODUCER_H

#include <stdint.h>
#include <stdio.h>

#include <dsjob/worker.h>

#include "dataset.h"

/*
 * A fault to inject, for the tests: the first producer (of all those given
 * the same file) to have sent `after` rows of a shard creates file, with its
 * pid in it, and then holds the job until it is killed (hold), fails it
 * with WORK_FAIL (fail), or sends the next row with its last letter changed
 * while its summary counts the row as it should be (corrupt: what a broken
 * link would do). The others go on as usual.
 */
struct producer_fault {
    uint64_t after;   /* rows sent before the fault; 0: no fault */
    const char *file; /* the claim: made with link(2), so only one producer wins */
};

struct producer_opts {
    const char *save_dir;          /* register dataset.save, writing here; NULL: do not */
    unsigned slow_ms;              /* pause between rows, to watch the progress; 0: none */
    struct producer_fault hold;    /* hold the job until killed */
    struct producer_fault fail;    /* fail the job */
    struct producer_fault corrupt; /* damage one row */
};

/*
 * producer_register registers dataset.shard (and dataset.save when
 * o->save_dir is set) on w. o is borrowed and must outlive w's jobs. The
 * functions keep no state between jobs, so any concurrency is fine.
 * Returns DSJOB_OK or the error of dsjob_worker_register.
 */
int producer_register(struct dsjob_worker *w, const struct producer_opts *o);

/* producer_save_path writes the path dataset.save uses for spec into buf. */
void producer_save_path(const char *save_dir, const struct dataset_spec *spec, char *buf,
                        size_t cap);

/*
 * producer_print writes to f what `dsjob submit dataset.shard SPEC` prints
 * when the shard is made by a producer: every row, then the summary line.
 */
void producer_print(const struct dataset_spec *spec, FILE *f);

#endif
