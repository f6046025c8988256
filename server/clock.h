/*
 * The server's clocks, for every module: the wall clock (epoch jobs, the
 * store's times), the monotonic one (timeouts that must not jump), and
 * the loop's cached wall clock (latencies, cheap on every job).
 */
#ifndef DSJOB_SERVER_CLOCK_H
#define DSJOB_SERVER_CLOCK_H

#include <stdint.h>

struct event_base;

/* clock_now returns the wall clock in seconds, for epoch jobs. */
int64_t clock_now(void);

/* clock_now_ms returns the wall clock in milliseconds, for waits shorter than a second. */
int64_t clock_now_ms(void);

/* clock_uptime returns monotonic seconds (never 0), for timeouts that must not jump. */
int64_t clock_uptime(void);

/*
 * clock_loop_ms returns base's cached wall clock (the time its loop turn
 * began) in ms, or the wall clock without a base; it wraps: only
 * differences count.
 */
uint32_t clock_loop_ms(struct event_base *base);

#endif
