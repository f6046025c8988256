/*
 * ceiling: what this machine can move over loopback at all, with the
 * packet sizes and concurrency of the fg and fg1 scenarios, so that bench/run
 * can show dsjobd's figures as a fraction of it. Two minimal servers, each
 * one thread around epoll like dsjobd: `echo` sends every packet back to
 * its sender (client -> echo -> client), and `relay` passes a client's
 * packet to a worker connection and the worker's answer back to that
 * client (client -> relay -> worker -> relay -> client: the path a job
 * takes, without JOB_CREATED, a job table or the grab handshake). Like a
 * Gearman worker, a relay worker has at most --worker-window packets (1)
 * at a time; the others wait in the relay's FIFO. The
 * load side keeps K packets in flight on each of C blocking client
 * connections, W threads echo as workers, and it prints one key=value line
 * like loadgen's, with the server's CPU per round trip from /proc.
 *
 *   ceiling server echo|relay --port-file FILE [--worker-window N]
 *   ceiling load echo|relay -p PORT [-c C] [-k K] [-w W] [-s BYTES]
 *           [-t SECS] [--warmup SECS] [--pid PID] [--label NAME] [--name NAME]
 *
 * A packet is a 12-byte header (magic, type, body length, as Gearman's)
 * and a body of an 8-byte route (client connection, slot) and padding: 88
 * bytes in all for a 64-byte payload, the size of fg's SUBMIT_JOB.
 */
#define _GNU_SOURCE /* accept4; built without config.h */

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#define HOST "127.0.0.1"
#define HDR 12             /* magic, type, length: 4 bytes each */
#define ROUTE 8            /* connection id, slot */
#define SUBMIT_OVERHEAD 12 /* "bench_echo" NUL, empty unique NUL: what fg adds to the payload */
#define T_REQ 1            /* client -> server */
#define T_RES 2            /* answer, back to the client */
#define T_WORKER 3         /* a worker connection says hello */
#define MAX_FDS 4096
#define MAX_CLIENTS 1024
#define MAX_INFLIGHT 4096
#define MAX_WORKERS 256
#define IO_TIMEOUT_S 10.0 /* a client that gets nothing back for this long fails */
#define POLL_MS 100       /* blocking reads wake this often to look at the flags */

/* Server ---------------------------------------------------------------- */

struct sconn {
    int fd;            /* -1: slot unused */
    bool worker;       /* said T_WORKER */
    int busy;          /* worker: packets handed out and not answered */
    bool dirty;        /* on the flush list */
    bool want_out;     /* EPOLLOUT armed */
    unsigned char *in; /* unparsed input */
    size_t in_len, in_cap;
    unsigned char *out; /* unsent output from out_off */
    size_t out_off, out_len, out_cap;
};

static struct sconn conns[MAX_FDS];
static int dirty[MAX_FDS], ndirty;
static int workers[MAX_WORKERS], nworkers, next_worker;
static int epfd;
static bool relay;
static int window = 1;      /* packets a worker holds at once, 0: no limit */
static unsigned char *fifo; /* relay: packets waiting for a free worker */
static size_t fifo_off, fifo_len, fifo_cap;

static void
die_sys(const char *what)
{
    fprintf(stderr, "ceiling: %s: %s\n", what, strerror(errno));
    exit(1);
}

static uint32_t
get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void
put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void
grow(unsigned char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return;
    while (*cap < need)
        *cap = *cap ? *cap * 2 : 4096;
    *buf = realloc(*buf, *cap);
    if (*buf == NULL) {
        fprintf(stderr, "ceiling: out of memory\n");
        exit(1);
    }
}

/* Queues one packet on c, to be written when the batch of events is done. */
static void
queue_out(struct sconn *c, const unsigned char *pkt, size_t len)
{
    if (c->out_off > 0 && c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    grow(&c->out, &c->out_cap, c->out_len + len);
    memcpy(c->out + c->out_len, pkt, len);
    c->out_len += len;
    if (!c->dirty) {
        c->dirty = true;
        dirty[ndirty++] = c->fd;
    }
}

static void
sconn_close(struct sconn *c)
{
    for (int i = 0; i < nworkers; i++)
        if (workers[i] == c->fd)
            workers[i] = workers[--nworkers];
    close(c->fd);
    free(c->in);
    free(c->out);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

static void
set_out_interest(struct sconn *c, bool want)
{
    struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0), .data.fd = c->fd};

    if (c->want_out == want)
        return;
    c->want_out = want;
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Writes what c has queued; EPOLLOUT only while some is left. */
static void
flush(struct sconn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            break;
        if (w <= 0) {
            sconn_close(c);
            return;
        }
        c->out_off += (size_t)w;
    }
    set_out_interest(c, c->out_off < c->out_len);
}

/* Hands the oldest waiting packet to worker w; false when none waits. */
static bool
worker_take(struct sconn *w)
{
    size_t len;

    if (fifo_off == fifo_len)
        return false;
    len = HDR + get32(fifo + fifo_off + 8);
    w->busy++;
    queue_out(w, fifo + fifo_off, len);
    fifo_off += len;
    return true;
}

/* A worker answered: it takes the oldest waiting packet, if any. */
static void
worker_free(struct sconn *w)
{
    w->busy--;
    worker_take(w);
}

/* Handles one whole packet from c. */
static void
handle(struct sconn *c, unsigned char *pkt, size_t len)
{
    uint32_t type = get32(pkt + 4);

    if (type == T_WORKER) {
        c->worker = true;
        if (nworkers < MAX_WORKERS)
            workers[nworkers++] = c->fd;
        /* packets may be waiting already */
        while ((window == 0 || c->busy < window) && worker_take(c))
            ;
        return;
    }
    if (!relay) {
        put32(pkt + 4, T_RES);
        queue_out(c, pkt, len);
        return;
    }
    if (c->worker) {
        /* the answer goes to the client named in its route */
        int to = (int)get32(pkt + HDR);

        if (to >= 0 && to < MAX_FDS && conns[to].fd == to && !conns[to].worker)
            queue_out(&conns[to], pkt, len);
        worker_free(c);
        return;
    }
    put32(pkt + HDR, (uint32_t)c->fd);
    if (fifo_off == fifo_len) {
        /* the next worker in turn that has room takes it at once */
        for (int i = 0; i < nworkers; i++) {
            struct sconn *w = &conns[workers[next_worker++ % nworkers]];

            if (window == 0 || w->busy < window) {
                w->busy++;
                queue_out(w, pkt, len);
                return;
            }
        }
    }
    if (fifo_off > 0 && fifo_off == fifo_len)
        fifo_off = fifo_len = 0;
    grow(&fifo, &fifo_cap, fifo_len + len);
    memcpy(fifo + fifo_len, pkt, len);
    fifo_len += len;
}

static void
on_readable(struct sconn *c)
{
    size_t off = 0;

    for (;;) {
        ssize_t r;

        grow(&c->in, &c->in_cap, c->in_len + 65536);
        r = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            break;
        if (r <= 0) {
            sconn_close(c);
            return;
        }
        c->in_len += (size_t)r;
        if (c->in_len < c->in_cap)
            break; /* the socket is drained: saves the read that says EAGAIN */
    }
    while (c->in_len - off >= HDR) {
        size_t len = HDR + get32(c->in + off + 8);

        if (c->in_len - off < len)
            break;
        handle(c, c->in + off, len);
        off += len;
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
}

static int
serve(const char *mode, const char *port_file, int worker_window)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t slen = sizeof(sa);
    struct epoll_event ev = {.events = EPOLLIN}, evs[256];
    int lfd, one = 1;
    FILE *f;

    relay = strcmp(mode, "relay") == 0;
    window = worker_window;
    if (!relay && strcmp(mode, "echo") != 0) {
        fprintf(stderr, "ceiling: server mode is echo or relay\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < MAX_FDS; i++)
        conns[i].fd = -1;
    inet_pton(AF_INET, HOST, &sa.sin_addr);
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 128) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &slen) != 0)
        die_sys("listen");
    f = fopen(port_file, "w");
    if (f == NULL || fprintf(f, "%d\n", ntohs(sa.sin_port)) < 0 || fclose(f) != 0)
        die_sys(port_file);
    epfd = epoll_create1(0);
    ev.data.fd = lfd;
    if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev) != 0)
        die_sys("epoll");
    for (;;) {
        int n = epoll_wait(epfd, evs, 256, -1);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            die_sys("epoll_wait");
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;

            if (fd == lfd) {
                int cfd;

                while ((cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = cfd};

                    if (cfd >= MAX_FDS) {
                        close(cfd);
                        continue;
                    }
                    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    memset(&conns[cfd], 0, sizeof(conns[cfd]));
                    conns[cfd].fd = cfd;
                    epoll_ctl(epfd, EPOLL_CTL_ADD, cfd, &cev);
                }
                continue;
            }
            if (conns[fd].fd != fd)
                continue; /* closed earlier in this batch */
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                on_readable(&conns[fd]);
            if (conns[fd].fd == fd && (evs[i].events & EPOLLOUT))
                flush(&conns[fd]);
        }
        /* one write per connection per batch of events */
        for (int i = 0; i < ndirty; i++) {
            struct sconn *c = &conns[dirty[i]];

            if (c->fd == dirty[i] && c->dirty) {
                c->dirty = false;
                flush(c);
            }
        }
        ndirty = 0;
    }
}

/* Load ------------------------------------------------------------------ */

struct opts {
    const char *mode;  /* echo or relay */
    const char *label; /* server= in the result line */
    const char *name;  /* scenario= in the result line */
    in_port_t port;
    int clients, inflight, workers;
    size_t payload;
    double secs, warmup;
    pid_t pid;
};

static struct opts o = {
    .label = "ceiling",
    .clients = 16,
    .inflight = 32,
    .workers = 4,
    .payload = 64,
    .secs = 3,
    .warmup = 0.5,
};

static atomic_bool stop, stop_workers, measuring;
static atomic_uint_fast64_t completed, errors;
static size_t pkt_len;

struct client {
    pthread_t tid;
    uint32_t *lat; /* samples in us while measuring */
    size_t nlat, cap;
};

static double
now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
sleep_s(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int
connect_to(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(o.port)};
    struct timeval tv = {.tv_sec = 0, .tv_usec = POLL_MS * 1000};
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

    inet_pton(AF_INET, HOST, &sa.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static int
write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void
make_packet(unsigned char *p, uint32_t type, uint32_t slot)
{
    memset(p, 'x', pkt_len);
    memcpy(p, "\0REQ", 4);
    put32(p + 4, type);
    put32(p + 8, (uint32_t)(pkt_len - HDR));
    put32(p + HDR, 0);
    put32(p + HDR + 4, slot);
}

static void
lat_add(struct client *c, double us)
{
    if (c->nlat == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4096;
        uint32_t *v = realloc(c->lat, cap * sizeof(*v));

        if (v == NULL)
            return;
        c->lat = v;
        c->cap = cap;
    }
    c->lat[c->nlat++] = us < 0 ? 0 : (uint32_t)us;
}

/* Keeps o.inflight packets in flight; each answer sends the next one at once. */
static void *
client_thread(void *p)
{
    struct client *c = p;
    double *start = calloc((size_t)o.inflight, sizeof(*start)), last = now();
    unsigned char *in = malloc(pkt_len * (size_t)o.inflight * 2);
    unsigned char *out = malloc(pkt_len * (size_t)o.inflight);
    size_t have = 0;
    int fd = connect_to();

    if (fd < 0 || start == NULL || in == NULL || out == NULL)
        goto fail;
    for (int i = 0; i < o.inflight; i++) {
        make_packet(out + (size_t)i * pkt_len, T_REQ, (uint32_t)i);
        start[i] = now();
    }
    if (write_all(fd, out, pkt_len * (size_t)o.inflight) != 0)
        goto fail;
    while (!atomic_load(&stop)) {
        ssize_t r = read(fd, in + have, pkt_len * (size_t)o.inflight * 2 - have);
        size_t off = 0, nout = 0;
        double t;

        if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (now() - last > IO_TIMEOUT_S)
                goto fail;
            continue;
        }
        if (r <= 0)
            goto fail;
        have += (size_t)r;
        t = now();
        last = t;
        while (have - off >= pkt_len) {
            uint32_t slot = get32(in + off + HDR + 4);

            if (slot >= (uint32_t)o.inflight || get32(in + off + 4) != T_RES)
                goto fail;
            atomic_fetch_add(&completed, 1);
            if (atomic_load(&measuring))
                lat_add(c, (t - start[slot]) * 1e6);
            make_packet(out + nout * pkt_len, T_REQ, slot);
            start[slot] = t;
            nout++;
            off += pkt_len;
        }
        memmove(in, in + off, have - off);
        have -= off;
        if (nout > 0 && write_all(fd, out, nout * pkt_len) != 0)
            goto fail;
    }
    goto out;
fail:
    atomic_fetch_add(&errors, 1);
out:
    if (fd >= 0)
        close(fd);
    free(start);
    free(in);
    free(out);
    return NULL;
}

/* Answers every packet the relay hands it, in one write per read. */
static void *
worker_thread(void *p)
{
    size_t cap = 256 * 1024, have = 0;
    unsigned char *in = malloc(cap), hello[HDR];
    int fd = connect_to();

    (void)p;
    memcpy(hello, "\0REQ", 4);
    put32(hello + 4, T_WORKER);
    put32(hello + 8, 0);
    if (fd < 0 || in == NULL || write_all(fd, hello, HDR) != 0)
        goto fail;
    while (!atomic_load(&stop_workers)) {
        ssize_t r = read(fd, in + have, cap - have);
        size_t off = 0;

        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r <= 0)
            goto fail;
        have += (size_t)r;
        for (; have - off >= HDR && have - off >= HDR + get32(in + off + 8);
             off += HDR + get32(in + off + 8))
            put32(in + off + 4, T_RES);
        if (off > 0 && write_all(fd, in, off) != 0)
            goto fail;
        memmove(in, in + off, have - off);
        have -= off;
    }
    goto out;
fail:
    if (!atomic_load(&stop_workers))
        atomic_fetch_add(&errors, 1);
out:
    if (fd >= 0)
        close(fd);
    free(in);
    return NULL;
}

static double
proc_cpu(void)
{
    char path[64], buf[1024], *p;
    unsigned long long ut, st;
    FILE *f;
    size_t n;

    if (o.pid <= 0)
        return -1;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)o.pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return (x > y) - (x < y);
}

static int
load(void)
{
    struct client *cl = calloc((size_t)o.clients, sizeof(*cl));
    pthread_t wt[MAX_WORKERS];
    int nw = strcmp(o.mode, "relay") == 0 ? o.workers : 0;
    double t0, t1, cpu0, cpu1;
    uint64_t c0, c1;
    size_t nlat = 0, k = 0;
    uint32_t *all;

    if (cl == NULL)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    pkt_len = HDR + SUBMIT_OVERHEAD + o.payload; /* the route is inside the body */
    for (int i = 0; i < nw; i++)
        pthread_create(&wt[i], NULL, worker_thread, NULL);
    sleep_s(0.05); /* the workers' hellos arrive before the first request */
    for (int i = 0; i < o.clients; i++)
        pthread_create(&cl[i].tid, NULL, client_thread, &cl[i]);
    sleep_s(o.warmup);
    cpu0 = proc_cpu();
    t0 = now();
    c0 = atomic_load(&completed);
    atomic_store(&measuring, true);
    sleep_s(o.secs);
    atomic_store(&measuring, false);
    c1 = atomic_load(&completed);
    t1 = now();
    cpu1 = proc_cpu();
    atomic_store(&stop, true);
    for (int i = 0; i < o.clients; i++)
        pthread_join(cl[i].tid, NULL);
    atomic_store(&stop_workers, true);
    for (int i = 0; i < nw; i++)
        pthread_join(wt[i], NULL);

    for (int i = 0; i < o.clients; i++)
        nlat += cl[i].nlat;
    all = malloc((nlat ? nlat : 1) * sizeof(*all));
    if (all == NULL)
        return 2;
    for (int i = 0; i < o.clients; i++) {
        memcpy(all + k, cl[i].lat, cl[i].nlat * sizeof(*all));
        k += cl[i].nlat;
        free(cl[i].lat);
    }
    qsort(all, nlat, sizeof(*all), cmp_u32);
    printf("scenario=%s server=%s backend=raw payload=%zu packet=%zu clients=%d inflight=%d "
           "workers=%d jobs=%llu secs=%.3f jobs_per_s=%.0f",
           o.name ? o.name : o.mode, o.label, o.payload, pkt_len, o.clients, o.inflight, nw,
           (unsigned long long)(c1 - c0), t1 - t0, (double)(c1 - c0) / (t1 - t0));
    if (nlat > 0)
        printf(" p50_us=%u p99_us=%u", all[nlat / 2], all[(size_t)((double)nlat * 0.99)]);
    if (cpu0 >= 0 && cpu1 >= 0 && c1 > c0)
        printf(" server_cpu_s=%.2f server_cpu_us_per_job=%.2f", cpu1 - cpu0,
               (cpu1 - cpu0) * 1e6 / (double)(c1 - c0));
    printf(" errors=%llu\n", (unsigned long long)atomic_load(&errors));
    free(all);
    free(cl);
    return atomic_load(&errors) || c1 == c0 ? 1 : 0;
}

static double
num(const char *s, double lo, double hi, const char *what)
{
    char *end;
    double v = strtod(s, &end);

    if (end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "ceiling: bad value for %s\n", what);
        exit(2);
    }
    return v;
}

static void
usage(FILE *f)
{
    fprintf(f, "usage: ceiling server echo|relay --port-file FILE [--worker-window N]\n"
               "       ceiling load echo|relay -p PORT [-c C] [-k K] [-w W] [-s BYTES] [-t SECS]\n"
               "               [--warmup SECS] [--pid PID] [--label NAME] [--name NAME]\n");
}

int
main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"port", required_argument, NULL, 'p'},     {"clients", required_argument, NULL, 'c'},
        {"inflight", required_argument, NULL, 'k'}, {"workers", required_argument, NULL, 'w'},
        {"size", required_argument, NULL, 's'},     {"secs", required_argument, NULL, 't'},
        {"warmup", required_argument, NULL, 1},     {"pid", required_argument, NULL, 2},
        {"label", required_argument, NULL, 3},      {"name", required_argument, NULL, 4},
        {"port-file", required_argument, NULL, 5},  {"worker-window", required_argument, NULL, 6},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    const char *port_file = NULL;
    int c, worker_window = 1;

    while ((c = getopt_long(argc, argv, "p:c:k:w:s:t:h", lo, NULL)) != -1) {
        switch (c) {
        case 'p': o.port = (in_port_t)num(optarg, 1, 65535, "--port"); break;
        case 'c': o.clients = (int)num(optarg, 1, MAX_CLIENTS, "--clients"); break;
        case 'k': o.inflight = (int)num(optarg, 1, MAX_INFLIGHT, "--inflight"); break;
        case 'w': o.workers = (int)num(optarg, 1, MAX_WORKERS, "--workers"); break;
        case 's': o.payload = (size_t)num(optarg, 8, 65536, "--size"); break;
        case 't': o.secs = num(optarg, 0.1, 600, "--secs"); break;
        case 1: o.warmup = num(optarg, 0, 600, "--warmup"); break;
        case 2: o.pid = (pid_t)num(optarg, 1, 1 << 30, "--pid"); break;
        case 3: o.label = optarg; break;
        case 4: o.name = optarg; break;
        case 5: port_file = optarg; break;
        case 6: worker_window = (int)num(optarg, 0, MAX_INFLIGHT, "--worker-window"); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind + 2 != argc) {
        usage(stderr);
        return 2;
    }
    o.mode = argv[optind + 1];
    if (strcmp(o.mode, "echo") != 0 && strcmp(o.mode, "relay") != 0) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[optind], "server") == 0 && port_file != NULL)
        return serve(o.mode, port_file, worker_window);
    if (strcmp(argv[optind], "load") == 0 && o.port != 0) {
        alarm((unsigned)(o.warmup + o.secs + 60));
        return load();
    }
    usage(stderr);
    return 2;
}
