/*
 * The text admin protocol on the binary port: status, workers, show jobs,
 * maxqueue, cancel, shutdown and the rest, answered in gearmand's format
 * so that gearadmin and monitoring scripts read dsjobd as they read it.
 */
#ifndef DSJOB_SERVER_ADMIN_H
#define DSJOB_SERVER_ADMIN_H

#include <stdbool.h>
#include <stddef.h>

struct conn;
struct job;
struct srv;

/* admin_line answers one admin line (without its newline) from c. */
void admin_line(struct conn *c, const char *line, size_t len);

/*
 * admin_state_name names a job's state as "show job" does (a SETTLING job
 * is "running", a scheduled one that failed before "retrying"); static text.
 */
const char *admin_state_name(const struct job *j);

/* admin_prio_name names a priority: "high", "normal" or "low"; static text. */
const char *admin_prio_name(unsigned prio);

/* admin_outcome_name names a DONE job's outcome ("complete", "fail", ...); static text. */
const char *admin_outcome_name(unsigned outcome);

/*
 * admin_job_ended tells whether j has ended (settling, dead or kept), so
 * that cancelling it is refused: "drop dead" removes a dead one.
 */
bool admin_job_ended(const struct job *j);

/*
 * admin_dead_apply retries (retry true) or drops the dead job whose handle
 * is name, or every dead job of the function name, as "retry dead" and
 * "drop dead" do; *done counts the jobs retried or dropped, *held those a
 * live job's unique key (or no memory) kept dead. -1 when name is neither
 * a dead job nor a function, with nothing done. The caller checks the
 * peer's privilege first.
 */
int admin_dead_apply(struct srv *srv, const char *name, size_t len, bool retry, unsigned *done,
                     unsigned *held);

#endif
