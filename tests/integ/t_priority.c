/*
 * Refusing work no worker can do, and priorities across functions, on a
 * real dsjobd, driven by raw peers:
 * --reject-no-worker and OPTION_REQ reject-no-worker (every submit type,
 * foreground and background, a durable submit refused before it is
 * stored, an unknown option still refused), --priority global across two
 * functions against the default function order, --priority-aging under a
 * flood of high jobs (and starvation without it), and the admin command
 * priority HANDLE high|normal|low with its errors and its privilege. No
 * assertion depends on how long anything took: waits only make a job old
 * enough, and loops are bounded by counts.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/peer.h"
#include "tap.h"

static int port;

/* A round trip: everything fd sent before has been handled. */
static void
sync_peer(int fd)
{
    peer_send(fd, PACKET_ECHO_REQ, 1, "sync");
    if (!peer_recv_type(fd, PACKET_ECHO_RES, NULL, 0, PEER_TIMEOUT_MS))
        tap_diag("no ECHO_RES");
}

static int
worker(const char *func)
{
    int fd = peer_connect(port);

    peer_send(fd, PACKET_CAN_DO, 1, func);
    sync_peer(fd);
    return fd;
}

static bool
submit(int fd, uint32_t type, const char *func, const char *data, char *handle, size_t cap)
{
    peer_send(fd, type, 3, func, "", data);
    return peer_recv_type(fd, PACKET_JOB_CREATED, handle, cap, PEER_TIMEOUT_MS);
}

/* The next packet is ERROR NO_WORKER naming func. */
static bool
no_worker(int fd, const char *func)
{
    struct peer_pkt p;
    char text[300];
    bool ok;

    snprintf(text, sizeof(text), "no worker can do %s", func);
    ok = peer_recv(fd, &p, PEER_TIMEOUT_MS) == PACKET_ERROR && peer_arg_is(&p, 0, "NO_WORKER") &&
         peer_arg_is(&p, 1, text);
    if (!ok)
        tap_diag("got type %u: %.*s %.*s", p.type, p.nargs > 0 ? (int)p.arg_len[0] : 0,
                 p.nargs > 0 ? (const char *)p.arg[0] : "", p.nargs > 1 ? (int)p.arg_len[1] : 0,
                 p.nargs > 1 ? (const char *)p.arg[1] : "");
    peer_pkt_release(&p);
    return ok;
}

/* Grab one job; its payload goes to data (empty if none came). */
static void
grab(int w, char *handle, size_t hcap, char *data, size_t dcap)
{
    struct peer_pkt p;

    handle[0] = data[0] = '\0';
    peer_send(w, PACKET_GRAB_JOB, 0);
    if (peer_recv(w, &p, PEER_TIMEOUT_MS) == PACKET_JOB_ASSIGN && p.nargs == 3) {
        snprintf(handle, hcap, "%.*s", (int)p.arg_len[0], (const char *)p.arg[0]);
        snprintf(data, dcap, "%.*s", (int)p.arg_len[2], (const char *)p.arg[2]);
    }
    peer_pkt_release(&p);
}

/* Grab and complete n jobs; their payloads, space-separated, go to out. */
static void
drain(int w, int n, char *out, size_t cap)
{
    char h[128], d[128];
    size_t used = 0;
    int i;

    out[0] = '\0';
    for (i = 0; i < n; i++) {
        grab(w, h, sizeof(h), d, sizeof(d));
        if (h[0] == '\0')
            break;
        used += (size_t)snprintf(out + used, cap - used, "%s%s", i ? " " : "", d);
        peer_send(w, PACKET_WORK_COMPLETE, 2, h, "");
    }
    sync_peer(w);
}

static bool
status_has(int a, const char *line)
{
    char buf[4096];

    peer_admin(a, "status", true, buf, sizeof(buf));
    return strstr(buf, line) != NULL;
}

/* Every submit type, refused at once while nobody can do the function. */
static void
test_reject_server_wide(void)
{
    static const char *const args[] = {"--reject-no-worker", NULL};
    static const struct {
        uint32_t type;
        const char *name;
    } types[] = {
        {PACKET_SUBMIT_JOB, "SUBMIT_JOB"},
        {PACKET_SUBMIT_JOB_HIGH, "SUBMIT_JOB_HIGH"},
        {PACKET_SUBMIT_JOB_LOW, "SUBMIT_JOB_LOW"},
        {PACKET_SUBMIT_JOB_BG, "SUBMIT_JOB_BG"},
        {PACKET_SUBMIT_JOB_HIGH_BG, "SUBMIT_JOB_HIGH_BG"},
        {PACKET_SUBMIT_JOB_LOW_BG, "SUBMIT_JOB_LOW_BG"},
    };
    struct daemon d;
    char h[128], when[32];
    size_t i;
    int c, a, w;

    daemon_start(&d, args);
    port = d.port;
    c = peer_connect(port);
    a = peer_connect(port);
    for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        peer_send(c, types[i].type, 3, "rj", "", "x");
        tap_ok(no_worker(c, "rj"),
               "--reject-no-worker: %s for a function nobody can do: "
               "ERROR NO_WORKER \"no worker can do rj\"",
               types[i].name);
    }
    snprintf(when, sizeof(when), "%ld", (long)time(NULL) + 3600);
    peer_send(c, PACKET_SUBMIT_JOB_EPOCH, 4, "rj", "", when, "later");
    tap_ok(no_worker(c, "rj"), "SUBMIT_JOB_EPOCH too, even for a time an hour away");
    peer_send(c, PACKET_SUBMIT_REDUCE_JOB, 5, "rj", "", "red", "", "x");
    tap_ok(no_worker(c, "rj"), "SUBMIT_REDUCE_JOB too");
    peer_send(c, PACKET_SUBMIT_REDUCE_JOB_BACKGROUND, 5, "rj", "", "red", "", "x");
    tap_ok(no_worker(c, "rj"), "SUBMIT_REDUCE_JOB_BACKGROUND too");
    tap_ok(!status_has(a, "rj\t"), "the refused submits made no function and no job");
    sync_peer(c); /* the connection stays open */
    w = worker("rj");
    tap_ok(submit(c, PACKET_SUBMIT_JOB_BG, "rj", "x", h, sizeof(h)),
           "once a worker has registered the function, a submit is queued");
    close(w);
    for (i = 0; i < 100 && !status_has(a, "rj\t1\t0\t0\n"); i++)
        usleep(50000);
    peer_send(c, PACKET_SUBMIT_JOB, 3, "rj", "", "y");
    tap_ok(no_worker(c, "rj"), "once it has gone, submits are refused again");
    tap_ok(status_has(a, "rj\t1\t0\t0\n"), "and the job queued before stays queued");
    close(a);
    close(c);
    tap_ok(daemon_alive(&d), "the server stayed up");
    daemon_stop(&d);
}

/* OPTION_REQ reject-no-worker: one connection opts in, the others keep 1.1.20's wait. */
static void
test_reject_option(void)
{
    int c1 = peer_connect(port), c2 = peer_connect(port), w;
    char h[128];
    struct peer_pkt p;

    peer_send(c1, PACKET_OPTION_REQ, 1, "reject-no-worker");
    tap_ok(peer_recv(c1, &p, PEER_TIMEOUT_MS) == PACKET_OPTION_RES &&
               peer_arg_is(&p, 0, "reject-no-worker"),
           "OPTION_REQ reject-no-worker: OPTION_RES reject-no-worker");
    peer_pkt_release(&p);
    peer_send(c1, PACKET_OPTION_REQ, 1, "reject-no-workers");
    tap_ok(peer_recv(c1, &p, PEER_TIMEOUT_MS) == PACKET_ERROR &&
               peer_arg_is(&p, 0, "UNKNOWN_OPTION"),
           "any other name is still ERROR UNKNOWN_OPTION, as gearmand answers");
    peer_pkt_release(&p);
    peer_send(c1, PACKET_SUBMIT_JOB_BG, 3, "ro", "", "x");
    tap_ok(no_worker(c1, "ro"), "that connection's background submit: ERROR NO_WORKER");
    peer_send(c1, PACKET_SUBMIT_JOB, 3, "ro", "", "x");
    tap_ok(no_worker(c1, "ro"), "and its foreground submit");
    tap_ok(submit(c2, PACKET_SUBMIT_JOB_BG, "ro", "x", h, sizeof(h)),
           "another connection's submit waits for a worker, as in gearmand");
    peer_send(c1, PACKET_SUBMIT_JOB_BG, 3, "ro", "", "x");
    tap_ok(no_worker(c1, "ro"), "a known function with queued jobs but no worker: still refused");
    w = worker("ro");
    tap_ok(submit(c1, PACKET_SUBMIT_JOB_BG, "ro", "y", h, sizeof(h)),
           "with a worker, the opted-in connection's submit is queued");
    close(w);
    close(c1);
    close(c2);
}

#ifdef HAVE_SQLITE
/*
 * On a durable store the refusal comes before anything is stored, and in
 * order behind the answer of the durable submit pipelined before it.
 */
static void
test_reject_durable(void)
{
    char dir[] = "/tmp/dsjob-rej.XXXXXX", wd[300], h[128];
    const char *args[] = {"--work-dir", wd, "--reject-no-worker", NULL};
    struct daemon d;
    struct peer_pkt p;
    int c, a, w, t1, status;
    bool ok;

    if (mkdtemp(dir) == NULL)
        tap_bail("mkdtemp: %s", strerror(errno));
    snprintf(wd, sizeof(wd), "%s/var", dir);
    daemon_start(&d, args);
    port = d.port;
    w = worker("dur_ok");
    c = peer_connect(port);
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "dur_ok", "", "kept");
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "dur_no", "", "refused");
    t1 = peer_recv(c, &p, PEER_TIMEOUT_MS);
    peer_pkt_release(&p);
    ok = no_worker(c, "dur_no");
    tap_ok(t1 == PACKET_JOB_CREATED && ok,
           "durable: JOB_CREATED for the served function, then NO_WORKER, in order");
    kill(d.pid, SIGKILL);
    waitpid(d.pid, &status, 0);
    close(c);
    close(w);
    daemon_start(&d, args);
    port = d.port;
    a = peer_connect(port);
    tap_ok(status_has(a, "dur_ok\t1\t0\t0\n") && !status_has(a, "dur_no"),
           "after kill -9 and a restart only the accepted job is back: nothing refused was stored");
    w = worker("dur_ok");
    grab(w, h, sizeof(h), wd, sizeof(wd));
    tap_is_str(wd, "kept", "and it runs");
    close(w);
    close(a);
    tap_is_int(daemon_stop(&d), 0, "the server stops cleanly");
    snprintf(wd, sizeof(wd), "rm -rf '%s'", dir);
    if (system(wd) != 0)
        tap_diag("could not remove %s", dir);
}
#endif

/* Five jobs over two functions, drained by one worker of both (gb registered last). */
static void
two_functions(const char *want, const char *what)
{
    int c = peer_connect(port), w;
    char h[128], got[256];

    submit(c, PACKET_SUBMIT_JOB_BG, "ga", "n1", h, sizeof(h));
    submit(c, PACKET_SUBMIT_JOB_LOW_BG, "gb", "l1", h, sizeof(h));
    submit(c, PACKET_SUBMIT_JOB_HIGH_BG, "gb", "h1", h, sizeof(h));
    submit(c, PACKET_SUBMIT_JOB_BG, "gb", "n2", h, sizeof(h));
    submit(c, PACKET_SUBMIT_JOB_HIGH_BG, "ga", "h2", h, sizeof(h));
    w = peer_connect(port);
    peer_send(w, PACKET_CAN_DO, 1, "ga");
    peer_send(w, PACKET_CAN_DO, 1, "gb");
    drain(w, 5, got, sizeof(got));
    tap_is_str(got, want, "%s", what);
    close(w);
    close(c);
}

static void
test_global(void)
{
    static const char *const args[] = {"--priority", "global", NULL};
    struct daemon d;

    two_functions("h1 n2 l1 h2 n1",
                  "default (--priority function, as 1.1.20): the function registered last first");
    daemon_start(&d, args);
    port = d.port;
    two_functions("h1 h2 n1 n2 l1",
                  "--priority global: high of both functions, oldest first, then normal, then low");
    daemon_stop(&d);
}

/*
 * --priority gearmand-2.0. The five jobs of two_functions in the order
 * gearmand 2.0.0's gearman_server_job_take gives them (for each priority,
 * the first of the worker's functions with a job of it, which then moves
 * to the back of its list; the list starts newest CAN_DO first): h1 (gb),
 * h2 (ga), then at normal gb first again, n2, then ga's n1, then l1.
 * t_queue checks the same rule against a model of that function on random
 * submissions. Then gearmand 2.0's own case,
 * gearman_worker_priority_multiple_functions (tests/libgearman-1.0/
 * priority_test.cc): low on function1, high on function2, normal on
 * function1, one worker of function1 then function2: function2's high
 * job comes first.
 */
static void
test_gearmand2(void)
{
    static const char *const args[] = {"--priority", "gearmand-2.0", NULL};
    struct daemon d;
    char h[128], got[256];
    int c, w;

    daemon_start(&d, args);
    port = d.port;
    two_functions("h1 h2 n2 n1 l1", "--priority gearmand-2.0: high of both functions, then "
                                    "normal, the functions taking turns, then low");
    c = peer_connect(port);
    submit(c, PACKET_SUBMIT_JOB_LOW_BG, "function1", "0_function1", h, sizeof(h));
    submit(c, PACKET_SUBMIT_JOB_HIGH_BG, "function2", "2_function2", h, sizeof(h));
    submit(c, PACKET_SUBMIT_JOB_BG, "function1", "1_function1", h, sizeof(h));
    w = peer_connect(port);
    peer_send(w, PACKET_CAN_DO, 1, "function1");
    peer_send(w, PACKET_CAN_DO, 1, "function2");
    drain(w, 3, got, sizeof(got));
    tap_is_str(got, "2_function2 1_function1 0_function1",
               "--priority gearmand-2.0: gearmand 2.0's multiple-functions case");
    close(w);
    close(c);
    daemon_stop(&d);
}

/*
 * A flood of high jobs, one submitted for each grab, with one low job
 * queued first. With aging the low job runs within the flood; without it,
 * it is still queued when the flood ends. The loop is bounded by its count;
 * the sleeps only let the low job grow old.
 */
static bool
flood(int rounds, int sleep_ms, int *before)
{
    int c = peer_connect(port), w = worker("fl_h"), i;
    char h[128], d[64], lh[128];
    bool ran = false;

    peer_send(w, PACKET_CAN_DO, 1, "fl_l");
    submit(c, PACKET_SUBMIT_JOB_LOW_BG, "fl_l", "low", lh, sizeof(lh));
    *before = 0;
    for (i = 0; i < rounds && !ran; i++) {
        submit(c, PACKET_SUBMIT_JOB_HIGH_BG, "fl_h", "high", h, sizeof(h));
        grab(w, h, sizeof(h), d, sizeof(d));
        if (strcmp(d, "low") == 0)
            ran = true;
        else if (strcmp(d, "high") == 0)
            (*before)++;
        peer_send(w, PACKET_WORK_COMPLETE, 2, h, "");
        usleep((useconds_t)sleep_ms * 1000);
    }
    close(w);
    close(c);
    return ran;
}

static void
test_aging(void)
{
    static const char *const aged[] = {"--priority", "global", "--priority-aging", "1", NULL};
    struct daemon d;
    int before;
    bool ran;

    daemon_start(&d, aged);
    port = d.port;
    ran = flood(60, 250, &before);
    tap_ok(ran, "--priority-aging 1: a low job runs under a flood of high ones");
    tap_diag("after %d high jobs", before);
    daemon_stop(&d);
}

static void
test_no_aging(void)
{
    static const char *const plain[] = {"--priority", "global", NULL};
    struct daemon d;
    int before;
    bool ran;

    daemon_start(&d, plain);
    port = d.port;
    ran = flood(16, 250, &before);
    tap_ok(!ran && before == 16, "without aging it starves: %d high jobs ran, the low one did not",
           before);
    daemon_stop(&d);
}

/* priority HANDLE high|normal|low. */
static void
test_admin_priority(void)
{
    int c = peer_connect(port), a = peer_connect(port), w;
    char hl[128], hn[128], h[128], buf[512], line[300], got[128];

    submit(c, PACKET_SUBMIT_JOB_BG, "ap", "norm", hn, sizeof(hn));
    submit(c, PACKET_SUBMIT_JOB_LOW_BG, "ap", "low", hl, sizeof(hl));
    snprintf(line, sizeof(line), "priority %s high", hl);
    peer_admin(a, line, false, buf, sizeof(buf));
    tap_is_str(buf, "OK\r\n", "priority HANDLE high: OK");
    peer_admin(a, "prioritystatus", true, buf, sizeof(buf));
    tap_ok(strstr(buf, "ap\t1\t1\t0\t0\n") != NULL, "prioritystatus shows it moved to high");
    snprintf(line, sizeof(line), "PRIORITY %s HIGH", hl);
    peer_admin(a, line, false, buf, sizeof(buf));
    tap_is_str(buf, "OK\r\n", "to the priority it has, in any case: OK");
    peer_admin(a, "priority H:nope:1 low", false, buf, sizeof(buf));
    tap_is_str(buf, "ERR UNKNOWN_JOB\r\n", "an unknown handle: ERR UNKNOWN_JOB");
    snprintf(line, sizeof(line), "priority %s urgent", hl);
    peer_admin(a, line, false, buf, sizeof(buf));
    tap_is_str(buf, "ERR INVALID_ARGUMENTS usage:+priority+HANDLE+high|normal|low\r\n",
               "a priority that is not high, normal or low: ERR INVALID_ARGUMENTS");
    peer_admin(a, "priority", false, buf, sizeof(buf));
    tap_ok(strncmp(buf, "ERR INVALID_ARGUMENTS", 21) == 0, "no arguments: ERR INVALID_ARGUMENTS");
    w = worker("ap");
    grab(w, h, sizeof(h), got, sizeof(got));
    tap_is_str(got, "low", "the worker gets the moved job before the normal one");
    snprintf(line, sizeof(line), "priority %s low", hl);
    peer_admin(a, line, false, buf, sizeof(buf));
    tap_is_str(buf, "ERR JOB_NOT_QUEUED the+job+is+running\r\n",
               "a running job: ERR JOB_NOT_QUEUED");
    peer_send(w, PACKET_WORK_COMPLETE, 2, h, "");
    snprintf(line, sizeof(line), "priority %s low", hn);
    peer_admin(a, line, false, buf, sizeof(buf));
    tap_is_str(buf, "OK\r\n", "the normal job moves down to low");
    submit(c, PACKET_SUBMIT_JOB_BG, "ap", "norm2", h, sizeof(h));
    drain(w, 2, got, sizeof(got));
    tap_is_str(got, "norm2 norm", "and runs after a normal job submitted later");
    close(w);
    close(a);
    close(c);
}

static void
test_admin_priority_denied(void)
{
    static const char *const args[] = {"--admin-allow", "10.0.0.0/8", NULL};
    struct daemon d;
    char buf[512];
    int c;

    daemon_start(&d, args);
    c = peer_connect(d.port);
    peer_admin(c, "priority H:x:1 high", false, buf, sizeof(buf));
    tap_ok(strncmp(buf, "ERR PERMISSION_DENIED priority+is+not+allowed", 45) == 0,
           "priority from outside --admin-allow: ERR PERMISSION_DENIED: %.60s", buf);
    close(c);
    daemon_stop(&d);
}

/* The cases that share one default server. */
static void
test_default_server(void)
{
    struct daemon d;

    daemon_start(&d, NULL);
    port = d.port;
    test_reject_option();
    test_admin_priority();
    test_global(); /* its default half on this server */
    port = d.port;
    tap_ok(daemon_alive(&d), "the default server is still running");
    daemon_stop(&d);
}

/*
 * Each part has servers of its own; the two floods (with and without
 * aging) take seconds of the low job growing old: they run side by side.
 */
int
main(void)
{
    static void (*const parts[])(void) = {
        test_default_server, test_reject_server_wide,
#ifdef HAVE_SQLITE
        test_reject_durable,
#endif
        test_aging,          test_no_aging,           test_gearmand2, test_admin_priority_denied,
    };
    alarm(150);
    tap_parts_run(parts, sizeof(parts) / sizeof(parts[0]));
    return tap_done();
}
