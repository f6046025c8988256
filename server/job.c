/*
 * Jobs. Everything variable-length lives in the job's own allocation, after
 * the struct, so a queued job costs one malloc however large its payload.
 */
#include "config.h"
#include "job.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct job *
job_new(const char *handle, size_t handle_len, const void *unique, size_t unique_len,
        const void *reducer, size_t reducer_len, const void *data, size_t data_len)
{
    struct job *j;
    char *at;

    if (handle_len > JOB_HANDLE_MAX || unique_len > UINT32_MAX || reducer_len > UINT16_MAX)
        return NULL;
    j = malloc(sizeof(*j) + handle_len + unique_len + reducer_len + data_len + 4);
    if (j == NULL)
        return NULL;
    memset(j, 0, sizeof(*j));
    TAILQ_INIT(&j->waiters);
    j->refs = 1;
    j->state = JOB_NEW;
    j->prio = JOB_PRIO_NORMAL;
    j->handle_len = (uint8_t)handle_len;
    j->unique_len = (uint32_t)unique_len;
    j->reducer_len = (uint16_t)reducer_len;
    j->data_len = data_len;
    at = j->buf;
    memcpy(at, handle, handle_len);
    at[handle_len] = '\0';
    at += handle_len + 1;
    if (unique_len)
        memcpy(at, unique, unique_len);
    at[unique_len] = '\0';
    at += unique_len + 1;
    if (reducer_len)
        memcpy(at, reducer, reducer_len);
    at[reducer_len] = '\0';
    at += reducer_len + 1;
    if (data_len)
        memcpy(at, data, data_len);
    at[data_len] = '\0';
    return j;
}

struct job *
job_ref(struct job *j)
{
    j->refs++;
    return j;
}

void
job_unref(struct job *j)
{
    if (j == NULL)
        return;
    assert(j->refs > 0);
    if (--j->refs == 0) {
        assert(TAILQ_EMPTY(&j->waiters));
        assert(j->timeout_ev == NULL);
        free(j);
    }
}

unsigned
job_nwaiters(const struct job *j)
{
    const struct waiter *w;
    unsigned n = 0;

    TAILQ_FOREACH(w, &j->waiters, by_job)
        n++;
    return n;
}
