/*
 * The text admin protocol on the binary port: status, workers, show jobs,
 * maxqueue, cancel, shutdown and the rest, answered in gearmand's format
 * so that gearadmin and monitoring scripts read dsjobd as they read it.
 */
#ifndef DSJOB_SERVER_ADMIN_H
#define DSJOB_SERVER_ADMIN_H

#include <stddef.h>

struct conn;
struct job;

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

#endif
