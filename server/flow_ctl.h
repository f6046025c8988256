/*
 * The server's side of flow control (flow.c is the data): settings from
 * the config file (--limit), the admin commands and HTTP, kept in the
 * store; the clock and the slot hook the queue calls; the timer that wakes
 * a sleeping worker when a rate's token arrives; the log lines.
 */
#ifndef DSJOB_SERVER_FLOW_CTL_H
#define DSJOB_SERVER_FLOW_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct srv;
struct func;
struct qworker;

/*
 * flow_ctl_open gives the queue its clock and slot hook and applies
 * --limit's settings (before the store's replay, whose stored settings,
 * set at run time, replace them). 0, or -1 with srv->errmsg.
 */
int flow_ctl_open(struct srv *srv);

/* flow_ctl_close frees the timers. */
void flow_ctl_close(struct srv *srv);

/* flow_ctl_now_ms is the monotonic clock in ms that rates read. */
int64_t flow_ctl_now_ms(void);

/*
 * flow_ctl_apply applies a settings line (flow_conf_parse's words) to f,
 * as "limit" and "pause" do: logged (a pause or resume at NOTICE), stored
 * with the next commit when store, sleeping workers woken when more may
 * start. 0, or -1 with err (errlen bytes).
 */
int flow_ctl_apply(struct srv *srv, struct func *f, const char *words, bool store, char *err,
                   size_t errlen);

/* flow_ctl_replay applies a stored settings line at start; logged if bad. */
void flow_ctl_replay(struct srv *srv, struct func *f, const char *words);

/*
 * flow_ctl_wake: a job of f (which has a struct flow) was queued: wake one
 * sleeping worker if it may start, or arm the token timer.
 */
void flow_ctl_wake(struct func *f);

/*
 * flow_ctl_held: worker w got NO_JOB or goes to sleep: count and log (at
 * DEBUG) its functions whose queued jobs are held back, and arm the token
 * timer.
 */
void flow_ctl_held(struct srv *srv, const struct qworker *w);

/*
 * flow_ctl_sync follows the settings another server sharing the store
 * stored: rows holds n functions, each its name then its settings line
 * (NUL-terminated, back to back). A function whose settings differ takes
 * the row's; one with settings and no row takes --limit's (or none).
 */
void flow_ctl_sync(struct srv *srv, const char *rows, size_t n);

/* flow_ctl_arm arms the token timer for the first function whose sleepers wait for a token. */
void flow_ctl_arm(struct srv *srv);

/*
 * flow_ctl_show writes f's settings and state as one line (admin "limit
 * F"), tab-separated: FUNCTION, SETTINGS ("none" without), RUNNING,
 * QUEUED, TOKENS ("-" without a rate), KEYS, HELD (why its queued jobs may
 * not start, or "no"), STARTED (jobs its flow let start).
 */
void flow_ctl_show(struct srv *srv, struct func *f, char *buf, size_t len);

#endif
