/*
 * --job-timeout: a worker that takes a job and then says nothing about it
 * loses it after that many seconds, as a CAN_DO_TIMEOUT expiry takes it
 * back: the job runs again on another worker and its client gets the
 * result, and the silent worker's late answer gets JOB_NOT_FOUND. The
 * silent worker is not disconnected. A worker that reports (WORK_STATUS)
 * more often than the timeout keeps its job; a worker's own
 * CAN_DO_TIMEOUT wins over the option; and with the default, 0, a silent
 * worker keeps its job for good, as in gearmand. Waits are bounded; no
 * time is asserted but "not taken back while the worker keeps talking".
 * A worker that sends PRE_SLEEP while it holds a job and has nothing more
 * to do ends that job's CAN_DO_TIMEOUT, as gearmand deletes it then; one
 * that is answered NOOP (more work queued) keeps it, as there.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/peer.h"
#include "tap.h"

static void
sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* The next packet's type on fd within ms, its first argument copied into h. */
static int
next(int fd, int ms, char *h, size_t cap)
{
    struct peer_pkt p;
    int t = peer_recv(fd, &p, ms);

    if (h != NULL)
        snprintf(h, cap, "%.*s", p.nargs > 0 ? (int)p.arg_len[0] : 0,
                 p.nargs > 0 ? (const char *)p.arg[0] : "");
    peer_pkt_release(&p);
    return t;
}

/* A worker of func that takes one job; its handle in h, or false. */
static bool
take(int w, char *h, size_t cap)
{
    peer_send(w, PACKET_GRAB_JOB, 0);
    return next(w, PEER_TIMEOUT_MS, h, cap) == PACKET_JOB_ASSIGN;
}

static void
test_silent(void)
{
    static const char *const args[] = {"--job-timeout", "1", NULL};
    struct daemon d;
    char h[64], h2[64];
    int c, silent, good;

    daemon_start(&d, args);
    c = peer_connect(d.port);
    silent = peer_connect(d.port);
    good = peer_connect(d.port);
    peer_send(silent, PACKET_CAN_DO, 1, "jt");
    peer_send(c, PACKET_SUBMIT_JOB, 3, "jt", "", "work");
    tap_is_int(next(c, PEER_TIMEOUT_MS, NULL, 0), PACKET_JOB_CREATED, "silent: submitted");
    tap_ok(take(silent, h, sizeof(h)), "silent: a worker takes the job (%s) and says nothing", h);
    peer_send(good, PACKET_CAN_DO, 1, "jt");
    peer_send(good, PACKET_PRE_SLEEP, 0);
    tap_is_int(next(good, 10000, NULL, 0), PACKET_NOOP,
               "silent: after --job-timeout another worker is woken for it");
    tap_ok(take(good, h2, sizeof(h2)) && strcmp(h, h2) == 0, "silent: and given the same job");
    peer_send(good, PACKET_WORK_COMPLETE, 2, h2, "done");
    tap_is_int(next(c, PEER_TIMEOUT_MS, NULL, 0), PACKET_WORK_COMPLETE,
               "silent: the client gets the result");
    peer_send(silent, PACKET_WORK_COMPLETE, 2, h, "late");
    tap_is_int(next(silent, PEER_TIMEOUT_MS, h2, sizeof(h2)), PACKET_ERROR,
               "silent: its late answer is refused");
    tap_is_str(h2, "JOB_NOT_FOUND", "silent: as JOB_NOT_FOUND");
    peer_send(silent, PACKET_ECHO_REQ, 1, "still here");
    tap_is_int(next(silent, PEER_TIMEOUT_MS, NULL, 0), PACKET_ECHO_RES,
               "silent: the slow worker is not disconnected");
    close(c), close(silent), close(good);
    tap_is_int(daemon_stop(&d), 0, "silent: dsjobd stops cleanly");
}

static void
test_talking(void)
{
    static const char *const args[] = {"--job-timeout", "2", NULL};
    struct daemon d;
    char h[64];
    int c, w, other, i, heard = 0;

    daemon_start(&d, args);
    c = peer_connect(d.port);
    w = peer_connect(d.port);
    other = peer_connect(d.port);
    peer_send(w, PACKET_CAN_DO, 1, "jt");
    peer_send(other, PACKET_CAN_DO, 1, "jt");
    peer_send(c, PACKET_SUBMIT_JOB, 3, "jt", "", "work");
    tap_is_int(next(c, PEER_TIMEOUT_MS, NULL, 0), PACKET_JOB_CREATED, "talking: submitted");
    tap_ok(take(w, h, sizeof(h)), "talking: a worker takes it");
    for (i = 1; i <= 15; i++) { /* 3 s of WORK_STATUS every 0.2 s, with --job-timeout 2 */
        char num[8];

        snprintf(num, sizeof(num), "%d", i);
        peer_send(w, PACKET_WORK_STATUS, 3, h, num, "15");
        heard += next(c, PEER_TIMEOUT_MS, NULL, 0) == PACKET_WORK_STATUS;
        sleep_ms(200);
    }
    tap_is_int(heard, 15, "talking: the client hears every status");
    peer_send(other, PACKET_GRAB_JOB, 0);
    tap_is_int(next(other, PEER_TIMEOUT_MS, NULL, 0), PACKET_NO_JOB,
               "talking: a worker that keeps reporting keeps its job past --job-timeout");
    peer_send(w, PACKET_WORK_COMPLETE, 2, h, "done");
    tap_is_int(next(c, PEER_TIMEOUT_MS, NULL, 0), PACKET_WORK_COMPLETE, "talking: and finishes it");
    close(c), close(w), close(other);
    tap_is_int(daemon_stop(&d), 0, "talking: dsjobd stops cleanly");
}

/* ext: the option's value; can_do_timeout: the worker's own (ms), or 0. */
static void
test_kept(const char *ext, const char *can_do_timeout, const char *how)
{
    const char *args[] = {"--job-timeout", ext, NULL};
    struct daemon d;
    char h[64];
    int c, w, other;

    daemon_start(&d, args);
    c = peer_connect(d.port);
    w = peer_connect(d.port);
    other = peer_connect(d.port);
    if (can_do_timeout != NULL)
        peer_send(w, PACKET_CAN_DO_TIMEOUT, 2, "jt", can_do_timeout);
    else
        peer_send(w, PACKET_CAN_DO, 1, "jt");
    peer_send(other, PACKET_CAN_DO, 1, "jt");
    peer_send(c, PACKET_SUBMIT_JOB, 3, "jt", "", "work");
    tap_is_int(next(c, PEER_TIMEOUT_MS, NULL, 0), PACKET_JOB_CREATED, "%s: submitted", how);
    tap_ok(take(w, h, sizeof(h)), "%s: a worker takes it and says nothing", how);
    sleep_ms(2500);
    peer_send(other, PACKET_GRAB_JOB, 0);
    tap_is_int(next(other, PEER_TIMEOUT_MS, NULL, 0), PACKET_NO_JOB,
               "%s: 2.5 s later the job is still its", how);
    peer_send(w, PACKET_WORK_COMPLETE, 2, h, "done");
    tap_is_int(next(c, PEER_TIMEOUT_MS, NULL, 0), PACKET_WORK_COMPLETE, "%s: it finishes it", how);
    close(c), close(w), close(other);
    tap_is_int(daemon_stop(&d), 0, "%s: dsjobd stops cleanly", how);
}

/*
 * A worker registered with CAN_DO_TIMEOUT 1000 takes a job, sends
 * PRE_SLEEP, and completes the job 2.5 s later. With nothing else queued
 * it went to sleep and its timeout is over: no NOOP comes (the job was not
 * taken back and offered again) and the completion reaches the client.
 * With a second job queued the PRE_SLEEP is answered NOOP and the timeout
 * stays: the late completion is refused with JOB_NOT_FOUND.
 */
static void
test_pre_sleep(bool more)
{
    const char *how = more ? "PRE_SLEEP answered NOOP" : "PRE_SLEEP";
    struct daemon d;
    struct peer_pkt p;
    char h[64], what[64];
    int c, w, t;

    daemon_start(&d, NULL);
    c = peer_connect(d.port);
    w = peer_connect(d.port);
    peer_send(w, PACKET_CAN_DO_TIMEOUT, 2, "jt", "1000");
    peer_send(c, PACKET_SUBMIT_JOB, 3, "jt", "", "work");
    tap_is_int(next(c, PEER_TIMEOUT_MS, NULL, 0), PACKET_JOB_CREATED, "%s: submitted", how);
    if (more) {
        peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "jt", "", "more");
        tap_is_int(next(c, PEER_TIMEOUT_MS, NULL, 0), PACKET_JOB_CREATED, "%s: a second job queued",
                   how);
    }
    tap_ok(take(w, h, sizeof(h)), "%s: the worker takes the job (%s)", how, h);
    peer_send(w, PACKET_PRE_SLEEP, 0);
    t = next(w, 2500, NULL, 0); /* the job is held 2.5 s in all, on a 1 s timeout */
    if (more) {
        tap_is_int(t, PACKET_NOOP, "%s: work is queued, so the worker is woken at once", how);
        sleep_ms(2500);
    } else {
        tap_is_int(t, 0,
                   "%s: nothing comes in 2.5 s: the job was not taken back and offered "
                   "to the sleeping worker",
                   how);
    }
    peer_send(w, PACKET_WORK_COMPLETE, 2, h, "late");
    if (more) {
        tap_is_int(next(w, PEER_TIMEOUT_MS, what, sizeof(what)), PACKET_ERROR,
                   "%s: the timeout stayed: the late completion is refused", how);
        tap_is_str(what, "JOB_NOT_FOUND", "%s: as JOB_NOT_FOUND", how);
    } else {
        t = peer_recv(c, &p, PEER_TIMEOUT_MS);
        tap_ok(t == PACKET_WORK_COMPLETE && p.nargs == 2 && p.arg_len[1] == 4 &&
                   memcmp(p.arg[1], "late", 4) == 0,
               "%s: the completion 2.5 s later is accepted and reaches the client", how);
        peer_pkt_release(&p);
        peer_send(w, PACKET_ECHO_REQ, 1, "x");
        tap_is_int(next(w, PEER_TIMEOUT_MS, NULL, 0), PACKET_ECHO_RES,
                   "%s: and the worker got no error for it", how);
    }
    close(c), close(w);
    tap_is_int(daemon_stop(&d), 0, "%s: dsjobd stops cleanly", how);
}

static void
part_silent(void *arg)
{
    (void)arg;
    test_silent();
}

static void
part_talking(void *arg)
{
    (void)arg;
    test_talking();
}

static void
part_kept_off(void *arg)
{
    (void)arg;
    test_kept("0", NULL, "off");
}

static void
part_kept_can_do(void *arg)
{
    (void)arg;
    test_kept("1", "60000", "CAN_DO_TIMEOUT wins");
}

static void
part_pre_sleep(void *arg)
{
    test_pre_sleep(arg != NULL);
}

/*
 * Each case has a server of its own and spends its time waiting for a
 * timeout to pass (or not to fire): they run side by side, as tap parts.
 */
int
main(void)
{
    alarm(120);
    tap_part(part_silent, NULL);
    tap_part(part_talking, NULL);
    tap_part(part_kept_off, NULL);
    tap_part(part_kept_can_do, NULL);
    tap_part(part_pre_sleep, NULL);
    tap_part(part_pre_sleep, "more");
    tap_parts_end();
    return tap_done();
}
