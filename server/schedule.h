/*
 * Periodic schedules: named cron expressions (cron.h) that submit one
 * background job per tick, with the unique key "sched:NAME:TICK" (the
 * tick in UTC, "2026-12-05T10:00:00Z"). They come from --schedule (the
 * command line or the config file), the admin command "schedule", and
 * the store, which keeps them (sqlite, postgres) with the last tick fired.
 * With postgres a tick is claimed in the shared table in the same
 * statement that stores its job, so one server of those sharing it fires
 * each tick, and a tick claimed has its job.
 */
#ifndef DSJOB_SERVER_SCHEDULE_H
#define DSJOB_SERVER_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct conn;
struct job;
struct srv;

#define SCHEDULE_NAME_MAX 64 /* bytes of a schedule's name */

/*
 * schedule_open reads --schedule's lines and starts the timer; with a
 * store that keeps schedules, firing waits until the stored ones are read
 * (and ticks missed while down are run once, for a schedule that says
 * so). -1 with srv->errmsg saying which line is wrong.
 */
int schedule_open(struct srv *srv);

/* schedule_stop stops firing (the server is stopping). */
void schedule_stop(struct srv *srv);

/* schedule_close frees the schedules; safe if schedule_open was not called. */
void schedule_close(struct srv *srv);

/*
 * schedule_admin runs the admin line "schedule ..." (len bytes, without
 * its newline) for c and writes the answer. Those that change a schedule
 * need c->admin_ok, checked by the caller (schedule_admin_changes).
 */
void schedule_admin(struct conn *c, const char *line, size_t len);

/* schedule_admin_changes says whether admin line is a "schedule" that changes something. */
bool schedule_admin_changes(const char *line, size_t len);

/* schedule_ended notes the end of job j (outcome: enum job_outcome), if a schedule fired it. */
void schedule_ended(struct srv *srv, const struct job *j, unsigned outcome);

/* schedule_json is the schedules as a JSON array (GET /api/schedules), or NULL (memory). */
json_t *schedule_json(struct srv *srv);

/* schedule_count is the number of schedules (the stats gauge). */
unsigned schedule_count(const struct srv *srv);

#endif
