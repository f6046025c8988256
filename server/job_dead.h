/*
 * The dead set as an operator works it: retry or drop one dead job, or
 * every dead job of a function. Admin "retry dead" and "drop dead" and
 * HTTP's POST /api/dead/NAME/retry and /drop run the same code, here.
 */
#ifndef DSJOB_SERVER_JOB_DEAD_H
#define DSJOB_SERVER_JOB_DEAD_H

#include <stdbool.h>
#include <stddef.h>

struct srv;

/*
 * job_dead_apply retries (retry true) or drops the dead job whose handle
 * is name, or every dead job of the function name; *done counts the jobs
 * retried or dropped, *held those a live job's unique key (or no memory)
 * kept dead. -1 when name is neither a dead job nor a function, with
 * nothing done. The caller checks the peer's privilege first.
 */
int job_dead_apply(struct srv *srv, const char *name, size_t len, bool retry, unsigned *done,
                   unsigned *held);

#endif
