/*
 * Job semantics of a real dsjobd, driven by raw peers so that each packet
 * is visible: wake-ups (one sleeper per job, NOOP at PRE_SLEEP when work is
 * waiting), epoch jobs run by a timer, requeue when a worker dies, the
 * --job-retries limit, coalescing (unique keys and gearmand's "-"),
 * exceptions vs a clean WORK_FAIL, status by handle and by unique, a
 * foreground job dropped when its client leaves, maxqueue, the admin
 * permission rule, --max-connections, --max-jobs and --max-queue, and
 * shutdown.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "lib/peer.h"
#include "tap.h"

static int port;

/* Nothing arrives on fd within ms. */
static bool
quiet(int fd, int ms)
{
    struct pollfd pfd = {fd, POLLIN, 0};

    return poll(&pfd, 1, ms) == 0;
}

static int
worker(const char *func)
{
    int fd = peer_connect(port);

    peer_send(fd, PACKET_CAN_DO, 1, func);
    return fd;
}

/*
 * settled: waits until GET_STATUS says job handle no longer runs (a job
 * whose end has not committed yet still does), at most 120 s: its end is
 * then durable. False if it never came.
 */
static bool
settled(const char *handle)
{
    int fd = peer_connect(port), i;
    bool done = false;

    for (i = 0; i < 24000 && !done; i++) {
        struct peer_pkt p;

        peer_send(fd, PACKET_GET_STATUS, 1, handle);
        if (peer_recv(fd, &p, PEER_TIMEOUT_MS) == PACKET_STATUS_RES && p.nargs > 2)
            done = p.arg[2][0] == '0';
        peer_pkt_release(&p);
        if (!done)
            usleep(5000);
    }
    close(fd);
    if (!done)
        tap_diag("job %s did not settle", handle);
    return done;
}

static int
sleeping_worker(const char *func)
{
    int fd = worker(func);

    peer_send(fd, PACKET_GRAB_JOB, 0);
    peer_recv_type(fd, PACKET_NO_JOB, NULL, 0, PEER_TIMEOUT_MS);
    peer_send(fd, PACKET_PRE_SLEEP, 0);
    peer_send(fd, PACKET_ECHO_REQ, 1, "asleep"); /* answered once PRE_SLEEP was read */
    peer_recv_type(fd, PACKET_ECHO_RES, NULL, 0, PEER_TIMEOUT_MS);
    return fd;
}

static void
submit(int fd, uint32_t type, const char *func, const char *unique, const char *data, char *handle,
       size_t cap)
{
    peer_send(fd, type, 3, func, unique, data);
    if (!peer_recv_type(fd, PACKET_JOB_CREATED, handle, cap, PEER_TIMEOUT_MS))
        tap_diag("no JOB_CREATED for %s", func);
}

static void
test_wake_one(void)
{
    int w[3], c = peer_connect(port), i, woken = 0;
    char h[128];

    for (i = 0; i < 3; i++)
        w[i] = sleeping_worker("wake");
    submit(c, PACKET_SUBMIT_JOB_BG, "wake", "", "x", h, sizeof(h));
    for (i = 0; i < 3; i++)
        if (peer_recv_type(w[i], PACKET_NOOP, NULL, 0, i == 0 ? 2000 : 300))
            woken++;
    tap_is_int(woken, 1, "one new job wakes one of three sleeping workers");
    peer_send(w[0], PACKET_GRAB_JOB, 0);
    tap_ok(peer_recv_type(w[0], PACKET_JOB_ASSIGN, NULL, 0, PEER_TIMEOUT_MS),
           "the woken worker gets it");
    peer_send(w[1], PACKET_GRAB_JOB, 0);
    peer_recv_type(w[1], PACKET_NO_JOB, NULL, 0, PEER_TIMEOUT_MS);
    submit(c, PACKET_SUBMIT_JOB_BG, "wake", "", "y", h, sizeof(h));
    peer_send(w[1], PACKET_PRE_SLEEP, 0);
    tap_ok(peer_recv_type(w[1], PACKET_NOOP, NULL, 0, PEER_TIMEOUT_MS),
           "PRE_SLEEP while a job waits is answered with NOOP at once");
    for (i = 0; i < 3; i++)
        close(w[i]);
    close(c);
}

static void
test_epoch(void)
{
    int w = sleeping_worker("epoch"), c = peer_connect(port);
    char when[32], h[128], got[128];
    struct timespec t0, t1;

    snprintf(when, sizeof(when), "%ld", (long)time(NULL) + 2);
    peer_send(c, PACKET_SUBMIT_JOB_EPOCH, 4, "epoch", "", when, "later");
    tap_ok(peer_recv_type(c, PACKET_JOB_CREATED, h, sizeof(h), PEER_TIMEOUT_MS),
           "SUBMIT_JOB_EPOCH: JOB_CREATED");
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tap_ok(quiet(w, 500), "the job does not wake anyone before its time");
    tap_ok(peer_recv_type(w, PACKET_NOOP, NULL, 0, 4000),
           "at its time the sleeping worker is woken (no other job needed)");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    tap_diag("woken %.2f s after submit",
             (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    peer_send(w, PACKET_GRAB_JOB, 0);
    tap_ok(peer_recv_type(w, PACKET_JOB_ASSIGN, got, sizeof(got), PEER_TIMEOUT_MS) &&
               strcmp(got, h) == 0,
           "and gets the epoch job");
    close(w);
    close(c);
}

static void
test_requeue(void)
{
    int w1 = worker("rq"), w2, c = peer_connect(port), i;
    char h[128], got[128] = "";
    struct peer_pkt p;
    bool assigned = false;

    submit(c, PACKET_SUBMIT_JOB, "rq", "", "payload", h, sizeof(h));
    peer_send(w1, PACKET_GRAB_JOB, 0);
    tap_ok(peer_recv_type(w1, PACKET_JOB_ASSIGN, NULL, 0, PEER_TIMEOUT_MS),
           "worker 1 takes the job");
    close(w1); /* dies mid-job */
    w2 = worker("rq");
    for (i = 0; i < 24000 && !assigned; i++) { /* NO_JOB until the server saw it die; 120 s */
        peer_send(w2, PACKET_GRAB_JOB, 0);
        assigned = peer_recv_type(w2, PACKET_JOB_ASSIGN, got, sizeof(got), PEER_TIMEOUT_MS);
        if (!assigned)
            usleep(5000);
    }
    tap_ok(assigned && strcmp(got, h) == 0, "after worker 1 dies, worker 2 gets the same job");
    peer_send(w2, PACKET_WORK_COMPLETE, 2, h, "ok");
    tap_is_int(peer_recv(c, &p, PEER_TIMEOUT_MS), PACKET_WORK_COMPLETE,
               "the client gets the result");
    peer_pkt_release(&p);
    close(w2);
    close(c);
}

/* Perl's Gearman::Worker completes a job that returned "" with just the handle. */
static void
test_complete_without_data(void)
{
    int w = worker("nodata"), c = peer_connect(port);
    char h[128];
    struct peer_pkt p;

    submit(c, PACKET_SUBMIT_JOB, "nodata", "", "x", h, sizeof(h));
    peer_send(w, PACKET_GRAB_JOB, 0);
    peer_recv_type(w, PACKET_JOB_ASSIGN, NULL, 0, PEER_TIMEOUT_MS);
    peer_send(w, PACKET_WORK_COMPLETE, 1, h);
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_WORK_COMPLETE && peer_arg_is(&p, 0, h) &&
               p.arg_len[1] == 0,
           "WORK_COMPLETE with no data argument completes the job with empty data");
    peer_pkt_release(&p);
    peer_send(w, PACKET_ECHO_REQ, 1, "e");
    tap_ok(peer_recv_type(w, PACKET_ECHO_RES, NULL, 0, PEER_TIMEOUT_MS),
           "and the worker is not sent an ERROR");
    close(w);
    close(c);
}

static void
test_coalesce(void)
{
    int c1 = peer_connect(port), c2 = peer_connect(port), c3 = peer_connect(port);
    int w = worker("co");
    char h1[128], h2[128], h3[128], h4[128];
    struct peer_pkt p;

    submit(c1, PACKET_SUBMIT_JOB, "co", "key", "a", h1, sizeof(h1));
    submit(c2, PACKET_SUBMIT_JOB, "co", "key", "b", h2, sizeof(h2));
    tap_is_str(h2, h1, "same function and unique: same handle");
    submit(c3, PACKET_SUBMIT_JOB, "co", "-", "same data", h3, sizeof(h3));
    submit(c3, PACKET_SUBMIT_JOB_BG, "co", "-", "same data", h4, sizeof(h4));
    tap_is_str(h4, h3, "unique \"-\" coalesces on equal payloads");
    submit(c3, PACKET_SUBMIT_JOB_BG, "co", "-", "other data", h4, sizeof(h4));
    tap_ok(strcmp(h4, h3) != 0, "but not on different ones");
    submit(c3, PACKET_SUBMIT_JOB_BG, "co", "", "x", h4, sizeof(h4));
    submit(c3, PACKET_SUBMIT_JOB_BG, "co", "", "x", h2, sizeof(h2));
    tap_ok(strcmp(h4, h2) != 0, "an empty unique never coalesces");
    peer_send(w, PACKET_GRAB_JOB, 0);
    peer_recv_type(w, PACKET_JOB_ASSIGN, h4, sizeof(h4), PEER_TIMEOUT_MS);
    tap_is_str(h4, h1, "the worker gets the coalesced job once");
    peer_send(w, PACKET_WORK_DATA, 2, h1, "chunk");
    peer_send(w, PACKET_WORK_COMPLETE, 2, h1, "result");
    tap_ok(peer_recv(c1, &p, PEER_TIMEOUT_MS) == PACKET_WORK_DATA && peer_arg_is(&p, 1, "chunk"),
           "client 1 gets WORK_DATA");
    peer_pkt_release(&p);
    tap_ok(peer_recv(c1, &p, PEER_TIMEOUT_MS) == PACKET_WORK_COMPLETE &&
               peer_arg_is(&p, 1, "result"),
           "client 1 gets the result");
    peer_pkt_release(&p);
    tap_ok(peer_recv(c2, &p, PEER_TIMEOUT_MS) == PACKET_WORK_DATA, "client 2 gets WORK_DATA too");
    peer_pkt_release(&p);
    tap_ok(peer_recv(c2, &p, PEER_TIMEOUT_MS) == PACKET_WORK_COMPLETE &&
               peer_arg_is(&p, 1, "result"),
           "client 2 gets the same result");
    peer_pkt_release(&p);
    close(c1);
    close(c2);
    close(c3);
    close(w);
}

static void
test_dash_unique(void)
{
    int c = peer_connect(port), w = worker("dash");
    char h[128];
    struct peer_pkt p;

    submit(c, PACKET_SUBMIT_JOB_BG, "dash", "-", "payload", h, sizeof(h));
    peer_send(w, PACKET_GRAB_JOB_UNIQ, 0);
    tap_ok(peer_recv(w, &p, PEER_TIMEOUT_MS) == PACKET_JOB_ASSIGN_UNIQ && peer_arg_is(&p, 2, "-") &&
               peer_arg_is(&p, 3, "payload"),
           "a job submitted with unique \"-\" shows \"-\" to its worker, as in gearmand");
    peer_pkt_release(&p);
    peer_send(c, PACKET_GET_STATUS_UNIQUE, 1, "-");
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_STATUS_RES_UNIQUE && peer_arg_is(&p, 1, "0"),
           "GET_STATUS_UNIQUE \"-\" finds nothing (gearmand)");
    peer_pkt_release(&p);
    close(c);
    close(w);
}

/*
 * Unique "-" (coalesce on the payload) and an explicit unique key equal to
 * a payload are different keys, as in gearmand: each coalesces with its
 * own kind only, and GET_STATUS_UNIQUE looks up explicit keys alone.
 */
static void
test_dash_key_space(void)
{
    int c = peer_connect(port);
    char h1[128], h2[128], h[128];
    struct peer_pkt p;

    submit(c, PACKET_SUBMIT_JOB_BG, "dks", "-", "abc", h1, sizeof(h1));
    submit(c, PACKET_SUBMIT_JOB_BG, "dks", "abc", "zzz", h2, sizeof(h2));
    tap_ok(strcmp(h1, h2) != 0, "unique \"abc\" is not the job of \"-\" with payload abc");
    submit(c, PACKET_SUBMIT_JOB_BG, "dks", "-", "abc", h, sizeof(h));
    tap_is_str(h, h1, "\"-\" with payload abc again coalesces with the first job");
    submit(c, PACKET_SUBMIT_JOB_BG, "dks", "abc", "yyy", h, sizeof(h));
    tap_is_str(h, h2, "unique \"abc\" again coalesces with the second");
    submit(c, PACKET_SUBMIT_JOB_BG, "dks2", "-", "solo", h, sizeof(h));
    peer_send(c, PACKET_GET_STATUS_UNIQUE, 1, "solo");
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_STATUS_RES_UNIQUE && peer_arg_is(&p, 1, "0"),
           "GET_STATUS_UNIQUE of a \"-\" job's payload finds nothing (gearmand)");
    peer_pkt_release(&p);
    close(c);
}

/*
 * A connection has no fixed role, as in gearmand 1.1.20: one that submits
 * may also register, take its own job and complete it, and a worker may
 * ask for status. Only server-only packet types are refused.
 */
static void
test_both_roles(void)
{
    int c = peer_connect(port);
    char h[128], got[128];
    struct peer_pkt p;

    peer_send(c, PACKET_CAN_DO, 1, "both");
    submit(c, PACKET_SUBMIT_JOB, "both", "", "mine", h, sizeof(h));
    peer_send(c, PACKET_GRAB_JOB, 0);
    tap_ok(peer_recv_type(c, PACKET_JOB_ASSIGN, got, sizeof(got), PEER_TIMEOUT_MS) &&
               strcmp(got, h) == 0,
           "a submitting connection may take its own job");
    peer_send(c, PACKET_GET_STATUS, 1, h);
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_STATUS_RES && peer_arg_is(&p, 2, "1"),
           "and, as its worker, ask for its status");
    peer_pkt_release(&p);
    peer_send(c, PACKET_WORK_COMPLETE, 2, h, "done");
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_WORK_COMPLETE && peer_arg_is(&p, 1, "done"),
           "and its WORK_COMPLETE reaches itself as the client");
    peer_pkt_release(&p);
    close(c);
}

static void
test_exception(void)
{
    int ce = peer_connect(port), cf = peer_connect(port), w = worker("exc");
    char h[128], h2[128];
    struct peer_pkt p;

    peer_send(ce, PACKET_OPTION_REQ, 1, "exceptions");
    tap_ok(peer_recv(ce, &p, PEER_TIMEOUT_MS) == PACKET_OPTION_RES &&
               peer_arg_is(&p, 0, "exceptions"),
           "OPTION_REQ exceptions: OPTION_RES exceptions");
    peer_pkt_release(&p);
    peer_send(ce, PACKET_OPTION_REQ, 1, "nonsense");
    tap_ok(peer_recv_type(ce, PACKET_ERROR, NULL, 0, PEER_TIMEOUT_MS), "an unknown option: ERROR");
    submit(ce, PACKET_SUBMIT_JOB, "exc", "u", "d", h, sizeof(h));
    submit(cf, PACKET_SUBMIT_JOB, "exc", "u", "d", h2, sizeof(h2));
    peer_send(w, PACKET_GRAB_JOB, 0);
    peer_recv_type(w, PACKET_JOB_ASSIGN, NULL, 0, PEER_TIMEOUT_MS);
    peer_send(w, PACKET_WORK_EXCEPTION, 2, h, "it broke");
    tap_ok(peer_recv(ce, &p, PEER_TIMEOUT_MS) == PACKET_WORK_EXCEPTION &&
               peer_arg_is(&p, 1, "it broke"),
           "a client that asked gets WORK_EXCEPTION with its text");
    peer_pkt_release(&p);
    tap_ok(peer_recv(cf, &p, PEER_TIMEOUT_MS) == PACKET_WORK_FAIL && p.size == strlen(h) &&
               memcmp(p.arg[0], h, strlen(h)) == 0,
           "one that did not gets a clean WORK_FAIL: the handle, no stray NUL");
    peer_pkt_release(&p);
    close(ce);
    close(cf);
    close(w);
}

static void
test_status(void)
{
    int c = peer_connect(port), w = worker("st");
    char h[128];
    struct peer_pkt p;

    peer_send(c, PACKET_GET_STATUS, 1, "H:nope:0");
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_STATUS_RES &&
               peer_arg_is(&p, 0, "H:nope:0") && peer_arg_is(&p, 1, "0") &&
               peer_arg_is(&p, 2, "0") && peer_arg_is(&p, 3, "0") && peer_arg_is(&p, 4, "0"),
           "GET_STATUS of an unknown handle: 0 0 0 0");
    peer_pkt_release(&p);
    submit(c, PACKET_SUBMIT_JOB_BG, "st", "skey", "d", h, sizeof(h));
    peer_send(c, PACKET_GET_STATUS, 1, h);
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_STATUS_RES && peer_arg_is(&p, 1, "1") &&
               peer_arg_is(&p, 2, "0"),
           "queued: known, not running");
    peer_pkt_release(&p);
    peer_send(w, PACKET_GRAB_JOB, 0);
    peer_recv_type(w, PACKET_JOB_ASSIGN, NULL, 0, PEER_TIMEOUT_MS);
    peer_send(w, PACKET_WORK_STATUS, 3, h, "3", "7");
    usleep(50000);
    peer_send(c, PACKET_GET_STATUS, 1, h);
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_STATUS_RES && peer_arg_is(&p, 1, "1") &&
               peer_arg_is(&p, 2, "1") && peer_arg_is(&p, 3, "3") && peer_arg_is(&p, 4, "7"),
           "running with WORK_STATUS 3/7: 1 1 3 7");
    peer_pkt_release(&p);
    peer_send(c, PACKET_GET_STATUS_UNIQUE, 1, "skey");
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_STATUS_RES_UNIQUE &&
               peer_arg_is(&p, 0, "skey") && peer_arg_is(&p, 1, "1") && peer_arg_is(&p, 2, "1") &&
               peer_arg_is(&p, 3, "3") && peer_arg_is(&p, 4, "7") && peer_arg_is(&p, 5, "0"),
           "GET_STATUS_UNIQUE: known, running, 3/7, no waiting clients");
    peer_pkt_release(&p);
    peer_send(w, PACKET_WORK_COMPLETE, 2, h, "");
    usleep(50000);
    peer_send(c, PACKET_GET_STATUS, 1, h);
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_STATUS_RES && peer_arg_is(&p, 1, "0"),
           "done: unknown again");
    peer_pkt_release(&p);
    close(c);
    close(w);
}

static void
test_client_gone(void)
{
    int c = peer_connect(port), a = peer_connect(port);
    char h[128], buf[4096];

    submit(c, PACKET_SUBMIT_JOB, "gone", "", "d", h, sizeof(h));
    peer_admin(a, "status", true, buf, sizeof(buf));
    tap_ok(strstr(buf, "gone\t1\t0\t0\n") != NULL, "a foreground job is queued");
    close(c);
    usleep(100000);
    peer_admin(a, "status", true, buf, sizeof(buf));
    tap_ok(strstr(buf, "gone\t0\t0\t0\n") != NULL,
           "its client leaves before a worker took it: dropped");
    close(a);
}

static void
test_maxqueue(void)
{
    int c = peer_connect(port);
    char buf[512], h[128];
    struct peer_pkt p;

    peer_admin(c, "maxqueue mq 1", false, buf, sizeof(buf));
    tap_is_str(buf, "OK\r\n", "maxqueue mq 1: OK");
    submit(c, PACKET_SUBMIT_JOB_BG, "mq", "", "1", h, sizeof(h));
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "mq", "", "2");
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_ERROR && peer_arg_is(&p, 0, "QUEUE_ERROR") &&
               p.nargs == 2 && memmem(p.arg[1], p.arg_len[1], "maxqueue", 8) != NULL,
           "a second job: ERROR QUEUE_ERROR naming the maxqueue limit");
    peer_pkt_release(&p);
    peer_admin(c, "maxqueue mq 0 0 5", false, buf, sizeof(buf));
    tap_is_str(buf, "OK\r\n", "maxqueue with three limits: OK");
    peer_send(c, PACKET_SUBMIT_JOB_LOW_BG, 3, "mq", "", "3");
    tap_ok(peer_recv_type(c, PACKET_JOB_CREATED, NULL, 0, PEER_TIMEOUT_MS),
           "low priority has its own limit");
    close(c);
}

static void
test_admin_denied(void)
{
    static const char *const args[] = {"--admin-allow", "10.0.0.0/8", NULL};
    struct daemon d;
    int c;
    char buf[512];

    daemon_start(&d, args);
    c = peer_connect(d.port);
    peer_admin(c, "shutdown", false, buf, sizeof(buf));
    tap_ok(strncmp(buf, "ERR PERMISSION_DENIED", 21) == 0,
           "with --admin-allow 10.0.0.0/8, shutdown from 127.0.0.1 is refused: %.60s", buf);
    peer_admin(c, "drop function x", false, buf, sizeof(buf));
    tap_ok(strncmp(buf, "ERR PERMISSION_DENIED", 21) == 0, "so is drop function");
    peer_admin(c, "cancel job H:x:1", false, buf, sizeof(buf));
    tap_ok(strncmp(buf, "ERR PERMISSION_DENIED", 21) == 0, "and cancel job");
    peer_admin(c, "maxqueue x 1", false, buf, sizeof(buf));
    tap_ok(strncmp(buf, "ERR PERMISSION_DENIED", 21) == 0, "and maxqueue");
    peer_admin(c, "status", true, buf, sizeof(buf));
    tap_ok(strcmp(buf, ".\n") == 0, "status is still open to everyone");
    tap_ok(daemon_alive(&d), "the server is still up");
    close(c);
    daemon_stop(&d);
}

static void
test_max_connections(void)
{
    static const char *const args[] = {"--max-connections", "2", NULL};
    struct daemon d;
    int a, b, c;
    struct peer_pkt p;

    daemon_start(&d, args);
    a = peer_connect(d.port);
    b = peer_connect(d.port);
    usleep(100000);
    c = peer_connect(d.port);
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_ERROR &&
               peer_arg_is(&p, 0, "TOO_MANY_CONNECTIONS") &&
               memmem(p.arg[1], p.arg_len[1], "--max-connections 2", 19) != NULL,
           "the third connection over --max-connections 2 is told which limit");
    peer_pkt_release(&p);
    tap_ok(peer_closed(c, PEER_TIMEOUT_MS), "and closed");
    close(c);
    close(b);
    close(a);
    usleep(100000);
    tap_ok(peer_run_job(d.port, "mc", "fits"), "once they leave, new connections are served");
    daemon_stop(&d);
}

/*
 * --max-jobs 3 counts jobs of every function, queued and running; a
 * submit that coalesces is no new job; a finished job makes room.
 * --max-queue 1 is each new function's maxqueue until the admin command.
 */
static void
test_max_jobs(void)
{
    static const char *const args[] = {"--max-jobs", "3", "--max-queue", "1", NULL};
    struct daemon d;
    char h[128], h2[128], buf[512];
    struct peer_pkt p;
    int c, w;

    daemon_start(&d, args);
    port = d.port;
    c = peer_connect(port);
    submit(c, PACKET_SUBMIT_JOB_BG, "mj_a", "u1", "1", h, sizeof(h));
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "mj_a", "", "2");
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_ERROR && peer_arg_is(&p, 0, "QUEUE_ERROR") &&
               memmem(p.arg[1], p.arg_len[1], "maxqueue limit of 1", 19) != NULL,
           "--max-queue 1: a function's second job is refused by its maxqueue");
    peer_pkt_release(&p);
    peer_admin(c, "maxqueue mj_a 10", false, buf, sizeof(buf));
    tap_is_str(buf, "OK\r\n", "the admin maxqueue raises it for that function");
    submit(c, PACKET_SUBMIT_JOB_BG, "mj_a", "", "2", h2, sizeof(h2));
    w = worker("mj_b");
    submit(c, PACKET_SUBMIT_JOB_BG, "mj_b", "", "3", h2, sizeof(h2));
    peer_send(w, PACKET_GRAB_JOB, 0);
    tap_ok(peer_recv_type(w, PACKET_JOB_ASSIGN, NULL, 0, PEER_TIMEOUT_MS),
           "three jobs held, one running");
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "mj_c", "", "4");
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_ERROR && peer_arg_is(&p, 0, "QUEUE_ERROR") &&
               memmem(p.arg[1], p.arg_len[1], "--max-jobs", 10) != NULL,
           "--max-jobs 3: a fourth job, of another function, is refused naming --max-jobs");
    peer_pkt_release(&p);
    submit(c, PACKET_SUBMIT_JOB_BG, "mj_a", "u1", "1", buf, sizeof(buf));
    tap_is_str(buf, h, "a submit that coalesces with a held job is not refused");
    peer_send(w, PACKET_WORK_COMPLETE, 2, h2, "done");
    peer_send(w, PACKET_ECHO_REQ, 1, "after");
    peer_recv_type(w, PACKET_ECHO_RES, NULL, 0, PEER_TIMEOUT_MS); /* the completion was handled */
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "mj_c", "", "4");
    tap_ok(peer_recv_type(c, PACKET_JOB_CREATED, NULL, 0, PEER_TIMEOUT_MS),
           "once the running job completes there is room again");
    close(w);
    close(c);
    tap_ok(daemon_alive(&d), "the server stayed up");
    daemon_stop(&d);
}

/*
 * --max-jobs counts what it says: queued, scheduled and running jobs, not
 * the kept results (--keep-results) or the dead sets (--max-dead). It used
 * to count both, so a server with nothing to do refused every submit.
 */
static void
test_max_jobs_ended(void)
{
    static const char *const args[] = {"--max-jobs", "2", "--keep-results", "600", "--max-dead",
                                       "10",         NULL};
    struct daemon d;
    char h[128], buf[512];
    struct peer_pkt p;
    int c, w;

    daemon_start(&d, args);
    port = d.port;
    c = peer_connect(port);
    w = worker("mje");
    submit(c, PACKET_SUBMIT_JOB_BG, "mje", "", "ok", h, sizeof(h));
    submit(c, PACKET_SUBMIT_JOB_BG, "mje", "", "bad", h, sizeof(h));
    peer_send(w, PACKET_GRAB_JOB, 0);
    peer_recv_type(w, PACKET_JOB_ASSIGN, h, sizeof(h), PEER_TIMEOUT_MS);
    peer_send(w, PACKET_WORK_COMPLETE, 2, h, "result");
    peer_send(w, PACKET_GRAB_JOB, 0);
    peer_recv_type(w, PACKET_JOB_ASSIGN, h, sizeof(h), PEER_TIMEOUT_MS);
    peer_send(w, PACKET_WORK_FAIL, 1, h);
    peer_send(w, PACKET_ECHO_REQ, 1, "after");
    peer_recv_type(w, PACKET_ECHO_RES, NULL, 0, PEER_TIMEOUT_MS); /* both ends were handled */
    peer_admin(c, "show dead mje", true, buf, sizeof(buf));
    tap_ok(strstr(buf, h) != NULL, "--max-jobs 2: one job kept, the failed one dead (%s)", h);
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "mje", "", "3");
    tap_ok(peer_recv_type(c, PACKET_JOB_CREATED, NULL, 0, PEER_TIMEOUT_MS),
           "--max-jobs 2: a kept result and a dead job leave room for a new job");
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "mje", "", "4");
    tap_ok(peer_recv_type(c, PACKET_JOB_CREATED, NULL, 0, PEER_TIMEOUT_MS),
           "--max-jobs 2: and for a second one");
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "mje", "", "5");
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_ERROR && peer_arg_is(&p, 0, "QUEUE_ERROR"),
           "--max-jobs 2: a third queued job is refused");
    peer_pkt_release(&p);
    close(w);
    close(c);
    daemon_stop(&d);
}

/*
 * A retry's backoff is never cut short by the run-at time's whole seconds:
 * with --retry-backoff 1,1 the wait is a random point in 0.5-1 s, never the
 * 0.1 s from a failure at .9 of a second to the next whole second. Three
 * jobs fail together just before a second ends; each one's wait until it
 * is handed out again is a sample.
 */
static void
test_backoff_not_early(void)
{
    static const char *const args[] = {"--retry-on", "fail", "--retry-backoff", "1,1", NULL};
    struct daemon d;
    char h[3][128], got[128];
    double least = 1e9, t0;
    struct timeval tv;
    int c, w, i, n, back = 0;

    daemon_start(&d, args);
    port = d.port;
    c = peer_connect(port);
    w = worker("bo");
    for (i = 0; i < 3; i++) {
        submit(c, PACKET_SUBMIT_JOB_BG, "bo", "", "x", h[i], sizeof(h[i]));
        peer_send(w, PACKET_GRAB_JOB, 0);
        peer_recv_type(w, PACKET_JOB_ASSIGN, h[i], sizeof(h[i]), PEER_TIMEOUT_MS);
    }
    for (n = 0; n < 200; n++) { /* at most 2 s: until .9 of a second */
        gettimeofday(&tv, NULL);
        if (tv.tv_usec >= 900000)
            break;
        usleep(5000);
    }
    t0 = peer_now_us();
    for (i = 0; i < 3; i++)
        peer_send(w, PACKET_WORK_FAIL, 1, h[i]);
    for (n = 0; n < 100 && back < 3; n++) { /* NO_JOB until they are due; 5 s at most */
        peer_send(w, PACKET_GRAB_JOB, 0);
        if (peer_recv_type(w, PACKET_JOB_ASSIGN, got, sizeof(got), PEER_TIMEOUT_MS)) {
            double waited = (peer_now_us() - t0) / 1e6;

            if (waited < least)
                least = waited;
            back++;
            n--; /* another may be due too: ask again at once */
        } else {
            usleep(50000);
        }
    }
    if (back < 3)
        least = 0;
    tap_ok(least >= 0.5, "--retry-backoff 1,1: a retry waits at least 0.5 s (shortest %.3f s)",
           least);
    close(w);
    close(c);
    daemon_stop(&d);
}

/*
 * A job's error (show job, dsjob job) is its last failure's text: the
 * WORK_WARNING a worker sends during the next attempt is that attempt's,
 * not a failure. It used to overwrite the failure's text as soon as it came.
 */
static void
test_warning_not_failure(void)
{
    static const char *const args[] = {"--retry-on", "fail", "--max-dead", "5", "-j", "5", NULL};
    struct daemon d;
    char h[128], h2[128], buf[2048], line[200];
    int c, w;

    daemon_start(&d, args);
    port = d.port;
    c = peer_connect(port);
    w = worker("wnf");
    submit(c, PACKET_SUBMIT_JOB_BG, "wnf", "", "x", h, sizeof(h));
    peer_send(w, PACKET_GRAB_JOB, 0);
    peer_recv_type(w, PACKET_JOB_ASSIGN, h2, sizeof(h2), PEER_TIMEOUT_MS);
    peer_send(w, PACKET_WORK_WARNING, 2, h2, "reason one");
    peer_send(w, PACKET_WORK_FAIL, 1, h2);
    peer_send(w, PACKET_GRAB_JOB, 0);
    peer_recv_type(w, PACKET_JOB_ASSIGN, h2, sizeof(h2), PEER_TIMEOUT_MS);
    peer_send(w, PACKET_WORK_WARNING, 2, h2, "progress two");
    peer_send(w, PACKET_ECHO_REQ, 1, "x");
    peer_recv_type(w, PACKET_ECHO_RES, NULL, 0, PEER_TIMEOUT_MS); /* the warning was handled */
    snprintf(line, sizeof(line), "show job %s", h);
    peer_admin(c, line, true, buf, sizeof(buf));
    tap_ok(strstr(buf, "error reason\\x20one\n") != NULL,
           "a retry's WORK_WARNING leaves the last failure's text as the job's error");
    peer_send(w, PACKET_WORK_FAIL, 1, h2);
    peer_send(w, PACKET_GRAB_JOB, 0);
    peer_recv_type(w, PACKET_JOB_ASSIGN, h2, sizeof(h2), PEER_TIMEOUT_MS);
    peer_send(w, PACKET_ECHO_REQ, 1, "x");
    peer_recv_type(w, PACKET_ECHO_RES, NULL, 0, PEER_TIMEOUT_MS);
    peer_admin(c, line, true, buf, sizeof(buf));
    tap_ok(strstr(buf, "error progress\\x20two\n") != NULL,
           "a WORK_FAIL after it fails with that attempt's last warning");
    peer_send(w, PACKET_WORK_COMPLETE, 2, h2, "done");
    close(w);
    close(c);
    daemon_stop(&d);
}

/*
 * A waiter that stops reading is dropped once its output passes
 * --max-output-buffer, in the middle of handing one WORK_DATA to every
 * waiter of the job. The waiters after it must still get every packet and
 * the result, and the server must not touch the dropped waiter again (it
 * once walked on from a freed waiter: ASan's heap-use-after-free).
 */
static void
test_slow_waiter(void)
{
    static const char *const args[] = {"--max-packet-size", "1024", "--max-output-buffer", "1100",
                                       NULL};
    struct daemon d;
    /* chunk: with a 26-byte handle a WORK_DATA still fits --max-packet-size */
    char h[128], ha[128], chunk[960], logpath[300], line[512];
    int a, b, w, i, got = 0, small = 4096;
    bool dropped = false, done = false;
    struct peer_pkt p;
    FILE *fp;

    daemon_start(&d, args);
    port = d.port;
    a = peer_connect(port);
    setsockopt(a, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    b = peer_connect(port);
    w = worker("slow");
    submit(a, PACKET_SUBMIT_JOB, "slow", "k", "x", ha, sizeof(ha));
    submit(b, PACKET_SUBMIT_JOB, "slow", "k", "x", h, sizeof(h));
    tap_is_str(h, ha, "two clients wait for one job, the one that will stop reading first");
    peer_send(w, PACKET_GRAB_JOB, 0);
    peer_recv_type(w, PACKET_JOB_ASSIGN, NULL, 0, PEER_TIMEOUT_MS);
    memset(chunk, 'd', sizeof(chunk) - 1);
    chunk[sizeof(chunk) - 1] = '\0';
    /* 3.8 MB in all: far past what the kernel buffers for a peer that does not read. */
    for (i = 0; i < 4000 && daemon_alive(&d); i++) {
        peer_send(w, PACKET_WORK_DATA, 2, h, chunk);
        if (peer_recv(b, &p, PEER_TIMEOUT_MS) == PACKET_WORK_DATA)
            got++;
        peer_pkt_release(&p);
    }
    peer_send(w, PACKET_WORK_COMPLETE, 2, h, "end");
    done = peer_recv_type(b, PACKET_WORK_COMPLETE, NULL, 0, PEER_TIMEOUT_MS);
    tap_is_int(got, 4000, "the client that reads gets every WORK_DATA");
    tap_ok(done, "and the result");
    snprintf(logpath, sizeof(logpath), "%s/dsjobd.log", d.dir);
    fp = fopen(logpath, "r");
    while (fp != NULL && fgets(line, sizeof(line), fp) != NULL)
        if (strstr(line, "over --max-output-buffer") != NULL)
            dropped = true;
    if (fp != NULL)
        fclose(fp);
    tap_ok(dropped, "the client that does not read was dropped over --max-output-buffer");
    tap_ok(daemon_alive(&d), "and the server is still serving");
    close(a);
    close(b);
    close(w);
    daemon_stop(&d);
}

static void
test_retries(void)
{
    static const char *const args[] = {"--job-retries", "2", NULL};
    struct daemon d;
    int c, w, i;
    char h[128];
    struct peer_pkt p;

    daemon_start(&d, args);
    port = d.port;
    c = peer_connect(port);
    submit(c, PACKET_SUBMIT_JOB, "poison", "", "d", h, sizeof(h));
    for (i = 0; i < 2; i++) {
        w = worker("poison");
        peer_send(w, PACKET_GRAB_JOB, 0);
        tap_ok(peer_recv_type(w, PACKET_JOB_ASSIGN, NULL, 0, PEER_TIMEOUT_MS), "attempt %d taken",
               i + 1);
        close(w);
    }
    tap_ok(peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_WORK_FAIL && peer_arg_is(&p, 0, h),
           "--job-retries 2: after two lost attempts the client gets WORK_FAIL");
    peer_pkt_release(&p);
    close(c);
    daemon_stop(&d);
}

static void
test_shutdown(void)
{
    struct daemon d;
    int c, i;
    char buf[256];

    daemon_start(&d, NULL);
    c = peer_connect(d.port);
    peer_admin(c, "shutdown", false, buf, sizeof(buf));
    tap_is_str(buf, "OK\r\n", "shutdown from loopback: OK");
    tap_ok(peer_closed(c, PEER_TIMEOUT_MS), "then the connection closes");
    close(c);
    for (i = 0; i < 24000 && daemon_alive(&d); i++) /* 120 s at most */
        usleep(5000);
    tap_ok(!daemon_alive(&d), "and the server has exited");
    daemon_stop(&d);
}

#ifdef HAVE_SQLITE
/* work_dir_make makes the directory of the mkdtemp template dir; wd gets its var/ path. */
static void
work_dir_make(char *dir, char *wd, size_t wdlen)
{
    if (mkdtemp(dir) == NULL)
        tap_bail("mkdtemp: %s", strerror(errno));
    snprintf(wd, wdlen, "%s/var", dir);
}

/* work_dir_remove removes dir with everything dsjobd wrote in it. */
static void
work_dir_remove(const char *dir)
{
    char cmd[300];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        tap_diag("could not remove %s", dir);
}

/* admin_until polls admin line on fd (5 ms apart, 120 s at most) until its reply holds want. */
static bool
admin_until(int fd, const char *line, const char *want, bool present)
{
    char buf[2048];
    int i;

    for (i = 0; i < 24000; i++) {
        peer_admin(fd, line, true, buf, sizeof(buf));
        if ((strstr(buf, want) != NULL) == present)
            return true;
        usleep(5000);
    }
    tap_diag("\"%s\" never %s \"%s\"", line, present ? "showed" : "stopped showing", want);
    return false;
}

/* kick: one more background submit from a connection of its own, the second waiter of a batch. */
static void
kick(void)
{
    int k = peer_connect(port);
    char h[128];

    submit(k, PACKET_SUBMIT_JOB_BG, "kick", "", "k", h, sizeof(h));
    close(k);
}

/*
 * drop function while a background job of it waits for its store commit:
 * the drop is refused (the commit would write into the freed function) and
 * the job is still acknowledged and runs afterwards. A commit waits 10 s
 * (--store-commit-interval, its longest) unless a second waiter fills the
 * batch (--store-batch 2): what is pending stays pending until kick()
 * sends it.
 */
static void
test_drop_pending(void)
{
    char dir[] = "/tmp/dsjob-drop.XXXXXX", wd[300], h[128], buf[512];
    const char *args[] = {"--work-dir", wd,  "--store-commit-interval", "10000", "--store-batch",
                          "2",          NULL};
    struct daemon d;
    int a, c, w;
    bool echoed;

    work_dir_make(dir, wd, sizeof(wd));
    daemon_start(&d, args);
    port = d.port;
    a = peer_connect(d.port);
    c = peer_connect(d.port);
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "dropme", "", "d");
    admin_until(a, "status", "dropme\t1\t", true); /* the job is in, its commit 10 s away */
    peer_admin(a, "drop function dropme", false, buf, sizeof(buf));
    tap_ok(strncmp(buf, "ERR ", 4) == 0 && strstr(buf, "store") != NULL,
           "drop function with a job waiting for its commit is refused: %.70s", buf);
    kick();
    tap_ok(peer_recv_type(c, PACKET_JOB_CREATED, h, sizeof(h), PEER_TIMEOUT_MS),
           "the job is acknowledged once committed");
    peer_admin(a, "status", true, buf, sizeof(buf));
    tap_ok(strstr(buf, "dropme\t1\t0\t0\n") != NULL, "status shows it queued");
    w = peer_connect(d.port);
    peer_send(w, PACKET_CAN_DO, 1, "dropme");
    peer_send(w, PACKET_GRAB_JOB, 0);
    tap_ok(peer_recv_type(w, PACKET_JOB_ASSIGN, NULL, 0, PEER_TIMEOUT_MS), "and a worker gets it");
    peer_send(w, PACKET_WORK_COMPLETE, 2, h, "");
    peer_send(w, PACKET_ECHO_REQ, 1, "next");
    echoed = peer_recv_type(w, PACKET_ECHO_RES, NULL, 0, PEER_TIMEOUT_MS); /* the end was read */
    peer_admin(a, "status", true, buf, sizeof(buf));
    tap_ok(strstr(buf, "dropme\t1\t1\t1\n") != NULL,
           "done, but its deletion not yet committed: status still counts it");
    tap_ok(echoed, "the worker's next request is answered while that commit is pending");
    kick();
    tap_ok(settled(h), "GET_STATUS says it runs until the commit, then not");
    peer_admin(a, "status", true, buf, sizeof(buf));
    tap_ok(strstr(buf, "dropme\t0\t0\t1\n") != NULL, "then status shows it gone");
    close(w);
    admin_until(a, "status", "dropme\t0\t0\t0\n", true); /* its worker has gone */
    peer_admin(a, "drop function dropme", false, buf, sizeof(buf));
    tap_is_str(buf, "OK\r\n", "once its deletion has committed, the function can be dropped");
    tap_ok(daemon_alive(&d), "the server stayed up");
    close(a);
    close(c);
    tap_is_int(daemon_stop(&d), 0, "and stops cleanly");
    work_dir_remove(dir);
}

/*
 * A job that is done stays done: four durable jobs, a worker completes two
 * and status shows two left; then kill -9 and a restart on the same store.
 * Exactly the two not completed come back (gearmand -q libsqlite3 does the
 * same); the two that status showed gone do not run again.
 */
static void
test_done_stays_done(void)
{
    char dir[] = "/tmp/dsjob-done.XXXXXX", wd[300], h[4][128], got[128], buf[512];
    const char *args[] = {"--work-dir", wd, NULL};
    struct daemon d;
    struct peer_pkt p;
    int a, c, w, i, status, left = 0;

    work_dir_make(dir, wd, sizeof(wd));
    daemon_start(&d, args);
    port = d.port;
    c = peer_connect(d.port);
    for (i = 0; i < 4; i++) {
        char data[8];

        snprintf(data, sizeof(data), "j%d", i);
        submit(c, PACKET_SUBMIT_JOB_BG, "stay", "", data, h[i], sizeof(h[i]));
    }
    w = worker("stay");
    for (i = 0; i < 2; i++) {
        peer_send(w, PACKET_GRAB_JOB, 0);
        peer_recv_type(w, PACKET_JOB_ASSIGN, got, sizeof(got), PEER_TIMEOUT_MS);
        peer_send(w, PACKET_WORK_COMPLETE, 2, got, "done");
        settled(got); /* observed: GET_STATUS says it no longer runs */
    }
    a = peer_connect(d.port);
    peer_admin(a, "status", true, buf, sizeof(buf));
    tap_ok(strstr(buf, "stay\t2\t0\t1\n") != NULL, "two completed: status shows two left");
    kill(d.pid, SIGKILL);
    waitpid(d.pid, &status, 0);
    close(a);
    close(c);
    close(w);

    daemon_start(&d, args);
    port = d.port;
    a = peer_connect(d.port);
    peer_admin(a, "status", true, buf, sizeof(buf));
    tap_ok(strstr(buf, "stay\t2\t0\t0\n") != NULL,
           "after kill -9 and a restart, exactly those two are back: %.40s", buf);
    w = worker("stay");
    for (i = 0; i < 4; i++) {
        peer_send(w, PACKET_GRAB_JOB, 0);
        if (peer_recv(w, &p, PEER_TIMEOUT_MS) != PACKET_JOB_ASSIGN) {
            peer_pkt_release(&p);
            break;
        }
        snprintf(got, sizeof(got), "%.*s", (int)p.arg_len[0], (const char *)p.arg[0]);
        peer_pkt_release(&p);
        left += strcmp(got, h[2]) == 0 || strcmp(got, h[3]) == 0;
        peer_send(w, PACKET_WORK_COMPLETE, 2, got, "done");
    }
    tap_is_int(left, 2, "and they are the two never completed");
    tap_is_int(i, 2, "nothing else runs");
    close(a);
    close(w);
    tap_is_int(daemon_stop(&d), 0, "the restarted server stops cleanly");
    work_dir_remove(dir);
}

/*
 * Answers to a durable submitter keep their order: a background submit
 * waits for its commit, and the refusal of the submit pipelined behind it
 * (an empty function name) comes after its JOB_CREATED, not before.
 */
static void
test_refusal_order(void)
{
    char dir[] = "/tmp/dsjob-order.XXXXXX", wd[300];
    const char *args[] = {"--work-dir", wd, "--store-commit-interval", "300", NULL};
    struct daemon d;
    struct peer_pkt p;
    int c, t1, t2;

    work_dir_make(dir, wd, sizeof(wd));
    daemon_start(&d, args);
    port = d.port;
    c = peer_connect(d.port);
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "ordered", "", "first");
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "", "", "no name");
    t1 = peer_recv(c, &p, PEER_TIMEOUT_MS);
    peer_pkt_release(&p);
    t2 = peer_recv(c, &p, PEER_TIMEOUT_MS);
    tap_ok(t1 == PACKET_JOB_CREATED && t2 == PACKET_ERROR && peer_arg_is(&p, 0, "INVALID_ARGUMENT"),
           "a durable submit's JOB_CREATED comes before the refusal pipelined behind it (%d, %d)",
           t1, t2);
    peer_pkt_release(&p);
    close(c);
    tap_is_int(daemon_stop(&d), 0, "and the server stops cleanly");
    work_dir_remove(dir);
}

/*
 * end_one: a worker of func takes the next job and ends it with type
 * (WORK_FAIL or WORK_COMPLETE "res"), and waits until that end has
 * committed, so the job has settled when this returns.
 */
static void
end_one(const char *func, uint32_t type)
{
    char h[128];
    int w = worker(func);

    peer_send(w, PACKET_GRAB_JOB, 0);
    if (!peer_recv_type(w, PACKET_JOB_ASSIGN, h, sizeof(h), PEER_TIMEOUT_MS))
        tap_diag("no job of %s to end", func);
    if (type == PACKET_WORK_FAIL)
        peer_send(w, type, 1, h);
    else
        peer_send(w, type, 2, h, "res");
    settled(h);
    close(w);
}

/*
 * Jobs that have ended: cancel job of a dead or kept job is refused
 * (it crashed the server), the newest kept result of a unique key is the
 * one found after the index grows, and drop function of a function whose
 * stored jobs it cancels waits for their deletion instead of aborting.
 */
static void
test_ended_jobs(void)
{
    char dir[] = "/tmp/dsjob-ended.XXXXXX", wd[300], dead[128], kept[2][128], h[128], line[160];
    char buf[2048];
    const char *args[] = {"--work-dir", wd,   "--retry-on",     "fail", "-j", "1",
                          "--max-dead", "10", "--keep-results", "3600", NULL};
    struct daemon d;
    int a, c, i;

    work_dir_make(dir, wd, sizeof(wd));
    daemon_start(&d, args);
    port = d.port;
    a = peer_connect(d.port);
    c = peer_connect(d.port);
    submit(c, PACKET_SUBMIT_JOB_BG, "ended", "k1", "x", dead, sizeof(dead));
    end_one("ended", PACKET_WORK_FAIL);
    submit(c, PACKET_SUBMIT_JOB_BG, "ended", "k2", "x", kept[0], sizeof(kept[0]));
    end_one("ended", PACKET_WORK_COMPLETE);
    snprintf(line, sizeof(line), "cancel job %s", dead);
    peer_admin(a, line, false, buf, sizeof(buf));
    tap_ok(strncmp(buf, "ERR JOB_ENDED", 13) == 0 && strstr(buf, "drop+dead") != NULL,
           "cancel job of a dead job is refused, naming drop dead: %.60s", buf);
    snprintf(line, sizeof(line), "cancel job %s", kept[0]);
    peer_admin(a, line, false, buf, sizeof(buf));
    tap_ok(strncmp(buf, "ERR JOB_ENDED", 13) == 0, "cancel job of a kept result is refused: %.60s",
           buf);
    tap_ok(daemon_alive(&d), "and the server is still up");
    snprintf(line, sizeof(line), "show job %s", dead);
    peer_admin(a, line, true, buf, sizeof(buf));
    tap_ok(strstr(buf, "state dead\n") != NULL, "the dead job is still dead");

    /* The same key kept twice, then enough others to grow the index. */
    submit(c, PACKET_SUBMIT_JOB_BG, "ended", "k2", "y", kept[1], sizeof(kept[1]));
    end_one("ended", PACKET_WORK_COMPLETE);
    for (i = 0; i < 40; i++) {
        char key[16];

        snprintf(key, sizeof(key), "other%d", i);
        submit(c, PACKET_SUBMIT_JOB_BG, "ended", key, "z", h, sizeof(h));
        end_one("ended", PACKET_WORK_COMPLETE);
    }
    peer_admin(a, "show job unique ended k2", true, buf, sizeof(buf));
    snprintf(line, sizeof(line), "handle %s\n", kept[1]);
    tap_ok(strncmp(buf, line, strlen(line)) == 0,
           "after 40 more kept results, the key's newest one is found (%s): %.30s", kept[1], buf);

    /* drop function with a stored queued job: cancelled, dropped once its deletion commits. */
    submit(c, PACKET_SUBMIT_JOB_BG, "dropstored", "", "q", h, sizeof(h));
    peer_admin(a, "drop function dropstored", false, buf, sizeof(buf));
    tap_ok(strcmp(buf, "OK\r\n") == 0 || strstr(buf, "try again") != NULL,
           "drop function of a stored job: OK or try again: %.70s", buf);
    tap_ok(daemon_alive(&d), "and the server is still up");
    for (i = 0; i < 50 && strcmp(buf, "OK\r\n") != 0; i++) {
        usleep(20000);
        peer_admin(a, "drop function dropstored", false, buf, sizeof(buf));
    }
    tap_is_str(buf, "OK\r\n", "once the deletion has committed, the drop goes through");
    peer_admin(a, "status", true, buf, sizeof(buf));
    tap_ok(strstr(buf, "dropstored\t") == NULL, "and the function is gone");
    close(a);
    close(c);
    tap_is_int(daemon_stop(&d), 0, "the server stops cleanly");

    /* The cancelled job does not come back. */
    daemon_start(&d, args);
    a = peer_connect(d.port);
    peer_admin(a, "status", true, buf, sizeof(buf));
    tap_ok(strstr(buf, "dropstored\t") == NULL,
           "after a restart the dropped function's job is gone");
    close(a);
    tap_is_int(daemon_stop(&d), 0, "and the server stops cleanly");
    work_dir_remove(dir);
}

/* dead_lines: the lines of a "show dead" reply before its "." line. */
static int
dead_lines(const char *buf)
{
    int n = 0;

    while (*buf != '\0' && strncmp(buf, ".\n", 2) != 0) {
        const char *nl = strchr(buf, '\n');

        if (nl == NULL)
            break;
        n++;
        buf = nl + 1;
    }
    return n;
}

/*
 * The dead set replayed at start is held to that run's --max-dead: three
 * dead jobs, a restart with --max-dead 2 keeps the two newest, one without
 * --max-dead keeps none, and they do not come back after another restart.
 */
static void
test_dead_trimmed(void)
{
    char dir[] = "/tmp/dsjob-trim.XXXXXX", wd[300], h[3][128], buf[2048];
    const char *first[] = {"--work-dir", wd,           "--retry-on", "fail", "-j",
                           "1",          "--max-dead", "5",          NULL};
    const char *two[] = {"--work-dir", wd, "--max-dead", "2", NULL};
    const char *none[] = {"--work-dir", wd, NULL};
    struct daemon d;
    int a, c, i;

    work_dir_make(dir, wd, sizeof(wd));
    daemon_start(&d, first);
    port = d.port;
    c = peer_connect(d.port);
    for (i = 0; i < 3; i++) {
        submit(c, PACKET_SUBMIT_JOB_BG, "trim", "", "x", h[i], sizeof(h[i]));
        end_one("trim", PACKET_WORK_FAIL);
    }
    a = peer_connect(d.port);
    peer_admin(a, "show dead trim", true, buf, sizeof(buf));
    tap_is_int(dead_lines(buf), 3, "three dead jobs with --max-dead 5");
    close(a);
    close(c);
    daemon_stop(&d);

    daemon_start(&d, two);
    a = peer_connect(d.port);
    peer_admin(a, "show dead trim", true, buf, sizeof(buf));
    tap_ok(dead_lines(buf) == 2 && strstr(buf, h[0]) == NULL && strstr(buf, h[2]) != NULL,
           "restarted with --max-dead 2: the two newest are kept (%d lines)", dead_lines(buf));
    close(a);
    daemon_stop(&d);

    daemon_start(&d, none);
    a = peer_connect(d.port);
    peer_admin(a, "show dead trim", true, buf, sizeof(buf));
    tap_is_int(dead_lines(buf), 0, "restarted without --max-dead: none is kept");
    close(a);
    daemon_stop(&d);

    daemon_start(&d, two);
    a = peer_connect(d.port);
    peer_admin(a, "show dead trim", true, buf, sizeof(buf));
    tap_is_int(dead_lines(buf), 0, "and they do not come back with --max-dead again");
    close(a);
    tap_is_int(daemon_stop(&d), 0, "the server stops cleanly");
    work_dir_remove(dir);
}

/* Waits (polling the clock, at most 3 s) until the wall clock's second is past t. */
static void
next_second(time_t t)
{
    int i;

    for (i = 0; i < 300 && time(NULL) <= t; i++)
        usleep(10000);
}

/*
 * The dead set and the kept results are kept oldest end first, and after a
 * restart too: the store gives them back in submission order, which put a
 * job that ended later in front of one that ended earlier. Then --max-dead
 * dropped the newer death, and --keep-results held an expired result until
 * the one in front of it expired.
 */
static void
test_ended_order(void)
{
    char dir[] = "/tmp/dsjob-order.XXXXXX", wd[300], ha[2][128], hb[2][128], ga[2][128], gb[2][128];
    char buf[2048], line[256];
    const char *first[] = {"--work-dir", wd, "--max-dead", "5", "--keep-results", "600", NULL};
    /* 6 s: the restart after A's end may take up to 6 s and leave A kept (a loaded machine). */
    const char *again[] = {"--work-dir", wd, "--max-dead", "1", "--keep-results", "6", NULL};
    struct daemon d;
    time_t t;
    int a, c, w, i, pass;
    bool b_gone = false, a_kept = false;

    work_dir_make(dir, wd, sizeof(wd));
    daemon_start(&d, first);
    port = d.port;
    c = peer_connect(d.port);
    w = worker("eo_dead");
    peer_send(w, PACKET_CAN_DO, 1, "eo_kept");
    /*
     * For each function: A is submitted first and ends last; B ends 1 s
     * (dead) or 3 s (kept) before. Both B end together; the waits overlap.
     */
    for (pass = 0; pass < 2; pass++) {
        const char *f = pass == 0 ? "eo_dead" : "eo_kept";

        submit(c, PACKET_SUBMIT_JOB_BG, f, "", "A", ha[pass], sizeof(ha[pass]));
        submit(c, PACKET_SUBMIT_JOB_BG, f, "", "B", hb[pass], sizeof(hb[pass]));
        peer_send(w, PACKET_GRAB_JOB, 0);
        peer_recv_type(w, PACKET_JOB_ASSIGN, ga[pass], sizeof(ga[pass]), PEER_TIMEOUT_MS);
        peer_send(w, PACKET_GRAB_JOB, 0);
        peer_recv_type(w, PACKET_JOB_ASSIGN, gb[pass], sizeof(gb[pass]), PEER_TIMEOUT_MS);
    }
    t = time(NULL);
    peer_send(w, PACKET_WORK_FAIL, 1, gb[0]);
    peer_send(w, PACKET_WORK_COMPLETE, 2, gb[1], "B");
    next_second(t);
    peer_send(w, PACKET_WORK_FAIL, 1, ga[0]);
    for (i = 1; i < 3; i++)
        next_second(t + i);
    peer_send(w, PACKET_WORK_COMPLETE, 2, ga[1], "A");
    peer_send(w, PACKET_ECHO_REQ, 1, "ended");
    peer_recv_type(w, PACKET_ECHO_RES, NULL, 0, PEER_TIMEOUT_MS);
    tap_ok(strcmp(ga[0], ha[0]) == 0 && strcmp(gb[0], hb[0]) == 0, "A was taken first, then B");
    snprintf(line, sizeof(line), "%s", ha[0]); /* the dead A, which died last */
    close(w);
    close(c);
    daemon_stop(&d);

    daemon_start(&d, again);
    a = peer_connect(d.port);
    peer_admin(a, "show dead eo_dead", true, buf, sizeof(buf));
    tap_ok(dead_lines(buf) == 1 && strstr(buf, line) != NULL,
           "restarted with --max-dead 1: the job that died last is kept (%s)", line);
    /* B's result expires 6 s after it ended; A's 3 s later. Wait for B's to go. */
    for (i = 0; i < 300 && !b_gone; i++) {
        snprintf(line, sizeof(line), "show result %s", hb[1]);
        peer_admin(a, line, false, buf, sizeof(buf));
        b_gone = strncmp(buf, "ERR", 3) == 0;
        if (b_gone) {
            snprintf(line, sizeof(line), "show result %s", ha[1]);
            peer_admin(a, line, false, buf, sizeof(buf));
            a_kept = strncmp(buf, "OK", 2) == 0;
        } else {
            usleep(100000);
        }
    }
    tap_ok(b_gone, "after a restart, the result that ended first expires");
    tap_ok(a_kept, "while the one that ended 3 s later is still kept");
    close(a);
    tap_is_int(daemon_stop(&d), 0, "the server stops cleanly");
    work_dir_remove(dir);
}

#endif

/* The cases that share one default server. */
static void
test_default_server(void)
{
    struct daemon d;

    daemon_start(&d, NULL);
    port = d.port;
    test_wake_one();
    test_epoch();
    test_requeue();
    test_complete_without_data();
    test_coalesce();
    test_dash_unique();
    test_dash_key_space();
    test_both_roles();
    test_exception();
    test_status();
    test_client_gone();
    test_maxqueue();
    tap_ok(daemon_alive(&d), "dsjobd still running after all of that");
    daemon_stop(&d);
}

/*
 * Each case below starts servers of its own, and most wait for a timer
 * (an epoch job, a retry backoff, a commit interval, a kept result's
 * expiry): they run side by side as tap parts.
 */
int
main(void)
{
    static void (*const parts[])(void) = {
        test_default_server, test_admin_denied,      test_max_connections,     test_max_jobs,
        test_max_jobs_ended, test_backoff_not_early, test_warning_not_failure, test_retries,
        test_slow_waiter,    test_shutdown,
#ifdef HAVE_SQLITE
        test_drop_pending,   test_done_stays_done,   test_refusal_order,       test_ended_jobs,
        test_dead_trimmed,   test_ended_order,
#endif
    };
    alarm(600); /* a bound for a hang, not a speed: a loaded machine is slow */
    tap_parts_run(parts, sizeof(parts) / sizeof(parts[0]));
    return tap_done();
}
