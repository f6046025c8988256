/*
 * Retry and drop of dead jobs, by handle or by function: a walk of the
 * function's dead set over lifecycle_revive and lifecycle_drop_ended.
 */
#include "config.h"
#include "job_dead.h"

#include "job.h"
#include "lifecycle.h"
#include "queue.h"
#include "srv.h"

int
job_dead_apply(struct srv *srv, const char *name, size_t len, bool retry, unsigned *done,
               unsigned *held)
{
    struct job *j, *next;
    struct func *f;

    *done = *held = 0;
    j = queue_find_job(&srv->queue, name, len);
    f = j != NULL ? NULL : queue_func(&srv->queue, name, len, false);
    if ((j == NULL || j->state != JOB_DEAD) && f == NULL)
        return -1;
    for (j = j != NULL ? j : TAILQ_FIRST(&f->dead); j != NULL; j = next) {
        next = f != NULL ? TAILQ_NEXT(j, link) : NULL;
        if (!retry) {
            lifecycle_drop_ended(srv, j);
            (*done)++;
        } else if (lifecycle_revive(srv, j) == 0) {
            (*done)++;
        } else {
            (*held)++;
        }
    }
    return 0;
}
