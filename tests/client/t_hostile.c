/*
 * Hostile servers: a fake server (a child on a loopback socket made here)
 * answers the libraries' first request with garbage, a header declaring a
 * 4 GiB or a 60 MiB packet, half a header and a close, nothing at all, or
 * a result for a handle nobody asked for. Every client, task set and worker
 * call must come back with an error within its timeout (bounded here far
 * above it, 10 s against a fake that stalls for 30 s), none may crash, and
 * none may allocate a declared size before the bytes arrive: the largest
 * single allocation through the library allocator is checked.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dsjob/client.h>
#include <dsjob/worker.h>

#include "proto/packet.h"
#include "tap.h"

#define IO_MS 500           /* the libraries' I/O timeout in every case */
#define BOUND_MS 10000      /* a call that takes longer than this hangs */
#define STALL_S 30          /* how long the fake keeps a connection it stalls */
#define MAX_ALLOC (1 << 20) /* no single allocation may be larger */

enum act { GARBAGE, HUGE, BIG, HALF, STALL, STRANGER, NACTS, LONG_HANDLE };

static const char *const act_name[NACTS] = {
    [GARBAGE] = "garbage",
    [HUGE] = "a 4 GiB packet declared",
    [BIG] = "a 60 MiB packet declared, never sent",
    [HALF] = "half a header, then a close",
    [STALL] = "nothing at all",
    [STRANGER] = "a result for a handle nobody asked for",
};

static size_t max_alloc;

static void *
big_watch_malloc(size_t n)
{
    if (n > max_alloc)
        max_alloc = n;
    return malloc(n);
}

static long long
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
send_all(int fd, const void *buf, size_t len)
{
    if (send(fd, buf, len, MSG_NOSIGNAL) < 0) {
        /* The library may have gone already: that is its right. */
    }
}

/* A packet of type with the given payload (NULs between arguments included). */
static void
send_packet(int fd, unsigned type, const void *payload, size_t len)
{
    unsigned char h[PACKET_HEADER_SIZE];

    packet_encode_header(h, PACKET_RES, type, (uint32_t)len);
    send_all(fd, h, sizeof(h));
    send_all(fd, payload, len);
}

/* Reads exactly len bytes, or exits: the library has gone. */
static void
recv_all(int fd, void *buf, size_t len)
{
    size_t got = 0;

    while (got < len) {
        ssize_t r = recv(fd, (char *)buf + got, len - got, 0);

        if (r <= 0)
            _exit(0);
        got += (size_t)r;
    }
}

/*
 * Not hostile: a server whose job handles are longer than a task keeps
 * inline (64 bytes). It answers the OPTION_REQ and each SUBMIT_JOB with
 * JOB_CREATED and WORK_COMPLETE, alternating a 200-byte handle and a
 * short one, the result naming the job's payload.
 */
static void
serve_long_handles(int fd)
{
    unsigned char h[PACKET_HEADER_SIZE], body[4096], out[512];
    int k = 0;

    for (;;) {
        struct packet_header ph;
        uint32_t len;
        char handle[256];
        size_t hl;

        recv_all(fd, h, sizeof(h));
        if (packet_decode_header(h, sizeof(h), sizeof(body), &ph) != PACKET_HEADER_OK)
            _exit(1);
        len = ph.size;
        recv_all(fd, body, len);
        if (ph.type == PACKET_OPTION_REQ) {
            send_packet(fd, PACKET_OPTION_RES, body, len);
            continue;
        }
        if (ph.type != PACKET_SUBMIT_JOB)
            continue;
        if (k++ % 2 == 0) {
            memset(handle, 'a', 200);
            memcpy(handle, "H:long:", 7);
            handle[198] = (char)('0' + k / 10 % 10);
            handle[199] = (char)('0' + k % 10);
            handle[200] = '\0';
        } else {
            snprintf(handle, sizeof(handle), "H:s:%d", k);
        }
        hl = strlen(handle);
        send_packet(fd, PACKET_JOB_CREATED, handle, hl);
        memcpy(out, handle, hl);
        out[hl] = '\0';
        /* the payload is the submit's third argument: after two NULs */
        {
            unsigned char *p = memchr(body, '\0', len);

            p = p ? memchr(p + 1, '\0', len - (size_t)(p + 1 - body)) : NULL;
            if (p == NULL)
                _exit(1);
            memcpy(out + hl + 1, p + 1, len - (size_t)(p + 1 - body));
            send_packet(fd, PACKET_WORK_COMPLETE, out, hl + 1 + len - (size_t)(p + 1 - body));
        }
    }
}

/* One connection: wait for the first bytes of a request, then misbehave. */
static void
serve(int fd, enum act a)
{
    struct pollfd pfd = {fd, POLLIN, 0};
    unsigned char buf[4096], h[PACKET_HEADER_SIZE];

    if (a == LONG_HANDLE)
        serve_long_handles(fd);
    if (poll(&pfd, 1, 5000) > 0 && recv(fd, buf, sizeof(buf), 0) <= 0)
        _exit(0);
    switch (a) {
    case GARBAGE: send_all(fd, "HTTP/1.1 400 Bad Request\r\n\r\nno", 31); break;
    case HUGE:
        packet_encode_header(h, PACKET_RES, PACKET_JOB_CREATED, 0xfffffff0u);
        send_all(fd, h, sizeof(h));
        send_all(fd, "H:x", 3);
        break;
    case BIG:
        packet_encode_header(h, PACKET_RES, PACKET_JOB_CREATED, 60u << 20);
        send_all(fd, h, sizeof(h));
        break;
    case HALF:
        packet_encode_header(h, PACKET_RES, PACKET_JOB_CREATED, 10);
        send_all(fd, h, 6);
        close(fd);
        _exit(0);
    case STALL: break;
    case STRANGER:
        send_packet(fd, PACKET_JOB_CREATED, "H:fake:1", 8);
        send_packet(fd, PACKET_WORK_COMPLETE, "H:nobody:7\0x", 12);          /* someone else's */
        send_packet(fd, PACKET_JOB_ASSIGN, "H:nobody:8\0hostile\0data", 24); /* unasked */
        break;
    case NACTS:
    case LONG_HANDLE: break;
    }
    sleep(STALL_S);
    _exit(0);
}

/* The fake server: a child accepting on a port of its own, each connection in a child. */
static pid_t
fake_start(enum act a, int *port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t slen = sizeof(sin);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    pid_t pid;

    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(lfd, 64) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sin, &slen) < 0)
        tap_bail("fake server: %s", strerror(errno));
    *port = ntohs(sin.sin_port);
    pid = fork();
    if (pid < 0)
        tap_bail("fork: %s", strerror(errno));
    if (pid > 0)
        setpgid(pid, pid); /* also here, so that fake_stop cannot come first */
    if (pid == 0) {
        setpgid(0, 0); /* it and its connections' children go together */
        signal(SIGCHLD, SIG_IGN);
        for (;;) {
            int fd = accept(lfd, NULL, NULL);

            if (fd < 0)
                continue;
            if (fork() == 0) {
                close(lfd);
                serve(fd, a);
            }
            close(fd);
        }
    }
    close(lfd);
    return pid;
}

/* Stops the fake and every connection child it made: its process group. */
static void
fake_stop(pid_t pid)
{
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static int
never(struct dsjob_job *job, void *user)
{
    (void)job;
    (void)user;
    return DSJOB_WORK_COMPLETE;
}

/* Reports one call: it failed in time. */
static void
report(enum act a, const char *call, bool failed, long long ms)
{
    tap_ok(failed && ms < BOUND_MS, "%s: %s returns an error in time (%lld ms)", act_name[a], call,
           ms);
}

static void
try_client(enum act a, const char *addr)
{
    struct dsjob_client *c = dsjob_client_new();
    char handle[DSJOB_HANDLE_MAX];
    void *result = NULL;
    size_t len = 0;
    long long t0;
    int rc;

    dsjob_client_add_server(c, addr);
    dsjob_client_set_timeout(c, IO_MS, IO_MS);
    t0 = now_ms();
    rc = dsjob_client_submit(c, "f", NULL, "x", 1, DSJOB_PRIO_NORMAL, &result, &len);
    report(a, "dsjob_client_submit", rc != DSJOB_OK, now_ms() - t0);
    dsjob_free(result);
    t0 = now_ms();
    rc = dsjob_client_submit_bg(c, "f", NULL, "x", 1, DSJOB_PRIO_NORMAL, handle, sizeof(handle));
    if (a == STRANGER) /* its JOB_CREATED comes first, and is a right answer to this one */
        tap_ok(rc == DSJOB_OK && strcmp(handle, "H:fake:1") == 0 && now_ms() - t0 < BOUND_MS,
               "%s: dsjob_client_submit_bg takes the JOB_CREATED that came first", act_name[a]);
    else
        report(a, "dsjob_client_submit_bg", rc != DSJOB_OK, now_ms() - t0);
    t0 = now_ms();
    rc = dsjob_client_echo(c, "ping", 4);
    report(a, "dsjob_client_echo", rc != DSJOB_OK, now_ms() - t0);
    dsjob_client_free(c);
}

static void
try_taskset(enum act a, const char *addr)
{
    struct dsjob_client *c = dsjob_client_new();
    struct dsjob_taskset *ts;
    long long t0;
    int rc;

    dsjob_client_add_server(c, addr);
    dsjob_client_set_timeout(c, IO_MS, IO_MS);
    ts = dsjob_taskset_new(c, NULL);
    dsjob_taskset_add(ts, "f", NULL, "x", 1, DSJOB_PRIO_NORMAL, 0, NULL, NULL);
    dsjob_taskset_add(ts, "f", NULL, "y", 1, DSJOB_PRIO_NORMAL, DSJOB_TASK_BACKGROUND, NULL, NULL);
    t0 = now_ms();
    rc = dsjob_taskset_run(ts, IO_MS * 2);
    report(a, "dsjob_taskset_run",
           rc != DSJOB_OK || dsjob_taskset_nfailed(ts) == dsjob_taskset_count(ts), now_ms() - t0);
    dsjob_taskset_free(ts);
    dsjob_client_free(c);
}

static void
try_worker(enum act a, const char *addr)
{
    struct dsjob_worker *w = dsjob_worker_new();
    long long t0;
    int i;

    dsjob_worker_add_server(w, addr);
    dsjob_worker_set_timeout(w, IO_MS, IO_MS);
    dsjob_worker_register(w, "f", never, NULL, 0);
    /* A worker keeps trying its servers: each call must still come back. */
    t0 = now_ms();
    for (i = 0; i < 3; i++)
        dsjob_worker_work(w, IO_MS);
    tap_ok(now_ms() - t0 < BOUND_MS,
           "%s: dsjob_worker_work comes back each time (3 calls, %lld ms)", act_name[a],
           now_ms() - t0);
    dsjob_worker_free(w);
}

/* Each task keeps its own handle, however long, and gets its own result. */
static void
long_handles(void)
{
    struct dsjob_client *c = dsjob_client_new();
    struct dsjob_taskset *ts;
    struct dsjob_task *t[4];
    char addr[32];
    int port, i, ok = 1;
    pid_t pid = fake_start(LONG_HANDLE, &port);

    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    dsjob_client_add_server(c, addr);
    dsjob_client_set_timeout(c, BOUND_MS, BOUND_MS);
    ts = dsjob_taskset_new(c, NULL);
    for (i = 0; i < 4; i++) {
        char p[8];

        snprintf(p, sizeof(p), "p%d", i);
        dsjob_taskset_add(ts, "f", NULL, p, strlen(p), DSJOB_PRIO_NORMAL, 0, NULL, &t[i]);
    }
    tap_ok(dsjob_taskset_run(ts, BOUND_MS) == DSJOB_OK, "long handles: the set runs to its end");
    for (i = 0; i < 4; i++) {
        size_t len = 0;
        const char *r = dsjob_task_result(t[i], &len);
        const char *h = dsjob_task_handle(t[i]);
        char p[8];

        snprintf(p, sizeof(p), "p%d", i);
        if (r == NULL || len != strlen(p) || memcmp(r, p, len) != 0 ||
            strlen(h) != (i % 2 == 0 ? 200u : 5u) || strncmp(h, i % 2 ? "H:s:" : "H:long:", 4) != 0)
            ok = 0;
    }
    tap_ok(ok, "long handles: each task has its whole handle (200 and 5 bytes) and its result");
    dsjob_taskset_free(ts);
    dsjob_client_free(c);
    fake_stop(pid);
}

/* One part: a fake server misbehaving one way and one kind of caller against it. */
struct part {
    enum act act;
    void (*call)(enum act a, const char *addr);
    const char *what; /* "client", "task set", "worker" */
};

static void
run_part(void *arg)
{
    const struct part *p = arg;
    char addr[32];
    int port;
    pid_t pid = fake_start(p->act, &port);

    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    max_alloc = 0;
    p->call(p->act, addr);
    tap_ok(max_alloc <= MAX_ALLOC, "%s: %s: the largest allocation was %zu bytes", act_name[p->act],
           p->what, max_alloc);
    fake_stop(pid);
}

static void
run_long_handles(void *arg)
{
    (void)arg;
    long_handles();
}

/*
 * Every call waits for its I/O timeout against a fake that says nothing
 * more: each act and kind of caller is a tap part of its own, with its own
 * fake, so that those timeouts run out side by side.
 */
int
main(void)
{
    static struct part parts[NACTS * 3];
    int a, n = 0;

    alarm(300);
    signal(SIGPIPE, SIG_IGN);
    dsjob_set_alloc_funcs(big_watch_malloc, free);
    for (a = 0; a < NACTS; a++) {
        parts[n++] = (struct part){(enum act)a, try_client, "client"};
        parts[n++] = (struct part){(enum act)a, try_taskset, "task set"};
        parts[n++] = (struct part){(enum act)a, try_worker, "worker"};
    }
    for (a = 0; a < n; a++)
        tap_part(run_part, &parts[a]);
    tap_part(run_long_handles, NULL);
    tap_parts_end();
    return tap_done();
}
