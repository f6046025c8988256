/*
 * Fuzz the worker library's reply handling (libworker over libclient's
 * link). The first input byte says what the job callback does (status,
 * data, warning, a result, and which end); the rest is what the fake server
 * (fakepeer.c) sends: NOOP, NO_JOB, JOB_ASSIGN* and garbage. The worker
 * registers two functions and works up to three jobs. When the worker
 * lets go of the connection the peer stops it, so its reconnect backoff
 * does not hold the run up. Only the public API is used.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <dsjob/worker.h>

#include "fakepeer.h"
#include "fuzz.h"

#define IO_MS 1000

static size_t nbytes; /* bytes the callback saw, so they are read */

static void
stop_worker(void *arg)
{
    dsjob_worker_stop(arg);
}

static int
job_fn(struct dsjob_job *job, void *user)
{
    unsigned what = *(const unsigned *)user;
    const void *p;
    size_t len;

    nbytes += strlen(dsjob_job_function(job)) + strlen(dsjob_job_handle(job));
    nbytes += strlen(dsjob_job_unique(job));
    p = dsjob_job_payload(job, &len);
    if (p == NULL || ((const char *)p)[len] != '\0')
        abort(); /* the payload is documented to be NUL-terminated */
    if (what & 1)
        dsjob_job_status(job, 1, 2);
    if (what & 2)
        dsjob_job_data(job, p, len);
    if (what & 4)
        dsjob_job_warning(job, "w", 1);
    if (what & 8)
        dsjob_job_set_result(job, p, len);
    return (int)(what >> 4 & 3); /* complete, fail, exception, or 3: taken as fail */
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fakepeer_start();
    struct dsjob_worker *w;
    unsigned what;
    int i;

    if (size < 1)
        return 0;
    what = data[0];
    w = dsjob_worker_new();
    if (w == NULL || dsjob_worker_add_server(w, path) != DSJOB_OK)
        abort();
    fakepeer_arm(data + 1, size - 1, stop_worker, w);
    dsjob_worker_set_timeout(w, IO_MS, IO_MS);
    if (what & 64)
        dsjob_worker_set_id(w, "fuzz");
    dsjob_worker_register(w, "f", job_fn, &what, 0);
    dsjob_worker_register(w, "g", job_fn, &what, what & 128 ? 5 : 0);
    for (i = 0; i < 3; i++)
        if (dsjob_worker_work(w, IO_MS) != DSJOB_OK)
            break;
    nbytes += strlen(dsjob_worker_errmsg(w));
    fakepeer_finish();
    dsjob_worker_free(w);
    return 0;
}
