/*
 * Helpers shared by the library tests (see common.h). gearmand has no
 * port file, so it gets a port found free just before; it is the only
 * place these tests pick a port themselves.
 */
#include "config.h"
#include "common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dsjob/worker.h>

#include "tap.h"

long count_mallocs;
long count_frees;

void *
count_malloc(size_t n)
{
    count_mallocs++;
    return malloc(n);
}

void
count_free(void *p)
{
    count_frees++;
    free(p);
}

void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

const char *
addr_of(int port)
{
    static char buf[4][32];
    static int i;

    i = (i + 1) % 4;
    snprintf(buf[i], sizeof(buf[i]), "127.0.0.1:%d", port);
    return buf[i];
}

int
free_port(void)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    if (fd < 0)
        tap_bail("socket: %s", strerror(errno));
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) < 0)
        tap_bail("bind: %s", strerror(errno));
    port = ntohs(sin.sin_port);
    close(fd);
    return port;
}

static bool
can_connect(int port)
{
    struct sockaddr_in sin;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    bool ok;

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok = connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0;
    close(fd);
    return ok;
}

bool
gearmand_start(struct gearmand *g)
{
    const char *bin = getenv("GEARMAND");
    char port[16], log[300], pid[300];
    int i, status;

    memset(g, 0, sizeof(*g));
    if (bin == NULL || *bin == '\0')
        bin = "/usr/sbin/gearmand";
    if (access(bin, X_OK) != 0)
        return false;
    snprintf(g->dir, sizeof(g->dir), "%s/dsjob-gm.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(g->dir) == NULL)
        return false;
    g->port = free_port();
    snprintf(port, sizeof(port), "--port=%d", g->port);
    snprintf(log, sizeof(log), "--log-file=%s/gearmand.log", g->dir);
    snprintf(pid, sizeof(pid), "--pid-file=%s/gearmand.pid", g->dir);
    g->pid = fork();
    if (g->pid < 0)
        return false;
    if (g->pid == 0) {
        execl(bin, bin, "--listen=127.0.0.1", port, "--threads=0", log, pid, (char *)NULL);
        _exit(127);
    }
    for (i = 0; i < 100; i++) {
        if (can_connect(g->port))
            return true;
        if (waitpid(g->pid, &status, WNOHANG) == g->pid) {
            g->pid = 0;
            return false;
        }
        sleep_ms(50);
    }
    gearmand_stop(g);
    return false;
}

void
gearmand_stop(struct gearmand *g)
{
    char cmd[300];

    if (g->pid > 0)
        worker_reap(g->pid);
    g->pid = 0;
    if (g->dir[0] != '\0' && getenv("DSJOB_KEEP_TMP") == NULL) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g->dir);
        if (system(cmd) != 0)
            tap_diag("could not remove %s", g->dir);
    }
}

int
worker_reap(pid_t pid)
{
    int status, i;

    kill(pid, SIGTERM);
    for (i = 0; i < 200; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        sleep_ms(50);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

static int
fn_rev(struct dsjob_job *job, void *user)
{
    size_t len, i;
    const char *p = dsjob_job_payload(job, &len);
    char *r = malloc(len + 1);

    (void)user;
    for (i = 0; i < len; i++)
        r[i] = p[len - 1 - i];
    dsjob_job_set_result(job, r, len);
    free(r);
    return DSJOB_WORK_COMPLETE;
}

static int
fn_echo(struct dsjob_job *job, void *user)
{
    size_t len;
    const void *p = dsjob_job_payload(job, &len);

    (void)user;
    dsjob_job_set_result(job, p, len);
    return DSJOB_WORK_COMPLETE;
}

static int
fn_fail(struct dsjob_job *job, void *user)
{
    (void)job;
    (void)user;
    return DSJOB_WORK_FAIL;
}

static int
fn_exc(struct dsjob_job *job, void *user)
{
    char buf[256];
    int n = snprintf(buf, sizeof(buf), "boom:%s", (const char *)dsjob_job_payload(job, NULL));

    (void)user;
    dsjob_job_set_result(job, buf, (size_t)n);
    return DSJOB_WORK_EXCEPTION;
}

static int
fn_progress(struct dsjob_job *job, void *user)
{
    (void)user;
    dsjob_job_status(job, 1, 2);
    dsjob_job_data(job, "chunk", 5);
    dsjob_job_warning(job, "warn", 4);
    dsjob_job_status(job, 2, 2);
    dsjob_job_set_result(job, "done", 4);
    return DSJOB_WORK_COMPLETE;
}

static int
fn_sometimes(struct dsjob_job *job, void *user)
{
    size_t len;
    const char *p = dsjob_job_payload(job, &len);
    long n = atol(p);

    (void)user;
    if (n % 7 == 0)
        return DSJOB_WORK_FAIL;
    if (n % 11 == 0) {
        dsjob_job_set_result(job, "eleven", 6);
        return DSJOB_WORK_EXCEPTION;
    }
    dsjob_job_set_result(job, p, len);
    return DSJOB_WORK_COMPLETE;
}

static int
fn_slow(struct dsjob_job *job, void *user)
{
    (void)user;
    sleep_ms(atoi(dsjob_job_payload(job, NULL)));
    dsjob_job_set_result(job, "slept", 5);
    return DSJOB_WORK_COMPLETE;
}

static int
fn_hang(struct dsjob_job *job, void *user)
{
    (void)user;
    sleep_ms(3000);
    dsjob_job_set_result(job, "late", 4);
    return DSJOB_WORK_COMPLETE;
}

static struct dsjob_worker *child_worker;

static void
on_term(int sig)
{
    (void)sig;
    dsjob_worker_stop(child_worker);
}

pid_t
worker_fork(const char *const *servers)
{
    pid_t pid = fork();
    struct sigaction sa;
    int i, err;

    if (pid < 0)
        tap_bail("fork: %s", strerror(errno));
    if (pid > 0)
        return pid;
    alarm(120);
    child_worker = dsjob_worker_new();
    for (i = 0; servers[i] != NULL; i++)
        dsjob_worker_add_server(child_worker, servers[i]);
    dsjob_worker_set_id(child_worker, "t-worker");
    dsjob_worker_register(child_worker, "rev", fn_rev, NULL, 0);
    dsjob_worker_register(child_worker, "echo", fn_echo, NULL, 0);
    dsjob_worker_register(child_worker, "fail", fn_fail, NULL, 0);
    dsjob_worker_register(child_worker, "exc", fn_exc, NULL, 0);
    dsjob_worker_register(child_worker, "progress", fn_progress, NULL, 0);
    dsjob_worker_register(child_worker, "sometimes", fn_sometimes, NULL, 0);
    dsjob_worker_register(child_worker, "slow", fn_slow, NULL, 0);
    dsjob_worker_register(child_worker, "hang", fn_hang, NULL, 1000);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    err = dsjob_worker_run(child_worker);
    dsjob_worker_free(child_worker);
    _exit(err == DSJOB_OK ? 0 : 1);
}
