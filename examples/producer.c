/*
 * The dataset's producer (see producer.h): two job functions on
 * libdsjobworker. dataset.shard is the streaming one: each row goes out as a
 * WORK_DATA packet the moment it is made, so a consumer sees the shard grow
 * and a producer never holds a whole shard in memory; the summary in
 * WORK_COMPLETE lets the consumer check what it received. dataset.save
 * writes the shard to a file instead, for background jobs that no client
 * waits for.
 */
#define _POSIX_C_SOURCE 200809L

#include "producer.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STATUS_REPORTS 20 /* WORK_STATUS packets a shard sends, about */

/* Numbers temporary files apart between the threads of one process. */
static atomic_uint tmp_serial;

/* Claims the fault's file: 1 if this process made it (with its pid in it), else 0. */
static int
claim(const char *file)
{
    char tmp[4096], pid[32];
    FILE *f;
    int won;

    snprintf(tmp, sizeof(tmp), "%s.%ld.%u", file, (long)getpid(), atomic_fetch_add(&tmp_serial, 1));
    f = fopen(tmp, "w");
    if (f == NULL)
        return 0;
    snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    fputs(pid, f);
    if (fclose(f) != 0) {
        unlink(tmp);
        return 0;
    }
    /* link(2) fails when the name exists: exactly one producer wins, and the
     * file appears with its pid already in it. */
    won = link(tmp, file) == 0;
    unlink(tmp);
    return won;
}

static void
pause_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Parses the job's spec; on failure sets the exception text and returns -1. */
static int
job_spec(struct dsjob_job *job, struct dataset_spec *spec)
{
    char err[DATASET_ERR_MAX], msg[DATASET_ERR_MAX + 16];
    size_t len;
    const void *p = dsjob_job_payload(job, &len);

    if (dataset_spec_parse(spec, p, len, err) == 0)
        return 0;
    snprintf(msg, sizeof(msg), "bad spec: %s", err);
    dsjob_job_set_result(job, msg, strlen(msg));
    return -1;
}

static int
complete(struct dsjob_job *job, const struct dataset_spec *spec, uint64_t count, uint32_t adler)
{
    struct dataset_summary sum;
    char line[DATASET_SUMMARY_MAX];

    memset(&sum, 0, sizeof(sum));
    memcpy(sum.name, spec->name, sizeof(sum.name));
    sum.shard = spec->shard;
    sum.shards = spec->shards;
    sum.count = count;
    sum.adler32 = adler;
    dataset_summary_format(&sum, line, sizeof(line));
    if (dsjob_job_set_result(job, line, strlen(line)) != DSJOB_OK)
        return DSJOB_WORK_FAIL;
    return DSJOB_WORK_COMPLETE;
}

static int
shard_fn(struct dsjob_job *job, void *user)
{
    const struct producer_opts *o = user;
    struct dataset_spec spec;
    char row[DATASET_ROW_MAX];
    uint64_t k, n, step;
    uint32_t adler = DATASET_ADLER_INIT;

    if (job_spec(job, &spec) < 0)
        return DSJOB_WORK_EXCEPTION;
    n = dataset_shard_count(&spec);
    step = n / STATUS_REPORTS > 0 ? n / STATUS_REPORTS : 1;
    /* Each report is a packet to every waiting client: a consumer adds
     * them up into its progress line. A failed send means the server is
     * gone, and with it the job: it will be given to another producer. */
    if (dsjob_job_status(job, 0, (unsigned)n) != DSJOB_OK)
        return DSJOB_WORK_FAIL;
    for (k = 0; k < n; k++) {
        size_t len = dataset_row(&spec, k, row);

        adler = dataset_adler32(adler, row, len);
        if (o->corrupt.after == k && k > 0 && claim(o->corrupt.file))
            row[len - 2] ^= 0x20; /* the label's last letter, in the other case */
        if (dsjob_job_data(job, row, len) != DSJOB_OK)
            return DSJOB_WORK_FAIL;
        if ((k + 1) % step == 0 && k + 1 < n &&
            dsjob_job_status(job, (unsigned)(k + 1), (unsigned)n) != DSJOB_OK)
            return DSJOB_WORK_FAIL;
        if (o->hold.after == k + 1 && claim(o->hold.file))
            for (;;)
                pause_ms(1000); /* until the test kills this process */
        if (o->fail.after == k + 1 && claim(o->fail.file))
            return DSJOB_WORK_FAIL;
        if (o->slow_ms > 0)
            pause_ms(o->slow_ms);
    }
    if (dsjob_job_status(job, (unsigned)n, (unsigned)n) != DSJOB_OK)
        return DSJOB_WORK_FAIL;
    return complete(job, &spec, n, adler);
}

void
producer_save_path(const char *save_dir, const struct dataset_spec *spec, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s-%u-of-%u.tsv", save_dir, spec->name, (unsigned)spec->shard,
             (unsigned)spec->shards);
}

static int
save_fn(struct dsjob_job *job, void *user)
{
    const struct producer_opts *o = user;
    struct dataset_spec spec;
    char path[4096], tmp[4200], row[DATASET_ROW_MAX], msg[4300];
    uint64_t k, n;
    uint32_t adler = DATASET_ADLER_INIT;
    FILE *f;

    if (job_spec(job, &spec) < 0)
        return DSJOB_WORK_EXCEPTION;
    producer_save_path(o->save_dir, &spec, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld.%u", path, (long)getpid(),
             atomic_fetch_add(&tmp_serial, 1));
    f = fopen(tmp, "w");
    if (f == NULL)
        goto fail;
    n = dataset_shard_count(&spec);
    for (k = 0; k < n; k++) {
        size_t len = dataset_row(&spec, k, row);

        fwrite(row, 1, len, f);
        adler = dataset_adler32(adler, row, len);
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        goto fail;
    dsjob_job_status(job, (unsigned)n, (unsigned)n);
    return complete(job, &spec, n, adler);
fail:
    /* A disk error is worth an exception: retrying on another producer with
     * the same save directory would fail the same way. */
    snprintf(msg, sizeof(msg), "cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
    dsjob_job_set_result(job, msg, strlen(msg));
    return DSJOB_WORK_EXCEPTION;
}

int
producer_register(struct dsjob_worker *w, const struct producer_opts *o)
{
    int err = dsjob_worker_register(w, "dataset.shard", shard_fn, (void *)o, 0);

    if (err == DSJOB_OK && o->save_dir != NULL)
        err = dsjob_worker_register(w, "dataset.save", save_fn, (void *)o, 0);
    return err;
}

void
producer_print(const struct dataset_spec *spec, FILE *f)
{
    struct dataset_summary sum;
    char row[DATASET_ROW_MAX], line[DATASET_SUMMARY_MAX];
    uint64_t k, n = dataset_shard_count(spec);

    for (k = 0; k < n; k++)
        fwrite(row, 1, dataset_row(spec, k, row), f);
    dataset_expect(spec, &sum);
    dataset_summary_format(&sum, line, sizeof(line));
    fputs(line, f);
}
