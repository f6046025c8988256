/*
 * A libgearman worker with gearman_worker_set_timeout against a server that
 * is slow to answer its GRAB_JOB: does it spin once the queue is empty?
 *
 * libgearman 1.1.20 gives up on a GRAB_JOB whose answer takes longer than
 * the worker's timeout (gearman_worker_work returns GEARMAN_TIMEOUT) and
 * sends another at its next call, so the server owes it two answers; it
 * then reads each answer as that of its newest GRAB_JOB, one behind, and
 * once the queue is empty every PRE_SLEEP is woken at once by the NO_JOB
 * still on its way: GRAB_JOB, NO_JOB, PRE_SLEEP as fast as the loop turns.
 * gearmand answers a GRAB_JOB at once. dsjobd on a durable store must not
 * hold one until a worker's last end commits (--store-commit-interval makes
 * that commit slower than the worker's timeout here).
 *
 * Usage: lg_grabspin KIND:PORT [KIND:PORT...] (PORT "-": skipped). For each
 * server: a forked libgearman worker with a WORKER_TIMEOUT_MS timeout talks
 * to it through a counting proxy (a thread here, which reads the packet
 * headers both ways); NJOBS background jobs are submitted; each must run
 * exactly once; once the server's status shows none left, the GRAB_JOBs the
 * worker sends over an idle window are counted. An idle libgearman worker
 * sends one per timeout (IDLE_MS / WORKER_TIMEOUT_MS); SPIN_BOUND is ten
 * times that. Every wait is bounded by STALL_S of nothing moving.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libgearman-1.0/gearman.h>

#include "tap.h"

#define FUNC "grabspin"
#define NJOBS 6
#define WORKER_TIMEOUT_MS 500 /* shorter than the store's commit interval (t_grabspin.sh) */
#define IDLE_MS 3000          /* the idle window: an idle worker sends about 6 GRAB_JOBs */
#define SPIN_BOUND 60         /* ten times that */
#define STALL_S 120           /* nothing moved this long: give up */
#define CLIENT_TIMEOUT_MS 60000

enum { TO_SERVER, TO_WORKER };

/* The proxy between the worker and the server, counting packets by type both ways. */
struct proxy {
    int lfd;                   /* listening socket */
    in_port_t port;            /* its port */
    in_port_t server;          /* the server's port */
    int stop[2];               /* a byte stops the thread */
    pthread_t thread;          /* the forwarding thread */
    atomic_ulong count[2][64]; /* packets by direction and type */
    atomic_ulong abandoned;    /* GRAB_JOBs sent while one was unanswered */
    unsigned char hdr[2][12];  /* a header being read, each way */
    size_t hlen[2];            /* its bytes so far */
    uint64_t skip[2];          /* payload bytes left of the packet in flight */
    long outstanding;          /* GRAB_JOBs not answered yet */
};

static void
count_bytes(struct proxy *px, int dir, const unsigned char *b, size_t n)
{
    while (n > 0) {
        if (px->skip[dir] > 0) {
            size_t k = px->skip[dir] < n ? (size_t)px->skip[dir] : n;

            px->skip[dir] -= k, b += k, n -= k;
            continue;
        }
        px->hdr[dir][px->hlen[dir]++] = *b++, n--;
        if (px->hlen[dir] < 12)
            continue;
        {
            const unsigned char *h = px->hdr[dir];
            uint32_t type = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | h[6] << 8 | h[7];
            uint32_t len = (uint32_t)h[8] << 24 | (uint32_t)h[9] << 16 | h[10] << 8 | h[11];

            atomic_fetch_add(&px->count[dir][type < 64 ? type : 0], 1);
            if (dir == TO_SERVER && (type == 9 || type == 30 || type == 39)) {
                if (px->outstanding > 0)
                    atomic_fetch_add(&px->abandoned, 1);
                px->outstanding++;
            } else if (dir == TO_WORKER && (type == 10 || type == 11 || type == 31 || type == 40)) {
                px->outstanding--;
            }
            px->skip[dir] = len;
            px->hlen[dir] = 0;
        }
    }
}

static int
connect_port(in_port_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Forwards one worker connection (the only one) until stopped or closed. */
static void *
proxy_run(void *arg)
{
    struct proxy *px = arg;
    int wfd = -1, sfd = -1;
    struct pollfd pfd[3];
    unsigned char buf[65536];

    pfd[0] = (struct pollfd){.fd = px->stop[0], .events = POLLIN};
    pfd[1] = (struct pollfd){.fd = px->lfd, .events = POLLIN};
    if (poll(pfd, 2, -1) < 0 || pfd[0].revents != 0)
        return NULL;
    wfd = accept(px->lfd, NULL, NULL);
    sfd = wfd < 0 ? -1 : connect_port(px->server);
    if (sfd < 0)
        goto out;
    for (;;) {
        pfd[1] = (struct pollfd){.fd = wfd, .events = POLLIN};
        pfd[2] = (struct pollfd){.fd = sfd, .events = POLLIN};
        if (poll(pfd, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pfd[0].revents != 0)
            break;
        for (int i = 1; i <= 2; i++) {
            int from = pfd[i].fd, to = i == 1 ? sfd : wfd;
            ssize_t n;

            if (pfd[i].revents == 0)
                continue;
            n = read(from, buf, sizeof(buf));
            if (n <= 0)
                goto out;
            count_bytes(px, i == 1 ? TO_SERVER : TO_WORKER, buf, (size_t)n);
            for (ssize_t off = 0; off < n;) {
                ssize_t w = write(to, buf + off, (size_t)(n - off));

                if (w < 0 && errno == EINTR)
                    continue;
                if (w <= 0)
                    goto out;
                off += w;
            }
        }
    }
out:
    if (wfd >= 0)
        close(wfd);
    if (sfd >= 0)
        close(sfd);
    return NULL;
}

static int
proxy_start(struct proxy *px, in_port_t server)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);

    memset(px, 0, sizeof(*px));
    px->server = server;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    px->lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (px->lfd < 0 || bind(px->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(px->lfd, 4) < 0 || getsockname(px->lfd, (struct sockaddr *)&sa, &len) < 0 ||
        pipe(px->stop) < 0)
        return -1;
    px->port = ntohs(sa.sin_port);
    return pthread_create(&px->thread, NULL, proxy_run, px) == 0 ? 0 : -1;
}

static void
proxy_stop(struct proxy *px)
{
    if (write(px->stop[1], "x", 1) != 1)
        tap_bail("proxy stop: %s", strerror(errno));
    pthread_join(px->thread, NULL);
    close(px->lfd);
    close(px->stop[0]);
    close(px->stop[1]);
}

static unsigned long
grabs(struct proxy *px)
{
    return atomic_load(&px->count[TO_SERVER][9]) + atomic_load(&px->count[TO_SERVER][30]) +
           atomic_load(&px->count[TO_SERVER][39]);
}

/* --- the worker (a forked child) ------------------------------------------- */

static int report_fd = -1; /* the worker's pipe to the parent: one line per job run */

static void *
job_fn(gearman_job_st *job, void *context, size_t *size, gearman_return_t *ret)
{
    char line[64];
    size_t n = gearman_job_workload_size(job);

    (void)context;
    if (n > sizeof(line) - 2)
        n = sizeof(line) - 2;
    memcpy(line, gearman_job_workload(job), n);
    line[n++] = '\n';
    if (write(report_fd, line, n) != (ssize_t)n)
        _exit(3);
    *size = 0;
    *ret = GEARMAN_SUCCESS;
    return NULL;
}

static void
worker_main(in_port_t port)
{
    gearman_worker_st *w = gearman_worker_create(NULL);
    gearman_return_t ret;

    alarm(4 * STALL_S); /* never outlives the test */
    if (w == NULL || gearman_worker_add_server(w, "127.0.0.1", port) != GEARMAN_SUCCESS ||
        gearman_worker_add_function(w, FUNC, 0, job_fn, NULL) != GEARMAN_SUCCESS)
        _exit(2);
    /* As bench/lg_gearman.c does: an idle worker wakes this often. */
    gearman_worker_set_timeout(w, WORKER_TIMEOUT_MS);
    for (;;) {
        ret = gearman_worker_work(w);
        if (ret != GEARMAN_SUCCESS && ret != GEARMAN_TIMEOUT && ret != GEARMAN_IO_WAIT &&
            ret != GEARMAN_NO_JOBS)
            _exit(4);
    }
}

/* --- the parent ------------------------------------------------------------- */

/* FUNC's "total running" from the admin status, or -1 if the server did not answer. */
static int
status_of(in_port_t port, long *total, long *running)
{
    int fd = connect_port(port);
    char buf[8192];
    size_t len = 0;
    const char *p;

    *total = *running = 0;
    if (fd < 0)
        return -1;
    if (write(fd, "status\n", 7) != 7)
        goto fail;
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t n;

        if (poll(&pfd, 1, STALL_S * 1000) <= 0)
            goto fail;
        n = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (n <= 0)
            goto fail;
        len += (size_t)n;
        buf[len] = '\0';
        if (strcmp(buf, ".\n") == 0 || (len >= 3 && strstr(buf, "\n.\n") != NULL) ||
            len == sizeof(buf) - 1)
            break;
    }
    close(fd);
    for (p = buf; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, FUNC "\t", sizeof(FUNC)) == 0) {
            sscanf(p + sizeof(FUNC), "%ld\t%ld", total, running);
            break;
        }
    return 0;
fail:
    close(fd);
    return -1;
}

static void
check_server(const char *kind, in_port_t port)
{
    struct proxy px;
    gearman_client_st *cl;
    int fds[2];
    pid_t pid;
    int seen[NJOBS] = {0};
    int ran = 0, twice = 0;
    char buf[4096], *line;
    size_t len = 0;
    time_t moved;
    unsigned long g0, nj0, ps0, noop0;
    long total = 1, running = 1;
    struct timespec idle = {IDLE_MS / 1000, (IDLE_MS % 1000) * 1000000L};
    int status;

    if (proxy_start(&px, port) < 0)
        tap_bail("%s: proxy: %s", kind, strerror(errno));
    if (pipe(fds) < 0)
        tap_bail("pipe: %s", strerror(errno));
    cl = gearman_client_create(NULL);
    if (cl == NULL || gearman_client_add_server(cl, "127.0.0.1", port) != GEARMAN_SUCCESS)
        tap_bail("%s: client", kind);
    gearman_client_set_timeout(cl, CLIENT_TIMEOUT_MS);
    for (int i = 0; i < NJOBS; i++) {
        char payload[32], handle[GEARMAN_JOB_HANDLE_SIZE];
        gearman_return_t ret;

        snprintf(payload, sizeof(payload), "%d", i);
        ret = gearman_client_do_background(cl, FUNC, NULL, payload, strlen(payload), handle);
        if (ret != GEARMAN_SUCCESS)
            tap_bail("%s: submit %d: %s", kind, i, gearman_client_error(cl));
    }
    gearman_client_free(cl);

    /* The worker starts with every job queued: it ends two within one commit. */
    pid = fork();
    if (pid < 0)
        tap_bail("fork: %s", strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        report_fd = fds[1];
        worker_main(px.port);
    }
    close(fds[1]);

    /* Each job's run, as the worker reports it, until all ran or nothing moved for STALL_S. */
    moved = time(NULL);
    while (ran < NJOBS && time(NULL) - moved < STALL_S) {
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        ssize_t n;

        if (poll(&pfd, 1, 1000) <= 0)
            continue;
        n = read(fds[0], buf + len, sizeof(buf) - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        while ((line = memchr(buf, '\n', len)) != NULL) {
            int id = atoi(buf);

            if (id >= 0 && id < NJOBS && seen[id]++ > 0)
                twice++;
            ran++;
            len -= (size_t)(line + 1 - buf);
            memmove(buf, line + 1, len);
        }
        moved = time(NULL);
    }
    tap_is_int(ran, NJOBS, "%s: the libgearman worker ran every job", kind);
    tap_is_int(twice, 0, "%s: no job ran twice", kind);

    /* The queue is empty and no job runs: the drain is over. */
    moved = time(NULL);
    while (time(NULL) - moved < STALL_S) {
        struct timespec ms50 = {0, 50000000L};

        if (status_of(port, &total, &running) < 0)
            break;
        if (total == 0 && running == 0)
            break;
        nanosleep(&ms50, NULL);
    }
    tap_ok(total == 0 && running == 0, "%s: the status shows no job left (%ld %ld)", kind, total,
           running);

    /* The idle window: how many GRAB_JOBs does an idle worker send? */
    g0 = grabs(&px);
    nj0 = atomic_load(&px.count[TO_WORKER][10]);
    ps0 = atomic_load(&px.count[TO_SERVER][4]);
    noop0 = atomic_load(&px.count[TO_WORKER][6]);
    nanosleep(&idle, NULL);
    g0 = grabs(&px) - g0;
    tap_diag("%s: in %d ms idle: %lu GRAB_JOB, %lu NO_JOB, %lu PRE_SLEEP, %lu NOOP", kind, IDLE_MS,
             g0, atomic_load(&px.count[TO_WORKER][10]) - nj0,
             atomic_load(&px.count[TO_SERVER][4]) - ps0,
             atomic_load(&px.count[TO_WORKER][6]) - noop0);
    tap_diag("%s: in all: %lu GRAB_JOB, %lu NO_JOB, %lu JOB_ASSIGN*, %lu sent while one was "
             "unanswered, %lu NOOP",
             kind, grabs(&px), atomic_load(&px.count[TO_WORKER][10]),
             atomic_load(&px.count[TO_WORKER][11]) + atomic_load(&px.count[TO_WORKER][31]) +
                 atomic_load(&px.count[TO_WORKER][40]),
             atomic_load(&px.abandoned), atomic_load(&px.count[TO_WORKER][6]));
    tap_ok(g0 <= SPIN_BOUND, "%s: an idle worker does not spin (%lu GRAB_JOB in %d ms, at most %d)",
           kind, g0, IDLE_MS, SPIN_BOUND);

    kill(pid, SIGTERM);
    waitpid(pid, &status, 0);
    close(fds[0]);
    proxy_stop(&px);
}

/* A part (tap_part): one server's checks, side by side with the others'. */
static void
server_part(void *arg)
{
    char *kind = arg, *colon = strchr(kind, ':');

    *colon = '\0';
    if (strcmp(colon + 1, "-") == 0)
        tap_skip(4, "%s is not installed or not built", kind);
    else
        check_server(kind, (in_port_t)atoi(colon + 1));
}

int
main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    alarm(10 * STALL_S);
    tap_plan(4 * (argc - 1));
    for (int i = 1; i < argc; i++) {
        if (strchr(argv[i], ':') == NULL)
            tap_bail("usage: lg_grabspin KIND:PORT ...");
        tap_part(server_part, argv[i]);
    }
    tap_parts_end();
    return tap_done();
}
