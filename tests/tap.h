/*
 * A small TAP producer for the test programs: plan, ok, is_int, is_str,
 * diag, skip, done_testing. Output goes to stdout and is read by automake's
 * tap-driver.sh. A test program that cannot run (a peer is missing) calls
 * tap_skip_all(), which prints "1..0 # SKIP reason" and exits 0.
 */
#ifndef DSJOB_TESTS_TAP_H
#define DSJOB_TESTS_TAP_H

#include <stdbool.h>
#include <stddef.h>

void tap_plan(int n);
void tap_skip_all(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
bool tap_ok(bool cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool tap_is_int(long long got, long long want, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool tap_is_str(const char *got, const char *want, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool tap_is_mem(const void *got, size_t got_len, const void *want, size_t want_len, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));
void tap_skip(int n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * tap_todo reports a test that is known to fail for the reason given:
 * "not ok N - desc # TODO reason" does not count as a failure.
 */
bool tap_todo(bool cond, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tap_bail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
int tap_done(void); /* prints the plan if none was given; returns the exit status */

/*
 * Parts of a test that wait side by side. tap_part runs fn(arg) in a child
 * process and returns at once; tap_parts_end waits for every part started
 * and prints their lines in the order the parts were started, numbered as
 * if they had run here one after the other. A part's "Bail out!", a crash
 * or a non-zero exit becomes a failed test; a part's lines come out as soon
 * as the parts before it have ended, so a hang still shows how far they
 * got. For independent parts (each with servers of its own) that mostly
 * wait for timers to fire: their waits overlap. At most TAP_MAX_PARTS at
 * once; a part dies with the test (Linux).
 */
#define TAP_MAX_PARTS 32
void tap_part(void (*fn)(void *), void *arg);
void tap_parts_end(void);
/* Each of fns[0..n) as a part, then tap_parts_end: for cases that take no argument. */
void tap_parts_run(void (*const fns[])(void), size_t n);

#endif
