/*
 * libdsjobworker against real servers: the job's accessors, work() with a
 * timeout and after stop, a worker that reconnects and registers again
 * after its server restarts on the same port, a graceful stop from a
 * signal that lets the running job finish, and CAN_DO_TIMEOUT taking a job
 * back. The in-process checks also run against gearmand 1.1.20.
 */
#include "config.h"

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
    char handle[128], unique[64];
    struct dsjob_status st;
    int err;

    memset(&s, 0, sizeof(s));
    tap_is_int(dsjob_worker_work(w, 100), DSJOB_ERR_STATE,
               "%s: work without servers: DSJOB_ERR_STATE", kind);
    tap_is_int(dsjob_worker_add_server(w, "bad"), DSJOB_ERR_ARG, "%s: a bad address is refused",
               kind);
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
    for (i = 0; i < 100; i++) {
        if (waitpid(w, &status, WNOHANG) == w)
            break;
        sleep_ms(50);
    }
    tap_ok(i < 100 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: then the worker exits 0",
           kind);
    if (i == 100)
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
        worker_reap(w);
    }
    dsjob_client_free(c);
}

int
main(void)
{
    struct daemon d;
    struct gearmand g;
    const char *retries[] = {"--job-retries", "1", NULL};

    alarm(200);
    signal(SIGPIPE, SIG_IGN);
    daemon_start(&d, retries);
    suite_inproc("dsjobd", d.port);
    suite_stop_and_timeout("dsjobd", d.port, true);
    daemon_stop(&d);
    suite_restart();
    if (gearmand_start(&g)) {
        suite_inproc("gearmand", g.port);
        suite_stop_and_timeout("gearmand", g.port, false);
        gearmand_stop(&g);
    } else {
        tap_skip(1, "gearmand not installed");
    }
    return tap_done();
}
