/*
 * Jobs. Everything variable-length lives in the job's own allocation, after
 * the struct, so a queued job costs one malloc however large its payload.
 * The job_ext is a second, small allocation made only for jobs that run,
 * have waiting clients or a time to run at; it lives until the job goes.
 */
#include "config.h"
#include "job.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* put_field copies len bytes of src (NULL if len is 0) and a NUL to at; returns what follows. */
static char *
put_field(char *at, const void *src, size_t len)
{
    if (len > 0)
        memcpy(at, src, len);
    at[len] = '\0';
    return at + len + 1;
}

int
job_handle_format(char *buf, size_t size, const char *prefix, uint64_t id)
{
    int n = snprintf(buf, size, "%s:%0*" PRIu64, prefix, JOB_ID_DIGITS, id);

    return n < 0 || (size_t)n >= size ? -1 : n;
}

struct job *
job_new(const char *handle, size_t handle_len, const void *unique, size_t unique_len,
        const void *reducer, size_t reducer_len, const void *data, size_t data_len)
{
    struct job *j;
    char *at;

    if (handle_len > JOB_HANDLE_MAX || unique_len > UINT32_MAX || reducer_len > UINT16_MAX ||
        data_len > UINT32_MAX)
        return NULL;
    /* Not sizeof(*j): buf may start inside the struct's tail padding. */
    j = malloc(offsetof(struct job, buf) + handle_len + unique_len + reducer_len + data_len + 4);
    if (j == NULL)
        return NULL;
    memset(j, 0, offsetof(struct job, buf));
    j->refs = 1;
    j->state = JOB_NEW;
    j->prio = JOB_PRIO_NORMAL;
    j->handle_len = (uint8_t)handle_len;
    j->unique_len = (uint32_t)unique_len;
    j->reducer_len = (uint16_t)reducer_len;
    j->data_len = (uint32_t)data_len;
    at = put_field(j->buf, handle, handle_len);
    at = put_field(at, unique, unique_len);
    at = put_field(at, reducer, reducer_len);
    put_field(at, data, data_len);
    return j;
}

struct job_ext *
job_ext(struct job *j)
{
    if (j->ext == NULL) {
        j->ext = calloc(1, sizeof(*j->ext));
        if (j->ext == NULL)
            return NULL;
        TAILQ_INIT(&j->ext->waiters);
    }
    return j->ext;
}

int
job_set_when(struct job *j, int64_t when)
{
    if (when == 0 && j->ext == NULL)
        return 0;
    if (job_ext(j) == NULL)
        return -1;
    j->ext->when = when;
    return 0;
}

/*
 * The moves a job makes, by the state it leaves: a bit for each state it
 * may enter. Any job can leave the queue (NEW again); a queued one moves
 * to the tail of another priority's list (QUEUED again).
 */
#define TO(s) (1u << (s))
const uint8_t job_moves[JOB_NSTATES] = {
    [JOB_NEW] = TO(JOB_QUEUED) | TO(JOB_SCHEDULED) | TO(JOB_PENDING),
    /* QUEUED and SCHEDULED end DEAD or DONE when they expire (lifecycle_expire_jobs). */
    [JOB_QUEUED] = TO(JOB_NEW) | TO(JOB_QUEUED) | TO(JOB_RUNNING) | TO(JOB_SETTLING) |
                   TO(JOB_DEAD) | TO(JOB_DONE),
    [JOB_RUNNING] = TO(JOB_NEW) | TO(JOB_QUEUED) | TO(JOB_SCHEDULED) | TO(JOB_SETTLING) |
                    TO(JOB_DEAD) | TO(JOB_DONE),
    [JOB_SCHEDULED] = TO(JOB_NEW) | TO(JOB_QUEUED) | TO(JOB_SETTLING) | TO(JOB_DEAD) | TO(JOB_DONE),
    [JOB_PENDING] = TO(JOB_NEW) | TO(JOB_QUEUED) | TO(JOB_SCHEDULED) | TO(JOB_SETTLING) |
                    TO(JOB_DEAD) | TO(JOB_DONE),
    [JOB_SETTLING] = TO(JOB_NEW) | TO(JOB_DEAD) | TO(JOB_DONE),
    [JOB_DEAD] = TO(JOB_NEW) | TO(JOB_QUEUED) | TO(JOB_SCHEDULED),
    [JOB_DONE] = TO(JOB_NEW),
};
#undef TO

/* Keep len bytes of src (at most max) in *at, freeing what it held; -1 out of memory. */
static int
keep_bytes(unsigned char **at, uint32_t *at_len, const void *src, size_t len, size_t max)
{
    size_t keep = len < max ? len : max;

    free(*at);
    *at = NULL;
    *at_len = 0;
    if (keep == 0)
        return 0;
    *at = malloc(keep);
    if (*at == NULL)
        return -1;
    memcpy(*at, src, keep);
    *at_len = (uint32_t)keep;
    return 0;
}

int
job_set_result(struct job *j, const void *data, size_t len, size_t max)
{
    if (job_ext(j) == NULL)
        return -1;
    j->ext->result_size = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len;
    return keep_bytes(&j->ext->result, &j->ext->result_len, data, len, max);
}

int
job_set_error(struct job *j, const void *text, size_t len, size_t max)
{
    if (job_ext(j) == NULL)
        return -1;
    return keep_bytes(&j->ext->error, &j->ext->error_len, text, len, max);
}

int
job_set_warning(struct job *j, const void *text, size_t len, size_t max)
{
    if (job_ext(j) == NULL)
        return -1;
    return keep_bytes(&j->ext->warning, &j->ext->warning_len, text, len, max);
}

int
job_set_alias(struct job *j, const char *handle, size_t len)
{
    char *copy;

    if (job_ext(j) == NULL || (copy = malloc(len + 1)) == NULL)
        return -1;
    memcpy(copy, handle, len);
    copy[len] = '\0';
    free(j->ext->alias);
    j->ext->alias = copy;
    return 0;
}

int
job_set_row_text(struct job *j, const void *text, size_t len)
{
    if (job_kept_result(j))
        return job_set_result(j, text, len, len);
    return job_set_error(j, text, len, len);
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
        assert(!job_has_waiters(j));
        assert(j->ext == NULL || j->ext->timeout_ev == NULL);
        if (j->ext != NULL) {
            free(j->ext->result);
            free(j->ext->error);
            free(j->ext->warning);
            free(j->ext->alias);
            free(j->ext->batch);
        }
        free(j->ext);
        free(j);
    }
}

unsigned
job_nwaiters(const struct job *j)
{
    const struct waiter *w;
    unsigned n = 0;

    if (j->ext == NULL)
        return 0;
    TAILQ_FOREACH (w, &j->ext->waiters, by_job)
        n++;
    return n;
}

const char *
job_state_name(const struct job *j)
{
    switch ((enum job_state)j->state) {
    case JOB_QUEUED: return "queued";
    case JOB_RUNNING:
    case JOB_SETTLING: return "running";
    case JOB_SCHEDULED: return job_attempts(j) > 0 ? "retrying" : "scheduled";
    case JOB_PENDING: return j->held ? "held" : "pending";
    case JOB_DEAD: return "dead";
    case JOB_DONE: return "done";
    case JOB_NEW: break;
    }
    return "new";
}

static const char *const job_prio_names[JOB_NPRIO] = {"high", "normal", "low"};

const char *
job_prio_name(unsigned prio)
{
    return prio < JOB_NPRIO ? job_prio_names[prio] : "normal";
}

int
job_prio_named(const char *name, size_t len)
{
    int p;

    for (p = 0; p < JOB_NPRIO; p++)
        if (len == strlen(job_prio_names[p]) && strncasecmp(name, job_prio_names[p], len) == 0)
            return p;
    return -1;
}

const char *
job_outcome_name(unsigned outcome)
{
    switch ((enum job_outcome)outcome) {
    case JOB_OUTCOME_COMPLETE: return "complete";
    case JOB_OUTCOME_FAIL: return "fail";
    case JOB_OUTCOME_EXCEPTION: return "exception";
    case JOB_OUTCOME_DEAD: return "dead";
    case JOB_OUTCOME_NONE: break;
    }
    return "-";
}
