/*
 * libdsjobworker against real servers: the job's accessors, work() with a
 * timeout and after stop, a worker that reconnects and registers again
 * after its server restarts on the same port, a graceful stop from a
 * signal that lets the running job finish, and CAN_DO_TIMEOUT taking a job
 * back. With a concurrency of 4: four callbacks are inside at the same
 * time (they meet at a barrier that only four can pass, with a bounded
 * wait), a stop from another thread lets all four finish and grabs nothing
 * more, and the four threads reconnect after a server restart. The
 * in-process checks also run against gearmand 1.1.20.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dsjob/client.h>
#include <dsjob/worker.h>

#include "common.h"
#include "lib/peer.h"
#include "tap.h"

struct seen {
    char func[64];    /* dsjob_job_function */
    char unique[80];  /* dsjob_job_unique */
    char handle[128]; /* dsjob_job_handle */
    char payload[64]; /* dsjob_job_payload */
    size_t len;       /* its length */
    int calls;        /* callback runs */
};

static int
fn_record(struct dsjob_job *job, void *user)
{
    struct seen *s = user;
    const void *p = dsjob_job_payload(job, &s->len);

    snprintf(s->func, sizeof(s->func), "%s", dsjob_job_function(job));
    snprintf(s->unique, sizeof(s->unique), "%s", dsjob_job_unique(job));
    snprintf(s->handle, sizeof(s->handle), "%s", dsjob_job_handle(job));
    memcpy(s->payload, p, s->len < sizeof(s->payload) ? s->len : sizeof(s->payload) - 1);
    s->calls++;
    dsjob_job_set_result(job, "recorded", 8);
    return DSJOB_WORK_COMPLETE;
}

static void
suite_inproc(const char *kind, int port)
{
    struct dsjob_worker *w = dsjob_worker_new();
    struct dsjob_client *c = dsjob_client_new();
    struct seen s;
    char handle[DSJOB_HANDLE_MAX], unique[64];
    struct dsjob_status st;
    int err;

    memset(&s, 0, sizeof(s));
    tap_is_int(dsjob_worker_work(w, 100), DSJOB_ERR_STATE,
               "%s: work without servers: DSJOB_ERR_STATE", kind);
    tap_is_int(dsjob_worker_add_server(w, "bad:port"), DSJOB_ERR_ARG,
               "%s: a bad address is refused", kind);
    dsjob_worker_add_server(w, addr_of(port));
    tap_is_int(dsjob_worker_register(w, "", fn_record, &s, 0), DSJOB_ERR_ARG,
               "%s: empty name refused", kind);
    tap_is_int(dsjob_worker_register(w, "inproc", fn_record, &s, 0), DSJOB_OK, "%s: register",
               kind);
    tap_is_int(dsjob_worker_register(w, "inproc", fn_record, &s, 0), DSJOB_ERR_ARG,
               "%s: registering twice is refused", kind);
    tap_is_int(dsjob_worker_work(w, 300), DSJOB_ERR_TIMEOUT, "%s: no job: work times out", kind);

    dsjob_client_add_server(c, addr_of(port));
    dsjob_client_set_timeout(c, 2000, 5000);
    snprintf(unique, sizeof(unique), "uq-%s-%ld", kind, (long)getpid());
    dsjob_client_submit_bg(c, "inproc", unique, "pay\0load", 8, DSJOB_PRIO_NORMAL, handle,
                           sizeof(handle));
    err = dsjob_worker_work(w, 5000);
    tap_is_int(err, DSJOB_OK, "%s: a sleeping worker is woken and runs the job (%s)", kind,
               dsjob_worker_errmsg(w));
    tap_is_str(s.func, "inproc", "%s: the job's function", kind);
    tap_is_str(s.unique, unique, "%s: the job's unique key", kind);
    tap_is_str(s.handle, handle, "%s: the job's handle is the one the client got", kind);
    tap_is_mem(s.payload, s.len, "pay\0load", 8, "%s: the job's payload, NUL included", kind);
    dsjob_client_status(c, handle, &st);
    tap_is_int(st.known, 0, "%s: after the result the server forgets the job", kind);

    dsjob_worker_stop(w);
    tap_is_int(dsjob_worker_work(w, 1000), DSJOB_ERR_STATE,
               "%s: after stop, work returns DSJOB_ERR_STATE", kind);
    tap_is_int(dsjob_worker_run(w), DSJOB_OK, "%s: after stop, run returns DSJOB_OK", kind);
    dsjob_worker_free(w);
    dsjob_worker_free(NULL);
    dsjob_client_free(c);
}

static int
submit_rev(int port, const char *what)
{
    struct dsjob_client *c = dsjob_client_new();
    void *res = NULL;
    size_t len = 0;
    int err;

    dsjob_client_add_server(c, addr_of(port));
    dsjob_client_set_timeout(c, 2000, 15000);
    err = dsjob_client_submit(c, "rev", NULL, what, strlen(what), DSJOB_PRIO_NORMAL, &res, &len);
    if (err == DSJOB_OK && (len != 3 || memcmp(res, "cba", 3) != 0))
        err = DSJOB_ERR_PROTO;
    if (err != DSJOB_OK)
        tap_diag("submit: %s: %s", dsjob_strerror(err), dsjob_client_errmsg(c));
    dsjob_free(res);
    dsjob_client_free(c);
    return err;
}

static void
suite_restart(void)
{
    struct daemon d;
    char port[16], buf[4096];
    const char *extra[] = {"-p", port, NULL};
    const char *servers[2] = {NULL, NULL};
    pid_t w;
    int fd;

    daemon_start(&d, NULL);
    snprintf(port, sizeof(port), "%d", d.port);
    servers[0] = addr_of(d.port);
    w = worker_fork(servers);
    tap_is_int(submit_rev(d.port, "abc"), DSJOB_OK, "dsjobd: our worker does a job");
    daemon_stop(&d);
    sleep_ms(300); /* the worker notices and backs off */
    daemon_start(&d, extra);
    tap_is_int(d.port, atoi(port), "dsjobd restarted on the same port");
    tap_is_int(submit_rev(d.port, "abc"), DSJOB_OK, "the worker reconnected and registered again");
    fd = peer_connect(d.port);
    peer_admin(fd, "workers", true, buf, sizeof(buf));
    close(fd);
    tap_ok(strstr(buf, "t-worker :") != NULL && strstr(buf, " hang") != NULL,
           "its id and every function were announced again");
    daemon_stop(&d);
    tap_is_int(worker_reap(w), 0, "the worker stops cleanly with its server gone");
}

static struct {
    int complete;    /* complete callbacks */
    char result[16]; /* the result */
} slow;

static void
slow_complete(struct dsjob_task *t, const void *result, size_t len, void *user)
{
    (void)t;
    (void)user;
    slow.complete++;
    memcpy(slow.result, result, len < sizeof(slow.result) ? len : sizeof(slow.result) - 1);
}

static void
suite_stop_and_timeout(const char *kind, int port, bool with_timeout_check)
{
    const struct dsjob_task_callbacks cb = {.complete = slow_complete};
    const char *const servers[] = {addr_of(port), NULL};
    struct dsjob_client *c = dsjob_client_new();
    struct dsjob_taskset *ts;
    pid_t w = worker_fork(servers);
    int status = -1, i, err;
    int64_t t0;

    dsjob_client_add_server(c, addr_of(port));
    dsjob_client_set_timeout(c, 2000, 10000);
    ts = dsjob_taskset_new(c, &cb);
    dsjob_taskset_add(ts, "slow", NULL, "1000", 4, DSJOB_PRIO_NORMAL, 0, NULL, NULL);
    tap_is_int(dsjob_taskset_run(ts, 400), DSJOB_ERR_TIMEOUT, "%s: the slow job is running", kind);
    kill(w, SIGTERM);
    tap_is_int(dsjob_taskset_run(ts, 5000), DSJOB_OK,
               "%s: after SIGTERM the running job still completes", kind);
    tap_is_str(slow.result, "slept", "%s: with its result", kind);
    for (i = 0; i < 5000; i++) { /* 5 s at most */
        if (waitpid(w, &status, WNOHANG) == w)
            break;
        sleep_ms(1);
    }
    tap_ok(i < 5000 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: then the worker exits 0",
           kind);
    if (i == 5000)
        worker_reap(w);
    dsjob_taskset_free(ts);

    if (with_timeout_check) {
        w = worker_fork(servers);
        t0 = (int64_t)time(NULL);
        err = dsjob_client_submit(c, "hang", NULL, "x", 1, DSJOB_PRIO_NORMAL, NULL, NULL);
        tap_is_int(err, DSJOB_ERR_JOB_FAILED,
                   "%s: CAN_DO_TIMEOUT 1000 ms: the server takes the 3 s job back "
                   "and with --job-retries 1 fails it",
                   kind);
        tap_ok((int64_t)time(NULL) - t0 < 3, "%s: ... before the job could have finished", kind);
        kill(w, SIGKILL); /* SIGTERM would let it sleep out the 3 s job it lost */
        waitpid(w, NULL, 0);
    }
    dsjob_client_free(c);
}

/*
 * Where the callbacks of a concurrent worker meet: each waits (at most
 * MEET_WAIT_MS) until want callbacks are inside at once, then, when hold
 * is set, until the test releases them. Its result says whether it met
 * the others. Once one has waited in vain the round is lost, and the later
 * ones do not wait, so that a broken worker fails fast. Every field is
 * under mu.
 */
#define MEET_WAIT_MS 10000

static struct {
    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv;  /* signalled on every change */
    int want;           /* callbacks that must be inside at once */
    int inside;         /* callbacks inside now */
    int most;           /* most inside at once */
    bool met;           /* want were inside at once in this round */
    bool gave_up;       /* a callback of this round waited in vain */
    int calls;          /* callbacks run in this round */
    bool hold;          /* after meeting, wait for released */
    bool released;      /* the test let the held callbacks go */
    pthread_t caller;   /* the thread of the last callback */
} meet = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The condition variable waits on CLOCK_MONOTONIC, as deadline_in computes. */
static void
meet_init(void)
{
    pthread_condattr_t ca;

    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&meet.cv, &ca);
    pthread_condattr_destroy(&ca);
}

static void
meet_reset(int want, bool hold)
{
    pthread_mutex_lock(&meet.mu);
    meet.want = want;
    meet.inside = meet.most = meet.calls = 0;
    meet.met = meet.released = meet.gave_up = false;
    meet.hold = hold;
    pthread_mutex_unlock(&meet.mu);
}

static void
deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Waits under meet.mu until *flag or the deadline; returns *flag. */
static bool
meet_wait(const bool *flag, const struct timespec *until)
{
    while (!*flag && pthread_cond_timedwait(&meet.cv, &meet.mu, until) != ETIMEDOUT)
        ;
    return *flag;
}

static int
fn_meet(struct dsjob_job *job, void *user)
{
    struct timespec until;
    bool met;

    (void)user;
    deadline_in(&until, MEET_WAIT_MS);
    pthread_mutex_lock(&meet.mu);
    meet.caller = pthread_self();
    meet.calls++;
    if (++meet.inside > meet.most)
        meet.most = meet.inside;
    if (meet.inside >= meet.want)
        meet.met = true;
    pthread_cond_broadcast(&meet.cv);
    met = meet.gave_up ? meet.met : meet_wait(&meet.met, &until);
    if (!met)
        meet.gave_up = true;
    if (meet.hold) {
        deadline_in(&until, 4 * MEET_WAIT_MS);
        meet_wait(&meet.released, &until);
    }
    meet.inside--;
    pthread_cond_broadcast(&meet.cv);
    pthread_mutex_unlock(&meet.mu);
    dsjob_job_set_result(job, met ? "met" : "alone", met ? 3 : 5);
    return DSJOB_WORK_COMPLETE;
}

/* Waits (at most ms) until n callbacks are inside; returns how many are. */
static int
meet_until_inside(int n, int ms)
{
    struct timespec until;
    int inside;

    deadline_in(&until, ms);
    pthread_mutex_lock(&meet.mu);
    while (meet.inside < n && pthread_cond_timedwait(&meet.cv, &meet.mu, &until) != ETIMEDOUT)
        ;
    inside = meet.inside;
    pthread_mutex_unlock(&meet.mu);
    return inside;
}

static void
meet_release(void)
{
    pthread_mutex_lock(&meet.mu);
    meet.released = true;
    pthread_cond_broadcast(&meet.cv);
    pthread_mutex_unlock(&meet.mu);
}

static int
meet_get(const int *field)
{
    int v;

    pthread_mutex_lock(&meet.mu);
    v = *field;
    pthread_mutex_unlock(&meet.mu);
    return v;
}

/* dsjob_worker_run in a thread of its own. */
struct runner {
    struct dsjob_worker *w; /* the worker */
    pthread_t tid;          /* the thread calling run */
    int err;                /* what run returned */
};

static void *
runner_main(void *arg)
{
    struct runner *r = arg;

    r->err = dsjob_worker_run(r->w);
    return NULL;
}

static void
runner_start(struct runner *r, struct dsjob_worker *w)
{
    r->w = w;
    r->err = -1;
    if (pthread_create(&r->tid, NULL, runner_main, r) != 0)
        tap_bail("pthread_create failed");
}

static int
runner_join(struct runner *r)
{
    pthread_join(r->tid, NULL);
    return r->err;
}

static struct dsjob_worker *
meet_worker(int port, int n)
{
    struct dsjob_worker *w = dsjob_worker_new();

    dsjob_worker_add_server(w, addr_of(port));
    dsjob_worker_set_id(w, "t-meet");
    dsjob_worker_register(w, "meet", fn_meet, NULL, 0);
    dsjob_worker_set_concurrency(w, n);
    return w;
}

static int met_results;

static void
meet_complete(struct dsjob_task *t, const void *result, size_t len, void *user)
{
    (void)t;
    (void)user;
    if (len == 3 && memcmp(result, "met", 3) == 0)
        met_results++;
}

/*
 * Submits n foreground "meet" jobs in one task set and waits (bounded)
 * for all; returns how many callbacks met the others.
 */
static int
meet_round(int port, int n, const char *tag)
{
    const struct dsjob_task_callbacks cb = {.complete = meet_complete};
    struct dsjob_client *c = dsjob_client_new();
    struct dsjob_taskset *ts;
    char payload[64];
    int i, err;

    meet_reset(n, false);
    met_results = 0;
    dsjob_client_add_server(c, addr_of(port));
    dsjob_client_set_timeout(c, 2000, 10000);
    ts = dsjob_taskset_new(c, &cb);
    for (i = 0; i < n; i++) {
        snprintf(payload, sizeof(payload), "%s-%d", tag, i);
        dsjob_taskset_add(ts, "meet", NULL, payload, strlen(payload), DSJOB_PRIO_NORMAL, 0, NULL,
                          NULL);
    }
    err = dsjob_taskset_run(ts, 2 * MEET_WAIT_MS);
    if (err != DSJOB_OK)
        tap_diag("%s: task set: %s: %s", tag, dsjob_strerror(err), dsjob_client_errmsg(c));
    dsjob_taskset_free(ts);
    dsjob_client_free(c);
    return met_results;
}

static void
suite_concurrency(const char *kind, int port)
{
    const struct dsjob_task_callbacks cb = {.complete = meet_complete};
    struct dsjob_worker *w = meet_worker(port, 1);
    struct dsjob_client *c = dsjob_client_new(), *q = dsjob_client_new();
    struct dsjob_taskset *ts;
    struct dsjob_task *tasks[6];
    struct runner r;
    char handle[DSJOB_HANDLE_MAX];
    int i, err, done, queued, running;

    tap_is_int(dsjob_worker_set_concurrency(w, 0), DSJOB_ERR_ARG, "%s: concurrency 0 is refused",
               kind);
    tap_is_int(dsjob_worker_set_concurrency(w, -2), DSJOB_ERR_ARG,
               "%s: a negative concurrency is refused", kind);
    tap_is_int(dsjob_worker_set_concurrency(w, 4), DSJOB_OK, "%s: concurrency 4", kind);
    dsjob_client_add_server(c, addr_of(port));
    dsjob_client_set_timeout(c, 2000, 10000);
    dsjob_client_add_server(q, addr_of(port));
    dsjob_client_set_timeout(q, 2000, 10000);

    /* work() ignores the concurrency: one job, in the calling thread. */
    meet_reset(1, false);
    dsjob_client_submit_bg(c, "meet", NULL, "one", 3, DSJOB_PRIO_NORMAL, handle, sizeof(handle));
    tap_is_int(dsjob_worker_work(w, 5000), DSJOB_OK, "%s: with concurrency 4, work runs a job",
               kind);
    pthread_mutex_lock(&meet.mu);
    tap_ok(meet.calls == 1 && pthread_equal(meet.caller, pthread_self()),
           "%s: ... one job, in the calling thread", kind);
    pthread_mutex_unlock(&meet.mu);

    runner_start(&r, w);
    tap_is_int(meet_round(port, 4, kind), 4,
               "%s: concurrency 4: four callbacks are inside at the same time", kind);
    tap_is_int(meet_get(&meet.most), 4, "%s: ... and never more than four", kind);
    tap_is_int(meet_round(port, 4, kind), 4, "%s: ... again, with the same four threads", kind);

    /* Stop from this thread while four jobs run and two more wait. */
    meet_reset(4, true);
    met_results = 0;
    ts = dsjob_taskset_new(c, &cb);
    for (i = 0; i < 6; i++)
        dsjob_taskset_add(ts, "meet", NULL, "held", 4, DSJOB_PRIO_NORMAL, 0, NULL, &tasks[i]);
    dsjob_taskset_run(ts, 200); /* sends the submits */
    tap_is_int(meet_until_inside(4, 10000), 4, "%s: four held jobs are running", kind);
    dsjob_worker_stop(w);
    meet_release();
    for (i = 0; i < 100 && met_results < 4; i++)
        dsjob_taskset_run(ts, 100);
    err = runner_join(&r);
    tap_is_int(err, DSJOB_OK, "%s: after a stop from another thread, run returns DSJOB_OK", kind);
    tap_is_int(met_results, 4, "%s: all four running jobs completed", kind);
    tap_is_int(meet_get(&meet.calls), 4, "%s: no fifth job was grabbed", kind);
    done = queued = running = 0;
    for (i = 0; i < 6; i++) {
        struct dsjob_status st;

        if (dsjob_task_done(tasks[i])) {
            done++;
            continue;
        }
        memset(&st, 0, sizeof(st));
        if (dsjob_client_status(q, dsjob_task_handle(tasks[i]), &st) == DSJOB_OK && st.known)
            queued++;
        running += st.running;
    }
    tap_ok(done == 4 && queued == 2 && running == 0,
           "%s: the other two are still queued, not running (done %d, queued %d, running %d)", kind,
           done, queued, running);
    tap_is_int(dsjob_worker_run(w), DSJOB_OK, "%s: run after stop returns at once", kind);
    dsjob_taskset_free(ts);
    dsjob_worker_free(w);
    dsjob_client_free(c);
    dsjob_client_free(q);
}

static void
suite_concurrency_restart(void)
{
    struct daemon d;
    char port[16];
    const char *extra[] = {"-p", port, NULL};
    struct dsjob_worker *w;
    struct runner r;

    daemon_start(&d, NULL);
    snprintf(port, sizeof(port), "%d", d.port);
    w = meet_worker(d.port, 4);
    runner_start(&r, w);
    tap_is_int(meet_round(d.port, 4, "before"), 4, "dsjobd: four threads work at once");
    daemon_stop(&d);
    daemon_start(&d, extra);
    tap_is_int(d.port, atoi(port), "dsjobd restarted on the same port");
    tap_is_int(meet_round(d.port, 4, "after"), 4,
               "after the restart all four threads reconnected: four jobs at once again");
    dsjob_worker_stop(w);
    tap_is_int(runner_join(&r), DSJOB_OK, "then a stop ends all four threads");
    dsjob_worker_free(w);
    daemon_stop(&d);
}

static void
part_dsjobd(void *arg)
{
    struct daemon d;
    const char *retries[] = {"--job-retries", "1", NULL};

    (void)arg;
    daemon_start(&d, retries);
    suite_inproc("dsjobd", d.port);
    suite_stop_and_timeout("dsjobd", d.port, true);
    suite_concurrency("dsjobd", d.port);
    daemon_stop(&d);
}

static void
part_restart(void *arg)
{
    (void)arg;
    suite_restart();
}

static void
part_concurrency_restart(void *arg)
{
    (void)arg;
    suite_concurrency_restart();
}

static void
part_gearmand(void *arg)
{
    struct gearmand g;

    (void)arg;
    if (gearmand_start(&g)) {
        suite_inproc("gearmand", g.port);
        suite_stop_and_timeout("gearmand", g.port, false);
        suite_concurrency("gearmand", g.port);
        gearmand_stop(&g);
    } else {
        tap_skip(1, "gearmand not installed");
    }
}

/*
 * Against dsjobd, across its restarts and against gearmand: four parts
 * with servers of their own, which mostly wait (for a slow job, a timeout,
 * a restart), run side by side as tap parts.
 */
int
main(void)
{
    alarm(240);
    signal(SIGPIPE, SIG_IGN);
    meet_init();
    tap_part(part_dsjobd, NULL);
    tap_part(part_restart, NULL);
    tap_part(part_concurrency_restart, NULL);
    tap_part(part_gearmand, NULL);
    tap_parts_end();
    return tap_done();
}
