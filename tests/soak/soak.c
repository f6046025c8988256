/*
 * The kill -9 soak (make soak): producers submit background jobs (normal,
 * high and low priority, unique keys that coalesce, epoch times a second or
 * two ahead) and workers complete most and fail some, all over raw Gearman
 * connections in one poll loop, while the server is killed with SIGKILL at
 * random moments and restarted on the same store. Every payload names its
 * job, so each execution is attributed: at the end (everything drained) it
 * counts acknowledged submits, lost jobs, phantoms, duplicates and re-runs
 * of completions that had been observed (WORK_COMPLETE or WORK_FAIL written,
 * then GET_STATUS said the handle is gone), and prints one table row per
 * server config: dsjobd with --store-sync normal and full, and gearmand
 * 1.1.20 with -q libsqlite3, driven by the same client and workers.
 * The power-cut configs run tests/soak/dsjobd_cut (dsjobd on the test VFS
 * cutvfs) and make each kill a power cut: the writes no fsync covered are
 * dropped or torn, then the store is checked row by row against what was
 * acknowledged. The I/O-error sweep (tests/integ/t_iosweep) gets its row
 * in the same table, and so do the workflow cells (issue 26): kill -9 at
 * random points of a 1,000-job batch with callbacks
 * (tests/integ/t_batch_crash.sh) and of a three-level dependency graph
 * (tests/integ/t_deps_crash.sh), each run by real workers, each printing
 * a "# soak-row" line with its counts: every callback submitted exactly
 * once, no child started before its parents succeeded, nothing
 * acknowledged lost.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "proto/packet.h"
#ifdef SOAK_CUTS
#include <sqlite3.h>

#include "soak/cutvfs.h"
#endif

#define MAX_CONNS 64
#define WINDOW 16         /* submits in flight per producer */
#define MAX_OBS 4096      /* completions waiting to be observed */
#define FAIL_PERCENT 10   /* jobs a worker fails */
#define RESTART_MS 10000  /* a restart must serve within this */
#define DRAIN_MS 90000    /* the final drain must end within this */
#define HANDLE_MAX 64     /* longest job handle kept */
#define MAX_WORKERS 16    /* workers at most */
#define MAX_PRODUCERS 16  /* producers at most */
#define FUNCS 2           /* functions the load spreads over */
#define READ_CHUNK 65536  /* bytes read at once */
#define OBS_TRIES 200     /* GET_STATUS attempts per completion */
#define MAX_KILLS 1000000 /* --kills at most */

static const char *const func_name[FUNCS] = {"soak_a", "soak_b"};

enum kind { K_NORMAL, K_HIGH, K_LOW, K_SOLO, K_GROUP, K_EPOCH, K_COUNT };
static const char *const kind_name[K_COUNT] = {"normal", "high", "low", "solo", "group", "epoch"};

enum jflag { J_SENT = 1, J_ACKED = 2, J_OBSERVED = 4, J_REJECTED = 8, J_LOST = 16 };

/* One submitted job, indexed by the id its payload carries. */
struct job {
    uint32_t group;      /* coalescing group (K_GROUP), else 0 */
    uint8_t kind;        /* enum kind */
    uint8_t flags;       /* enum jflag */
    uint16_t execs;      /* executions seen */
    uint32_t last_epoch; /* kills before its latest execution */
    uint32_t when;       /* K_EPOCH: the time submitted for it */
};

/* A coalescing group: several submits with one unique key, counted as one job. */
struct group {
    bool acked;    /* one of its submits got JOB_CREATED */
    bool executed; /* one of its payloads ran */
    bool lost;     /* a power cut lost it (no member was in the store) */
};

enum role { R_PRODUCER, R_WORKER, R_OBSERVER };
enum wstate { W_IDLE, W_GRABBING, W_SLEEPING, W_HOLDING };

/* A completion written by a worker, to be confirmed gone with GET_STATUS. */
struct obs {
    uint32_t id;             /* the job */
    char handle[HANDLE_MAX]; /* its handle in this server run */
    size_t hlen;             /* handle bytes */
    int worker;              /* conn index of the worker that wrote it */
    unsigned gen;            /* that worker connection's generation */
    uint64_t off;            /* bytes the worker must have written first */
    int64_t due;             /* not before (us) */
    int tries;               /* GET_STATUS sent so far */
};

/* One connection to the server, with its own buffers. */
struct conn {
    enum role role;            /* what it does */
    int fd;                    /* -1 when down */
    unsigned gen;              /* bumped on each reconnect */
    unsigned char *in;         /* bytes read, not yet decoded */
    size_t in_len, in_cap;     /* used and allocated */
    unsigned char *out;        /* bytes not yet written */
    size_t out_len, out_cap;   /* used and allocated */
    uint64_t queued;           /* bytes ever queued on this connection instance */
    uint64_t written;          /* bytes of them written to the kernel */
    uint32_t fifo[WINDOW * 4]; /* producer: submits awaiting JOB_CREATED, in order */
    unsigned head, count;      /* ring of fifo */
    enum wstate ws;            /* worker: state */
    uint32_t job;              /* worker: job held */
    char handle[HANDLE_MAX];   /* worker: its handle */
    size_t hlen;               /* handle bytes */
    int64_t due;               /* worker: when the held job is finished (us) */
};

/* One server config of the table. */
struct config {
    const char *label; /* table row name */
    bool gearmand;     /* gearmand -q libsqlite3, else dsjobd */
    const char *sync;  /* dsjobd --store-sync */
    bool cut;          /* each kill is a power cut (dsjobd_cut) */
    bool sweep;        /* the I/O-error sweep: runs $IOSWEEP for its row */
    const char *flow;  /* a workflow cell: the script under tests/integ that is its row */
};

/* Totals of one config run. */
struct totals {
    uint64_t kills, sent, acked, rejected, lost, phantoms, execs, dups, reruns, observed;
    uint64_t unacked_ran, crashes, errors;
    uint64_t dups_nokill;     /* duplicates with no kill since the run before */
    uint64_t short_restarts;  /* restarts that queued fewer jobs than were owed */
    unsigned max_reruns_kill; /* most observed re-runs after one kill */
    unsigned max_dups_kill;   /* most duplicates after one kill */
    double secs;              /* wall time of the config */
    double restart_ms_max;    /* slowest restart */
    double restart_ms_sum;    /* all restarts */
    bool timed_out;           /* a phase hit its time bound */
    uint64_t cuts;            /* power cuts */
    uint64_t cut_modes[3];    /* cuts that kept, dropped, tore the unsynced writes */
    uint64_t cut_records;     /* writes and truncates no sync covered, over all cuts */
    uint64_t cut_undone;      /* sector pieces of them rolled back */
    uint64_t cameback;        /* observed completions found in the store after a cut */
    uint64_t corrupt;         /* stores that failed quick_check or did not open */
    uint64_t sweep_steps;     /* the sweep's steps */
    uint64_t cb_once;         /* workflow: callbacks submitted exactly once */
    uint64_t cb_want;         /* workflow: callbacks due */
    uint64_t early;           /* workflow: children started before a parent succeeded */
};

static struct {
    unsigned kills, cuts, workers, producers, max_backlog, sweep_stride;
    uint64_t max_jobs;
    uint64_t seed;
    bool quiet, keep, strict;
    const char *dsjobd, *gearmand, *tmp, *dsjobd_cut, *iosweep, *srcdir;
} opt = {1000, 500, 3, 2, 400, 1, 0, 0, false, false, false, NULL, NULL, NULL, NULL, NULL, NULL};

static struct {
    const struct config *cfg;
    char dir[256]; /* the config's temporary directory */
    pid_t pid;     /* the running server, 0 if none */
    int port;      /* its port */
    struct conn conn[MAX_CONNS];
    int nconn;       /* connections in use */
    int observer;    /* index of the observer */
    struct job *job; /* jobs by id */
    uint32_t njobs;  /* ids handed out */
    struct group *group;
    uint32_t ngroups;
    uint64_t pending;                            /* acknowledged jobs (groups once) not yet run */
    uint64_t inflight;                           /* submits awaiting JOB_CREATED */
    struct obs wait[MAX_OBS];                    /* completions not yet asked about */
    unsigned nwait;                              /* entries of wait */
    struct obs asked[MAX_OBS];                   /* GET_STATUS sent, in order */
    unsigned ahead, acount;                      /* ring of asked: first, count */
    unsigned epoch;                              /* kills so far */
    unsigned nevents;                            /* kills (or cuts) this config makes */
    char undo_log[300];                          /* dsjobd_cut's undo log */
    unsigned *ep_dups, *ep_reruns, *ep_phantoms; /* per kill */
    long *ep_queued;                             /* per kill: jobs queued after the restart */
    uint64_t *ep_pending;                        /* per kill: acknowledged, not yet run */
    bool stopping;                               /* no more submits */
    uint64_t rng;                                /* xorshift state */
    struct totals t;                             /* the running config's counts */
} S;

static volatile sig_atomic_t watchdog_pid;

static int64_t
now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void
sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};

    nanosleep(&ts, NULL);
}

static uint64_t
rnd(void)
{
    S.rng ^= S.rng << 13;
    S.rng ^= S.rng >> 7;
    S.rng ^= S.rng << 17;
    return S.rng;
}

static unsigned
rnd_between(unsigned lo, unsigned hi)
{
    return lo + (unsigned)(rnd() % (hi - lo + 1));
}

static void
die(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fputs("soak: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (S.pid > 0) {
        kill(S.pid, SIGKILL);
        waitpid(S.pid, NULL, 0);
    }
    exit(2);
}

static void
on_alarm(int sig)
{
    static const char msg[] = "soak: watchdog: time bound exceeded, stopping\n";

    (void)sig;
    if (watchdog_pid > 0)
        kill((pid_t)watchdog_pid, SIGKILL);
    if (write(2, msg, sizeof(msg) - 1) < 0)
        _exit(3);
    _exit(3);
}

/* Payload of job id: its id, kind and a check over them, padded to a length of its own. */
static size_t
payload_of(uint32_t id, unsigned kind, char *buf, size_t cap)
{
    uint32_t h = id * 2654435761u ^ 0x5eed;
    int n = snprintf(buf, cap, "soak %" PRIu32 " %s %08" PRIx32 " ", id, kind_name[kind], h);
    size_t len = (size_t)n, pad = id % 48;

    while (pad-- > 0 && len + 1 < cap)
        buf[len++] = (char)('a' + (id + pad) % 26);
    buf[len] = '\0';
    return len;
}

static size_t
unique_of(uint32_t id, char *buf, size_t cap)
{
    const struct job *j = &S.job[id];

    if (j->kind == K_GROUP)
        return (size_t)snprintf(buf, cap, "g%" PRIu32, j->group);
    if (j->kind == K_SOLO)
        return (size_t)snprintf(buf, cap, "s%" PRIu32, id);
    /*
     * gearmand 1.1.20 -q libsqlite3 keys its table on (unique, function),
     * so all jobs submitted with an empty unique share one row and only
     * the last survives a restart; libgearman never sends an empty unique
     * (it makes up a UUID), and the soak does the same for gearmand.
     */
    if (S.cfg->gearmand)
        return (size_t)snprintf(buf, cap, "n%" PRIu32, id);
    buf[0] = '\0';
    return 0;
}

/* ---- connections ---- */

static void
conn_close(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->in_len = c->out_len = 0;
    c->queued = c->written = 0;
    if (c->role == R_PRODUCER) {
        S.inflight -= c->count;
        c->count = c->head = 0;
    }
    c->ws = W_IDLE;
}

static int
tcp_connect(int port)
{
    struct sockaddr_in sin;
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

    if (fd < 0)
        die("socket: %s", strerror(errno));
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static void
grow(unsigned char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return;
    while (*cap < need)
        *cap = *cap ? *cap * 2 : 4096;
    *buf = realloc(*buf, *cap);
    if (*buf == NULL)
        die("out of memory");
}

static void
conn_flush(struct conn *c)
{
    while (c->fd >= 0 && c->out_len > 0) {
        ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            conn_close(c);
            return;
        }
        memmove(c->out, c->out + n, c->out_len - (size_t)n);
        c->out_len -= (size_t)n;
        c->written += (uint64_t)n;
    }
}

static void
conn_send(struct conn *c, uint32_t type, unsigned nargs, const void *const *args,
          const size_t *lens)
{
    size_t size = PACKET_HEADER_SIZE + packet_args_size(nargs, lens);

    if (c->fd < 0)
        return;
    grow(&c->out, &c->out_cap, c->out_len + size);
    packet_encode(c->out + c->out_len, size, PACKET_REQ, type, nargs, args, lens);
    c->out_len += size;
    c->queued += size;
}

static void
conn_send0(struct conn *c, uint32_t type)
{
    conn_send(c, type, 0, NULL, NULL);
}

static void
conn_send1(struct conn *c, uint32_t type, const void *a, size_t len)
{
    const void *args[1] = {a};

    conn_send(c, type, 1, args, &len);
}

static void
conn_open(struct conn *c)
{
    int fd = tcp_connect(S.port), i;

    if (fd < 0)
        return;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    c->fd = fd;
    c->gen++;
    c->queued = c->written = 0;
    if (c->role == R_WORKER) {
        for (i = 0; i < FUNCS; i++)
            conn_send1(c, PACKET_CAN_DO, func_name[i], strlen(func_name[i]));
        conn_send0(c, PACKET_GRAB_JOB_UNIQ);
        c->ws = W_GRABBING;
    }
    conn_flush(c);
}

/* ---- the server ---- */

static void
server_spawn(void)
{
    char db[300], log[300], portfile[300], portarg[16];
    const char *argv[32];
    int argc = 0;

    snprintf(portfile, sizeof(portfile), "%s/port", S.dir);
    unlink(portfile);
    if (S.cfg->gearmand) {
        static char a_port[32], a_log[320], a_pid[320];

        snprintf(db, sizeof(db), "%s/gearmand.db", S.dir);
        snprintf(a_port, sizeof(a_port), "--port=%d", S.port);
        snprintf(a_log, sizeof(a_log), "--log-file=%s/gearmand.log", S.dir);
        snprintf(a_pid, sizeof(a_pid), "--pid-file=%s/gearmand.pid", S.dir);
        argv[argc++] = opt.gearmand;
        argv[argc++] = "--listen=127.0.0.1";
        argv[argc++] = a_port;
        argv[argc++] = "--threads=0";
        argv[argc++] = a_log;
        argv[argc++] = a_pid;
        argv[argc++] = "-q";
        argv[argc++] = "libsqlite3";
        argv[argc++] = "--libsqlite3-db";
        argv[argc++] = db;
    } else {
        snprintf(db, sizeof(db), "%s/store", S.dir);
        snprintf(log, sizeof(log), "%s/dsjobd.log", S.dir);
        snprintf(portarg, sizeof(portarg), "0");
        argv[argc++] = S.cfg->cut ? opt.dsjobd_cut : opt.dsjobd;
        argv[argc++] = "-L";
        argv[argc++] = "127.0.0.1";
        argv[argc++] = "-p";
        argv[argc++] = portarg;
        argv[argc++] = "--port-file";
        argv[argc++] = portfile;
        argv[argc++] = "--log-file";
        argv[argc++] = log;
        argv[argc++] = "--work-dir";
        argv[argc++] = db;
        argv[argc++] = "--store-sync";
        argv[argc++] = S.cfg->sync;
    }
    argv[argc] = NULL;
    S.pid = fork();
    if (S.pid < 0)
        die("fork: %s", strerror(errno));
    if (S.pid == 0) {
        int fd = open("/dev/null", O_RDWR);

#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
        if (fd >= 0) {
            dup2(fd, 0);
            dup2(fd, 1);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    watchdog_pid = S.pid;
}

/* Waits for the spawned server to serve; returns false past RESTART_MS. */
static bool
server_ready(void)
{
    char portfile[300];
    int64_t end = now_us() + RESTART_MS * 1000LL;
    int status;

    snprintf(portfile, sizeof(portfile), "%s/port", S.dir);
    while (now_us() < end) {
        if (waitpid(S.pid, &status, WNOHANG) == S.pid) {
            fprintf(stderr, "soak: %s exited at start (status %d)\n", S.cfg->label, status);
            S.pid = 0;
            return false;
        }
        if (S.cfg->gearmand) {
            int fd = tcp_connect(S.port);

            if (fd >= 0) {
                close(fd);
                return true;
            }
        } else {
            FILE *fp = fopen(portfile, "r");
            int port = 0;

            if (fp != NULL) {
                if (fscanf(fp, "%d", &port) == 1 && port > 0) {
                    fclose(fp);
                    S.port = port;
                    return true;
                }
                fclose(fp);
            }
        }
        sleep_us(1000);
    }
    return false;
}

static void
server_stop(void)
{
    int i;

    if (S.pid <= 0)
        return;
    kill(S.pid, SIGTERM);
    for (i = 0; i < 500; i++) {
        if (waitpid(S.pid, NULL, WNOHANG) == S.pid)
            break;
        sleep_us(10000);
    }
    if (i == 500) {
        kill(S.pid, SIGKILL);
        waitpid(S.pid, NULL, 0);
    }
    S.pid = 0;
    watchdog_pid = 0;
}

static int
free_port(void)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) < 0)
        die("cannot find a free port: %s", strerror(errno));
    port = ntohs(sin.sin_port);
    close(fd);
    return port;
}

/* ---- the load ---- */

static uint32_t
job_new(unsigned kind, uint32_t group)
{
    uint32_t id = S.njobs++;

    S.job[id].kind = (uint8_t)kind;
    S.job[id].group = group;
    return id;
}

static void
submit(struct conn *c, uint32_t id)
{
    char data[128], uniq[32], when[24];
    size_t dlen = payload_of(id, S.job[id].kind, data, sizeof(data));
    size_t ulen = unique_of(id, uniq, sizeof(uniq));
    const char *fn = func_name[id % FUNCS];
    const void *args[4] = {fn, uniq, data, NULL};
    size_t lens[4] = {strlen(fn), ulen, dlen, 0};
    uint32_t type = PACKET_SUBMIT_JOB_BG;

    switch (S.job[id].kind) {
    case K_HIGH: type = PACKET_SUBMIT_JOB_HIGH_BG; break;
    case K_LOW: type = PACKET_SUBMIT_JOB_LOW_BG; break;
    case K_EPOCH:
        type = PACKET_SUBMIT_JOB_EPOCH;
        S.job[id].when = (uint32_t)(time(NULL) + rnd_between(1, 2));
        lens[2] = (size_t)snprintf(when, sizeof(when), "%lu", (unsigned long)S.job[id].when);
        args[2] = when;
        args[3] = data;
        lens[3] = dlen;
        break;
    default: break;
    }
    conn_send(c, type, type == PACKET_SUBMIT_JOB_EPOCH ? 4 : 3, args, lens);
    S.job[id].flags |= J_SENT;
    c->fifo[(c->head + c->count++) % (WINDOW * 4)] = id;
    S.inflight++;
    S.t.sent++;
}

static void
produce(struct conn *c)
{
    while (!S.stopping && c->fd >= 0 && c->count + 4 <= WINDOW &&
           S.pending + S.inflight < opt.max_backlog && S.njobs + 4 <= opt.max_jobs) {
        unsigned r = rnd_between(0, 99), kind, n, i;
        uint32_t group = 0;

        kind = r < 45   ? K_NORMAL
               : r < 58 ? K_HIGH
               : r < 71 ? K_LOW
               : r < 80 ? K_SOLO
               : r < 90 ? K_GROUP
                        : K_EPOCH;
        n = 1;
        if (kind == K_GROUP) {
            group = ++S.ngroups;
            n = rnd_between(2, 4);
        }
        for (i = 0; i < n; i++)
            submit(c, job_new(kind, group));
    }
    conn_flush(c);
}

static void
on_ack(struct conn *c, bool ok)
{
    uint32_t id;
    struct job *j;

    if (c->count == 0) {
        S.t.errors++;
        return;
    }
    id = c->fifo[c->head];
    c->head = (c->head + 1) % (WINDOW * 4);
    c->count--;
    S.inflight--;
    j = &S.job[id];
    if (!ok) {
        j->flags |= J_REJECTED;
        S.t.rejected++;
        return;
    }
    j->flags |= J_ACKED;
    S.t.acked++;
    if (j->group != 0) {
        struct group *g = &S.group[j->group];

        if (!g->acked && !g->executed && !g->lost)
            S.pending++;
        g->acked = true;
    } else if (j->execs == 0) {
        S.pending++;
    }
}

static void
phantom(const char *why, const unsigned char *data, size_t len)
{
    S.t.phantoms++;
    if (S.epoch > 0)
        S.ep_phantoms[S.epoch - 1]++;
    fprintf(stderr, "soak: %s: phantom execution (%s): '%.*s'\n", S.cfg->label, why,
            (int)(len > 80 ? 80 : len), (const char *)data);
}

/* A worker was assigned a job: attribute it, and hold it for 0 to 2 ms. */
static void
on_job(struct conn *c, const struct packet *p)
{
    char want[128], uniq[32];
    unsigned long id;
    size_t wlen, ulen;
    struct job *j;
    char *end;

    if (p->nargs < 4 || p->arg_len[3] < 6 || memcmp(p->arg[3], "soak ", 5) != 0) {
        phantom("no soak payload", p->arg[3], p->arg_len[3]);
        goto hold_none;
    }
    id = strtoul((const char *)p->arg[3] + 5, &end, 10);
    if (id >= S.njobs || !(S.job[id].flags & J_SENT)) {
        phantom("never submitted", p->arg[3], p->arg_len[3]);
        goto hold_none;
    }
    j = &S.job[id];
    wlen = payload_of((uint32_t)id, j->kind, want, sizeof(want));
    ulen = unique_of((uint32_t)id, uniq, sizeof(uniq));
    if (p->arg_len[3] != wlen || memcmp(p->arg[3], want, wlen) != 0 ||
        p->arg_len[1] != strlen(func_name[id % FUNCS]) ||
        memcmp(p->arg[1], func_name[id % FUNCS], p->arg_len[1]) != 0 ||
        (ulen > 0 && (p->arg_len[2] != ulen || memcmp(p->arg[2], uniq, ulen) != 0))) {
        phantom("bytes differ from the submit", p->arg[3], p->arg_len[3]);
        goto hold_none;
    }
    S.t.execs++;
    /* a run after the first is put down to the first kill after the run before it */
    if (j->execs > 0) {
        S.t.dups++;
        if (j->last_epoch < S.epoch)
            S.ep_dups[j->last_epoch]++;
        else
            S.t.dups_nokill++;
    }
    if (j->flags & J_OBSERVED) {
        S.t.reruns++;
        if (j->last_epoch < S.epoch)
            S.ep_reruns[j->last_epoch]++;
    }
    j->last_epoch = S.epoch;
    if (!(j->flags & J_ACKED) && j->execs == 0)
        S.t.unacked_ran++;
    if ((j->flags & J_LOST) || (j->group != 0 && S.group[j->group].lost)) {
        S.t.errors++; /* the store check after a cut was wrong: it was there */
        fprintf(stderr, "soak: %s: job %lu, counted lost at a cut, ran\n", S.cfg->label, id);
    } else if (j->group != 0) {
        struct group *g = &S.group[j->group];

        if (g->acked && !g->executed)
            S.pending--;
        g->executed = true;
    } else if (j->execs == 0 && (j->flags & J_ACKED)) {
        S.pending--;
    }
    if (j->execs < UINT16_MAX)
        j->execs++;
    c->job = (uint32_t)id;
    c->hlen = p->arg_len[0] < HANDLE_MAX ? p->arg_len[0] : HANDLE_MAX - 1;
    memcpy(c->handle, p->arg[0], c->hlen);
    c->ws = W_HOLDING;
    c->due = now_us() + rnd_between(0, 2000);
    return;
hold_none:
    /* not ours: answer it anyway so the server does not hold it */
    c->job = UINT32_MAX;
    c->hlen = p->arg_len[0] < HANDLE_MAX ? p->arg_len[0] : HANDLE_MAX - 1;
    memcpy(c->handle, p->arg[0], c->hlen);
    c->ws = W_HOLDING;
    c->due = now_us();
}

/* The held job is done: complete or fail it, ask the observer to confirm, grab the next. */
static void
finish(int wi)
{
    struct conn *c = &S.conn[wi];
    bool fail = rnd_between(1, 100) <= FAIL_PERCENT;
    const void *args[2] = {c->handle, "ok"};
    size_t lens[2] = {c->hlen, 2};

    if (fail)
        conn_send(c, PACKET_WORK_FAIL, 1, args, lens);
    else
        conn_send(c, PACKET_WORK_COMPLETE, 2, args, lens);
    if (c->job != UINT32_MAX && S.nwait < MAX_OBS) {
        struct obs *o = &S.wait[S.nwait++];

        o->id = c->job;
        memcpy(o->handle, c->handle, c->hlen);
        o->hlen = c->hlen;
        o->worker = wi;
        o->gen = c->gen;
        o->off = c->queued;
        o->due = 0;
        o->tries = 0;
    }
    conn_send0(c, PACKET_GRAB_JOB_UNIQ);
    c->ws = W_GRABBING;
    conn_flush(c);
}

/* Sends GET_STATUS for every completion its worker has written. */
static void
observe(int64_t now)
{
    struct conn *oc = &S.conn[S.observer];
    unsigned i, keep = 0;

    for (i = 0; i < S.nwait; i++) {
        struct obs *o = &S.wait[i];
        struct conn *w = &S.conn[o->worker];

        if (w->gen != o->gen)
            continue; /* that connection died: the write may not have happened */
        if (oc->fd < 0 || w->written < o->off || o->due > now || S.acount >= MAX_OBS) {
            S.wait[keep++] = *o;
            continue;
        }
        conn_send1(oc, PACKET_GET_STATUS, o->handle, o->hlen);
        o->tries++;
        S.asked[(S.ahead + S.acount++) % MAX_OBS] = *o;
    }
    S.nwait = keep;
    conn_flush(oc);
}

static void
on_status(const struct packet *p)
{
    struct obs o;

    if (S.acount == 0) {
        S.t.errors++;
        return;
    }
    o = S.asked[S.ahead];
    S.ahead = (S.ahead + 1) % MAX_OBS;
    S.acount--;
    if (p->nargs >= 2 && p->arg_len[1] == 1 && p->arg[1][0] == '0') {
        if (!(S.job[o.id].flags & J_OBSERVED))
            S.t.observed++;
        S.job[o.id].flags |= J_OBSERVED;
    } else if (o.tries < OBS_TRIES && S.nwait < MAX_OBS) {
        o.due = now_us() + 2000; /* still there: its result is not in yet, ask again */
        S.wait[S.nwait++] = o;
    }
}

static void
handle_packet(int ci, const struct packet *p)
{
    struct conn *c = &S.conn[ci];

    if (p->type == PACKET_ERROR) {
        S.t.errors++;
        if (S.t.errors <= 10)
            fprintf(stderr, "soak: %s: ERROR %.*s %.*s\n", S.cfg->label, (int)p->arg_len[0],
                    (const char *)p->arg[0], (int)p->arg_len[1], (const char *)p->arg[1]);
        if (c->role == R_PRODUCER)
            on_ack(c, false);
        else if (c->role == R_OBSERVER)
            on_status(p);
        return;
    }
    switch (c->role) {
    case R_PRODUCER:
        if (p->type == PACKET_JOB_CREATED)
            on_ack(c, true);
        break;
    case R_OBSERVER:
        if (p->type == PACKET_STATUS_RES)
            on_status(p);
        break;
    case R_WORKER:
        if (p->type == PACKET_JOB_ASSIGN_UNIQ && c->ws == W_GRABBING) {
            on_job(c, p);
        } else if (p->type == PACKET_NO_JOB && c->ws == W_GRABBING) {
            conn_send0(c, PACKET_PRE_SLEEP);
            c->ws = W_SLEEPING;
        } else if (p->type == PACKET_NOOP && c->ws == W_SLEEPING) {
            conn_send0(c, PACKET_GRAB_JOB_UNIQ);
            c->ws = W_GRABBING;
        }
        conn_flush(c);
        break;
    }
}

/* Reads what there is; with dead set, only what the dead server left in the socket. */
static void
conn_read(int ci, bool dead)
{
    struct conn *c = &S.conn[ci];

    for (;;) {
        ssize_t n;
        size_t off = 0;

        grow(&c->in, &c->in_cap, c->in_len + READ_CHUNK);
        n = recv(c->fd, c->in + c->in_len, READ_CHUNK, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            conn_close(c);
            return;
        }
        c->in_len += (size_t)n;
        for (;;) {
            struct packet pk;
            size_t need;
            const char *why;
            enum packet_status st =
                packet_decode(c->in + off, c->in_len - off, 1u << 26, &pk, &need, &why);

            if (st == PACKET_NEED_MORE)
                break;
            if (st != PACKET_OK || pk.magic != PACKET_RES) {
                fprintf(stderr, "soak: %s: bad packet from the server: %s\n", S.cfg->label,
                        why ? why : "request magic");
                S.t.errors++;
                conn_close(c);
                return;
            }
            /* a job handed out by a server already killed is never run */
            if (!(dead && pk.type == PACKET_JOB_ASSIGN_UNIQ))
                handle_packet(ci, &pk);
            if (c->fd < 0)
                return;
            off += need;
        }
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
}

/* ---- kills ---- */

static void
print_kill(unsigned k)
{
    if (!opt.quiet)
        printf("# %s kill %u: queued after restart %ld (owed %" PRIu64 "), duplicates %u, "
               "re-runs of observed completions %u, phantoms %u\n",
               S.cfg->label, k + 1, S.ep_queued[k], S.ep_pending[k], S.ep_dups[k], S.ep_reruns[k],
               S.ep_phantoms[k]);
}

static long queued_on_server(void);

#ifdef SOAK_CUTS
/* The stored row's id, if its payload is a soak payload; else UINT32_MAX. */
static uint32_t
row_id(const unsigned char *data, size_t len)
{
    char buf[24];
    size_t n = len - 5 < sizeof(buf) - 1 ? len - 5 : sizeof(buf) - 1;
    unsigned long id;
    char *end;

    if (len < 6 || memcmp(data, "soak ", 5) != 0)
        return UINT32_MAX;
    memcpy(buf, data + 5, n);
    buf[n] = '\0';
    id = strtoul(buf, &end, 10);
    if (end == buf || *end != ' ' || id >= S.njobs)
        return UINT32_MAX;
    return (uint32_t)id;
}

/* row_matches: the row holds exactly what job id was submitted with. */
static bool
row_matches(uint32_t id, sqlite3_stmt *st)
{
    const struct job *j = &S.job[id];
    char want[128], uniq[32];
    size_t wlen = payload_of(id, j->kind, want, sizeof(want));
    size_t ulen = unique_of(id, uniq, sizeof(uniq));
    const char *fn = func_name[id % FUNCS];
    int prio = j->kind == K_HIGH ? 0 : j->kind == K_LOW ? 2 : 1;
    int64_t when = j->kind == K_EPOCH ? (int64_t)j->when : 0;

    return (size_t)sqlite3_column_bytes(st, 0) == strlen(fn) &&
           memcmp(sqlite3_column_text(st, 0), fn, strlen(fn)) == 0 &&
           (size_t)sqlite3_column_bytes(st, 1) == ulen &&
           (ulen == 0 || memcmp(sqlite3_column_blob(st, 1), uniq, ulen) == 0) &&
           sqlite3_column_int(st, 2) == prio && sqlite3_column_int64(st, 3) == when &&
           (size_t)sqlite3_column_bytes(st, 4) == wlen &&
           memcmp(sqlite3_column_blob(st, 4), want, wlen) == 0;
}

/*
 * verify_store reads the restarted server's store (read-only, beside it)
 * after a power cut: it must pass quick_check; every row must be a job
 * submitted with exactly those bytes, priority, unique key and time; no
 * completion that was observed may be back; and every acknowledged job
 * not yet run must be there. One that is not is lost (counted, and no
 * longer owed); with --store-sync full the soak fails on any.
 */
static void
verify_store(void)
{
    static const char sel[] = "SELECT func, unique_key, prio, run_at, data FROM jobs";
    char path[320];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    unsigned char *present = calloc(S.njobs + 1, 1), *gpresent = calloc(S.ngroups + 1, 1);
    uint32_t id, lost = 0;
    unsigned g;
    int rc;

    if (present == NULL || gpresent == NULL)
        die("out of memory");
    snprintf(path, sizeof(path), "%s/store/dsjobd.db", S.dir);
    rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &st, NULL);
    if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
        strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0) {
        sqlite3_finalize(st);
        rc = sqlite3_prepare_v2(db, sel, -1, &st, NULL);
    } else {
        fprintf(stderr, "soak: %s: after cut %u the store fails quick_check: %s\n", S.cfg->label,
                S.epoch, db ? sqlite3_errmsg(db) : "no memory");
        S.t.corrupt++;
        opt.keep = true;
        goto out;
    }
    while (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *data = sqlite3_column_blob(st, 4);
        size_t len = (size_t)sqlite3_column_bytes(st, 4);

        id = data != NULL ? row_id(data, len) : UINT32_MAX;
        if (id == UINT32_MAX || !(S.job[id].flags & J_SENT)) {
            phantom("a stored row that was never submitted", data ? data : (void *)"", len);
            continue;
        }
        if (!row_matches(id, st)) {
            phantom("a stored row differs from its submit", data, len);
            continue;
        }
        present[id] = 1;
        gpresent[S.job[id].group] = 1;
        if (S.job[id].flags & J_OBSERVED) {
            S.t.cameback++;
            if (S.t.cameback <= 10 && strcmp(S.cfg->sync, "full") == 0)
                fprintf(stderr, "soak: %s: after cut %u, observed completion of job %u is back\n",
                        S.cfg->label, S.epoch, id);
        }
    }
    for (id = 0; id < S.njobs; id++) {
        struct job *j = &S.job[id];

        if (j->group == 0 && (j->flags & (J_ACKED | J_LOST)) == J_ACKED && j->execs == 0 &&
            !present[id]) {
            j->flags |= J_LOST;
            S.pending--;
            lost++;
        }
    }
    for (g = 1; g <= S.ngroups; g++) {
        struct group *gr = &S.group[g];

        if (gr->acked && !gr->executed && !gr->lost && !gpresent[g]) {
            gr->lost = true;
            S.pending--;
            lost++;
        }
    }
    S.t.lost += lost;
    if (lost > 0 && strcmp(S.cfg->sync, "full") == 0)
        fprintf(stderr, "soak: %s: cut %u lost %u acknowledged jobs\n", S.cfg->label, S.epoch,
                lost);
out:
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(present);
    free(gpresent);
}

/* power_cut: after the SIGKILL, the writes no sync covered are kept, dropped or torn. */
static void
power_cut(void)
{
    struct cutvfs_stats st;
    unsigned r = rnd_between(0, 9);
    enum cutvfs_mode mode = r < 2 ? CUTVFS_KEEP : r < 5 ? CUTVFS_DROP : CUTVFS_TEAR;

    if (cutvfs_apply(S.undo_log, mode, &S.rng, &st) != 0)
        die("%s: cannot apply power cut %u", S.cfg->label, S.epoch);
    S.t.cuts++;
    S.t.cut_modes[mode]++;
    S.t.cut_records += st.records;
    S.t.cut_undone += st.undone;
}
#endif

/* Kills the server, reads what it had sent, restarts it and reconnects everyone. */
static bool
kill_and_restart(void)
{
    int i, status;
    int64_t t0;

    kill(S.pid, SIGKILL);
    waitpid(S.pid, &status, 0);
    S.pid = 0;
#ifdef SOAK_CUTS
    if (S.cfg->cut)
        power_cut();
#endif
    for (i = 0; i < S.nconn; i++) {
        struct conn *c = &S.conn[i];

        if (c->fd >= 0)
            conn_read(i, true);
        conn_close(c);
    }
    S.nwait = 0;
    S.acount = 0;
    S.ahead = 0;
    S.epoch++;
    if (!S.cfg->cut)
        S.t.kills++;
    t0 = now_us();
    server_spawn();
    if (!server_ready())
        return false;
    {
        double ms = (double)(now_us() - t0) / 1000.0;

        S.t.restart_ms_sum += ms;
        if (ms > S.t.restart_ms_max)
            S.t.restart_ms_max = ms;
    }
    /*
     * Before anyone reconnects: every job acknowledged and not yet run is
     * owed, so admin status must count at least that many (more is fine:
     * unacknowledged submits and unfinished runs that were stored).
     * After a power cut the store is read first: what it lost is not owed.
     */
#ifdef SOAK_CUTS
    if (S.cfg->cut)
        verify_store();
#endif
    S.ep_queued[S.epoch - 1] = queued_on_server();
    S.ep_pending[S.epoch - 1] = S.pending;
    if (S.ep_queued[S.epoch - 1] >= 0 && (uint64_t)S.ep_queued[S.epoch - 1] < S.pending) {
        S.t.short_restarts++;
        fprintf(stderr, "soak: %s: after kill %u the server has %ld jobs, %" PRIu64 " are owed\n",
                S.cfg->label, S.epoch, S.ep_queued[S.epoch - 1], S.pending);
    }
    for (i = 0; i < S.nconn; i++)
        conn_open(&S.conn[i]);
    return true;
}

/* Sum of the total column of admin "status" for the soak's functions, or -1. */
static long
queued_on_server(void)
{
    char buf[8192];
    size_t len = 0;
    int fd = tcp_connect(S.port), i;
    long total = 0;
    char *line;

    if (fd < 0)
        return -1;
    if (send(fd, "status\n", 7, MSG_NOSIGNAL) != 7) {
        close(fd);
        return -1;
    }
    while (len + 1 < sizeof(buf)) {
        struct pollfd pfd = {fd, POLLIN, 0};
        ssize_t n;

        if (poll(&pfd, 1, 2000) <= 0)
            break;
        n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        if (strcmp(buf, ".\n") == 0 || (len >= 3 && strcmp(buf + len - 3, "\n.\n") == 0))
            break;
    }
    close(fd);
    buf[len] = '\0';
    if (len < 2)
        return -1;
    for (line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n"))
        for (i = 0; i < FUNCS; i++) {
            size_t fl = strlen(func_name[i]);

            if (strncmp(line, func_name[i], fl) == 0 && line[fl] == '\t')
                total += strtol(line + fl + 1, NULL, 10);
        }
    return total;
}

/* One turn of the poll loop, waiting at most max_wait_us. */
static void
turn(int64_t max_wait_us)
{
    struct pollfd pfd[MAX_CONNS];
    int64_t now = now_us(), wait = max_wait_us;
    int i, n;

    for (i = 0; i < S.nconn; i++) {
        struct conn *c = &S.conn[i];

        if (c->fd < 0)
            conn_open(c); /* closed by the server: go on with a new connection */
        if (c->role == R_WORKER && c->ws == W_HOLDING) {
            if (c->due <= now)
                finish(i);
            else if (c->due - now < wait)
                wait = c->due - now;
        }
        if (c->role == R_PRODUCER)
            produce(c);
    }
    observe(now);
    if (S.nwait > 0 && wait > 2000)
        wait = 2000;
    for (i = 0; i < S.nconn; i++) {
        pfd[i].fd = S.conn[i].fd;
        pfd[i].events = POLLIN | (S.conn[i].out_len > 0 ? POLLOUT : 0);
        pfd[i].revents = 0;
    }
    n = poll(pfd, (nfds_t)S.nconn, (int)((wait + 999) / 1000));
    if (n <= 0)
        return;
    for (i = 0; i < S.nconn; i++) {
        if (S.conn[i].fd < 0)
            continue;
        if (pfd[i].revents & POLLOUT)
            conn_flush(&S.conn[i]);
        if (S.conn[i].fd >= 0 && (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
            conn_read(i, false);
    }
}

static void
check_crash(void)
{
    int status;

    if (S.pid > 0 && waitpid(S.pid, &status, WNOHANG) == S.pid) {
        fprintf(stderr, "soak: %s: the server died by itself (status %d), see %s\n", S.cfg->label,
                status, S.dir);
        S.t.crashes++;
        S.pid = 0;
        opt.keep = true;
        server_spawn();
        if (!server_ready())
            die("%s: the server does not start again after a crash", S.cfg->label);
    }
}

static void
run_config(const struct config *cfg, struct totals *out)
{
    int64_t t_start = now_us(), deadline, next_kill;
    uint64_t i;
    unsigned g;
    int k;

    memset(&S.t, 0, sizeof(S.t));
    S.cfg = cfg;
    S.njobs = 0;
    S.ngroups = 0;
    S.pending = S.inflight = 0;
    S.nwait = S.acount = S.ahead = 0;
    S.epoch = 0;
    S.stopping = false;
    memset(S.job, 0, sizeof(*S.job) * opt.max_jobs);
    memset(S.group, 0, sizeof(*S.group) * (opt.max_jobs + 1));
    S.nevents = cfg->cut ? opt.cuts : opt.kills;
    memset(S.ep_dups, 0, sizeof(unsigned) * S.nevents);
    memset(S.ep_reruns, 0, sizeof(unsigned) * S.nevents);
    memset(S.ep_phantoms, 0, sizeof(unsigned) * S.nevents);
    memset(S.ep_queued, 0, sizeof(long) * S.nevents);
    memset(S.ep_pending, 0, sizeof(uint64_t) * S.nevents);
    snprintf(S.dir, sizeof(S.dir), "%s/dsjob-soak.XXXXXX", opt.tmp);
    if (mkdtemp(S.dir) == NULL)
        die("mkdtemp: %s", strerror(errno));
    snprintf(S.undo_log, sizeof(S.undo_log), "%s/undo", S.dir);
    setenv("DSJOB_CUTVFS_LOG", S.undo_log, 1); /* read by dsjobd_cut only */
    S.port = cfg->gearmand ? free_port() : 0;
    server_spawn();
    if (!server_ready())
        die("%s does not start", cfg->label);
    S.nconn = 0;
    for (k = 0; k < (int)opt.producers; k++)
        S.conn[S.nconn++] = (struct conn){.role = R_PRODUCER, .fd = -1};
    for (k = 0; k < (int)opt.workers; k++)
        S.conn[S.nconn++] = (struct conn){.role = R_WORKER, .fd = -1};
    S.observer = S.nconn;
    S.conn[S.nconn++] = (struct conn){.role = R_OBSERVER, .fd = -1};
    for (k = 0; k < S.nconn; k++)
        conn_open(&S.conn[k]);

    /* The load phase: a kill every 20 to 200 ms; at most max_jobs submits and 1 s a kill. */
    deadline = now_us() + (int64_t)S.nevents * 1000000 + 60000000;
    next_kill = now_us() + rnd_between(20, 200) * 1000;
    while (S.epoch < S.nevents) {
        int64_t now = now_us();

        if (now > deadline) {
            S.t.timed_out = true;
            fprintf(stderr, "soak: %s: the load phase hit its time bound\n", cfg->label);
            break;
        }
        if (now >= next_kill) {
            if (!kill_and_restart())
                die("%s does not serve again after kill %u", cfg->label, S.epoch);
            next_kill = now_us() + rnd_between(20, 200) * 1000;
            continue;
        }
        turn(next_kill - now);
        check_crash();
    }

    /* The drain: no more submits; workers run until every acknowledged job ran. */
    S.stopping = true;
    deadline = now_us() + DRAIN_MS * 1000LL;
    {
        int64_t next_check = 0;
        int quiet = 0;

        while (now_us() < deadline) {
            turn(50000);
            check_crash();
            if (now_us() >= next_check && S.inflight == 0) {
                long q = queued_on_server();

                next_check = now_us() + 200000;
                /* two looks in a row with nothing left, so late re-runs are seen */
                quiet = (q == 0 && S.pending == 0) ? quiet + 1 : 0;
                if (quiet >= 3)
                    break;
            }
        }
        if (quiet < 3) {
            S.t.timed_out = true;
            fprintf(stderr, "soak: %s: the drain hit its time bound (%" PRIu64 " pending)\n",
                    cfg->label, S.pending);
        }
    }
    for (k = 0; k < (int)S.epoch; k++)
        print_kill((unsigned)k);
    for (k = 0; k < S.nconn; k++) {
        conn_close(&S.conn[k]);
        free(S.conn[k].in);
        free(S.conn[k].out);
    }
    server_stop();

    for (i = 0; i < S.njobs; i++) {
        const struct job *j = &S.job[i];

        if (j->group == 0 && (j->flags & (J_ACKED | J_LOST)) == J_ACKED && j->execs == 0) {
            if (S.t.lost < 10)
                fprintf(stderr, "soak: %s: lost acknowledged job %" PRIu64 " (%s)\n", cfg->label, i,
                        kind_name[j->kind]);
            S.t.lost++;
        }
    }
    for (g = 1; g <= S.ngroups; g++)
        if (S.group[g].acked && !S.group[g].executed && !S.group[g].lost) {
            if (S.t.lost < 10)
                fprintf(stderr, "soak: %s: lost acknowledged group g%u\n", cfg->label, g);
            S.t.lost++;
        }
    for (k = 0; k < (int)S.epoch && k < (int)S.nevents; k++) {
        if (S.ep_reruns[k] > S.t.max_reruns_kill)
            S.t.max_reruns_kill = S.ep_reruns[k];
        if (S.ep_dups[k] > S.t.max_dups_kill)
            S.t.max_dups_kill = S.ep_dups[k];
    }
    S.t.secs = (double)(now_us() - t_start) / 1e6;
    *out = S.t;
    /* a power cut under --store-sync normal may lose jobs: that alone keeps nothing */
    if (!opt.keep && (S.t.lost == 0 || (cfg->cut && strcmp(cfg->sync, "normal") == 0)) &&
        S.t.phantoms == 0 && S.t.crashes == 0 && S.t.corrupt == 0) {
        char cmd[320];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", S.dir);
        if (system(cmd) != 0)
            fprintf(stderr, "soak: could not remove %s\n", S.dir);
    } else {
        fprintf(stderr, "soak: %s: kept %s\n", cfg->label, S.dir);
    }
}

static void
usage(FILE *fp)
{
    fprintf(fp, "usage: soak [options]\n"
                "  --kills N        kill -9 per server config (default 1000)\n"
                "  --cuts N         power cuts per power-cut config (default 500)\n"
                "  --configs LIST   comma-separated: dsjobd-normal,dsjobd-full,\n"
                "                   dsjobd-normal-cut,dsjobd-full-cut,gearmand-sqlite,sweep,\n"
                "                   batch,deps\n"
                "                   (default all)\n"
                "  --sweep-stride K the I/O-error sweep tries every Kth N (default 1)\n"
                "  --workers N      worker connections (default 3)\n"
                "  --producers N    producer connections (default 2)\n"
                "  --max-backlog N  acknowledged jobs not yet run, at most (default 400)\n"
                "  --max-jobs N     submits per config, at most (default 400 per kill + 10000)\n"
                "  --seed N         random seed (default: the time)\n"
                "  --dsjobd PATH    default $DSJOBD or server/dsjobd\n"
                "  --dsjobd-cut PATH  default $DSJOBD_CUT or tests/soak/dsjobd_cut\n"
                "  --iosweep PATH   default $IOSWEEP or tests/integ/t_iosweep\n"
                "  --srcdir PATH    the source tree, for the workflow cells' scripts\n"
                "                   (default $top_srcdir or .)\n"
                "  --gearmand PATH  default $GEARMAND or /usr/sbin/gearmand\n"
                "  --quiet          no line per kill\n"
                "  --keep           keep the stores and logs\n"
                "  --strict         also fail on a re-run of an observed completion, or on\n"
                "                   more duplicates after one kill than the bound: two a\n"
                "                   worker for dsjobd, one for gearmand\n");
}

static const struct config configs[] = {
    {"dsjobd sync normal", false, "normal", false, false, NULL},
    {"dsjobd sync full", false, "full", false, false, NULL},
    {"dsjobd normal, cuts", false, "normal", true, false, NULL},
    {"dsjobd full, cuts", false, "full", true, false, NULL},
    {"dsjobd i/o sweep", false, "full", false, true, NULL},
    {"dsjobd batch 1,000", false, "normal", false, false, "t_batch_crash.sh"},
    {"dsjobd deps 3 levels", false, "normal", false, false, "t_deps_crash.sh"},
    {"gearmand-sqlite", true, NULL, false, false, NULL},
};
#define NCONFIGS (sizeof(configs) / sizeof(configs[0]))
static const char *const config_key[NCONFIGS] = {
    "dsjobd-normal", "dsjobd-full", "dsjobd-normal-cut", "dsjobd-full-cut", "sweep",
    "batch",         "deps",        "gearmand-sqlite"};

/* in_list: key is one of the comma-separated names of list. */
static bool
in_list(const char *list, const char *key)
{
    size_t n = strlen(key);
    const char *p;

    for (p = list; (p = strstr(p, key)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return true;
    return false;
}

/*
 * run_sweep runs the I/O-error sweep (tests/integ/t_iosweep, a TAP test of
 * its own in make check) and takes its row from the "# sweep-row" line.
 */
static void
run_sweep(struct totals *t)
{
    char cmd[600], line[512];
    unsigned long long steps, acked, lost, phantoms, dups;
    int64_t t0 = now_us();
    bool got = false;
    FILE *fp;

    memset(t, 0, sizeof(*t));
    snprintf(cmd, sizeof(cmd), "'%s' --stride %u", opt.iosweep, opt.sweep_stride);
    fp = popen(cmd, "r");
    if (fp == NULL)
        die("cannot run %s", opt.iosweep);
    while (fgets(line, sizeof(line), fp) != NULL) {
        if (sscanf(line,
                   "# sweep-row steps %llu acknowledged %llu lost %llu phantoms %llu "
                   "duplicates %llu",
                   &steps, &acked, &lost, &phantoms, &dups) == 5) {
            t->sweep_steps = steps;
            t->acked = acked;
            t->lost = lost;
            t->phantoms = phantoms;
            t->dups = dups;
            got = true;
        } else if (strncmp(line, "not ok", 6) == 0) {
            fprintf(stderr, "soak: sweep: %s", line);
            t->errors++;
        } else if (!opt.quiet) {
            fputs(line, stdout);
        }
    }
    if (pclose(fp) != 0 || !got)
        t->crashes++; /* it failed: the row says so */
    t->secs = (double)(now_us() - t0) / 1e6;
}

/*
 * flow_kills: the kills of a workflow cell, from --kills: the batch cell a
 * fifth of them (3 to 20), the dependency cell rounds of two kills each, a
 * rounds for every 25 kills (2 to 10).
 */
static unsigned
flow_kills(const struct config *cfg)
{
    unsigned k = strcmp(cfg->flow, "t_batch_crash.sh") == 0 ? opt.kills / 5 : opt.kills / 25;

    if (strcmp(cfg->flow, "t_batch_crash.sh") == 0)
        return k < 3 ? 3 : k > 20 ? 20 : k;
    return k < 2 ? 2 : k > 10 ? 10 : k;
}

/*
 * run_flow runs a workflow cell's script (a TAP test of make check, made
 * larger here) and takes its row from its "# soak-row" line: kills,
 * acknowledged, lost, callbacks submitted once of those due, children
 * started early. A "not ok" line is an error, a failed exit a crash.
 */
static void
run_flow(const struct config *cfg, struct totals *t)
{
    char cmd[1200], line[512];
    unsigned long long kills, acked, lost, once, want, early;
    unsigned k = flow_kills(cfg);
    int64_t t0 = now_us();
    bool got = false;
    FILE *fp;

    memset(t, 0, sizeof(*t));
    if (strcmp(cfg->flow, "t_batch_crash.sh") == 0)
        snprintf(cmd, sizeof(cmd),
                 "BATCH_CRASH_JOBS=1000 BATCH_CRASH_KILLS=%u BATCH_CRASH_WORKERS=6 "
                 "top_srcdir='%s' sh '%s/tests/integ/%s' 2>&1",
                 k, opt.srcdir, opt.srcdir, cfg->flow);
    else
        snprintf(cmd, sizeof(cmd),
                 "DEPS_CRASH_ROUNDS=%u DEPS_CRASH_KILLS=2 top_srcdir='%s' sh '%s/tests/integ/%s' "
                 "2>&1",
                 k, opt.srcdir, opt.srcdir, cfg->flow);
    fp = popen(cmd, "r");
    if (fp == NULL)
        die("cannot run %s", cfg->flow);
    while (fgets(line, sizeof(line), fp) != NULL) {
        if (sscanf(line,
                   "# soak-row kills %llu acknowledged %llu lost %llu callbacks-once %llu of "
                   "%llu early %llu",
                   &kills, &acked, &lost, &once, &want, &early) == 6) {
            t->kills = kills;
            t->acked = acked;
            t->lost = lost;
            t->cb_once = once;
            t->cb_want = want;
            t->early = early;
            got = true;
        } else if (strncmp(line, "not ok", 6) == 0) {
            fprintf(stderr, "soak: %s: %s", cfg->label, line);
            t->errors++;
        } else if (!opt.quiet) {
            fputs(line, stdout);
        }
    }
    if (pclose(fp) != 0 || !got)
        t->crashes++;
    t->secs = (double)(now_us() - t0) / 1e6;
}

/*
 * dup_bound: the duplicates one kill may cause. gearmand: the job each
 * worker held. dsjobd: two a worker, since a worker's next job starts
 * while its last end commits (pipelined ends): that end and the job.
 */
static unsigned
dup_bound(const struct config *cfg)
{
    return cfg->gearmand ? opt.workers : 2 * opt.workers;
}

/* config_fails: what makes a config's row fail the soak. */
static bool
config_fails(const struct config *cfg, const struct totals *t)
{
    bool full = cfg->sync != NULL && strcmp(cfg->sync, "full") == 0;

    if (cfg->flow != NULL)
        return t->crashes || t->errors || t->lost || t->early || t->cb_once != t->cb_want;
    if (t->phantoms || t->crashes || t->timed_out || t->dups_nokill || t->corrupt || t->errors)
        return cfg->sweep || t->phantoms || t->crashes || t->timed_out || t->dups_nokill ||
               t->corrupt || (cfg->cut && t->errors);
    if (cfg->sweep)
        return t->lost > 0;
    /* a power cut with --store-sync normal may lose the last commits: measured, not failed */
    if (cfg->cut && !full)
        return false;
    if (t->lost || t->short_restarts || (cfg->cut && t->cameback))
        return true;
    return opt.strict && (t->reruns > 0 || t->max_dups_kill > dup_bound(cfg));
}

static const char *
env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);

    return v != NULL && *v != '\0' ? v : dflt;
}

int
main(int argc, char **argv)
{
    const char *list = "dsjobd-normal,dsjobd-full,dsjobd-normal-cut,dsjobd-full-cut,sweep,"
                       "batch,deps,gearmand-sqlite";
    struct totals tot[NCONFIGS];
    bool ran[NCONFIGS] = {false};
    unsigned c, bound, events;
    int i, rc = 0;
    int64_t t0 = now_us();

    setvbuf(stdout, NULL, _IOLBF, 0);
    opt.dsjobd = env_or("DSJOBD", "server/dsjobd");
    opt.dsjobd_cut = env_or("DSJOBD_CUT", "tests/soak/dsjobd_cut");
    opt.iosweep = env_or("IOSWEEP", "tests/integ/t_iosweep");
    opt.gearmand = env_or("GEARMAND", "/usr/sbin/gearmand");
    opt.tmp = env_or("TMPDIR", "/tmp");
    opt.srcdir = env_or("top_srcdir", ".");
    opt.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--quiet") == 0) {
            opt.quiet = true;
            continue;
        }
        if (strcmp(a, "--keep") == 0) {
            opt.keep = true;
            continue;
        }
        if (strcmp(a, "--strict") == 0) {
            opt.strict = true;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (v == NULL) {
            usage(stderr);
            return 2;
        }
        i++;
        if (strcmp(a, "--kills") == 0)
            opt.kills = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--cuts") == 0)
            opt.cuts = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--sweep-stride") == 0)
            opt.sweep_stride = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--configs") == 0)
            list = v;
        else if (strcmp(a, "--workers") == 0)
            opt.workers = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--producers") == 0)
            opt.producers = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--max-backlog") == 0)
            opt.max_backlog = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--max-jobs") == 0)
            opt.max_jobs = strtoull(v, NULL, 10);
        else if (strcmp(a, "--seed") == 0)
            opt.seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--dsjobd") == 0)
            opt.dsjobd = v;
        else if (strcmp(a, "--dsjobd-cut") == 0)
            opt.dsjobd_cut = v;
        else if (strcmp(a, "--iosweep") == 0)
            opt.iosweep = v;
        else if (strcmp(a, "--srcdir") == 0)
            opt.srcdir = v;
        else if (strcmp(a, "--gearmand") == 0)
            opt.gearmand = v;
        else {
            usage(stderr);
            return 2;
        }
    }
    if (opt.kills < 1 || opt.kills > MAX_KILLS || opt.cuts < 1 || opt.cuts > MAX_KILLS ||
        opt.workers < 1 || opt.workers > MAX_WORKERS || opt.producers < 1 ||
        opt.producers > MAX_PRODUCERS || opt.max_backlog < 8 || opt.sweep_stride < 1) {
        usage(stderr);
        return 2;
    }
    events = opt.kills > opt.cuts ? opt.kills : opt.cuts;
    if (opt.max_jobs == 0)
        opt.max_jobs = (uint64_t)events * 400 + 10000;
    if (opt.max_jobs > UINT32_MAX - 8)
        opt.max_jobs = UINT32_MAX - 8;
    if (opt.seed == 0)
        opt.seed = 1;
    S.rng = opt.seed;
    S.job = calloc(opt.max_jobs, sizeof(*S.job));
    S.group = calloc(opt.max_jobs + 1, sizeof(*S.group));
    S.ep_dups = calloc(events, sizeof(unsigned));
    S.ep_reruns = calloc(events, sizeof(unsigned));
    S.ep_phantoms = calloc(events, sizeof(unsigned));
    S.ep_queued = calloc(events, sizeof(long));
    S.ep_pending = calloc(events, sizeof(uint64_t));
    if (!S.job || !S.group || !S.ep_dups || !S.ep_reruns || !S.ep_phantoms || !S.ep_queued ||
        !S.ep_pending)
        die("out of memory");
    signal(SIGPIPE, SIG_IGN);
    signal(SIGALRM, on_alarm);
    /* The watchdog: every config's load and drain bounds, with room for restarts. */
    bound = 0;
    for (c = 0; c < NCONFIGS; c++)
        if (in_list(list, config_key[c]))
            bound += (configs[c].sweep  ? 300
                      : configs[c].flow ? 60 * flow_kills(&configs[c]) + 600
                      : configs[c].cut  ? opt.cuts
                                        : opt.kills) +
                     60 + DRAIN_MS / 1000 + 60;
    alarm(bound);
    printf("# soak: %u kills or %u power cuts per config, %u producers, %u workers, seed %" PRIu64
           ", watchdog %u s\n",
           opt.kills, opt.cuts, opt.producers, opt.workers, opt.seed, bound);
    for (c = 0; c < NCONFIGS; c++) {
        const char *bin = configs[c].gearmand ? opt.gearmand
                          : configs[c].sweep  ? opt.iosweep
                          : configs[c].cut    ? opt.dsjobd_cut
                                              : opt.dsjobd;

        if (!in_list(list, config_key[c]))
            continue;
#ifndef SOAK_CUTS
        if (configs[c].cut || configs[c].sweep) {
            printf("# %s: skipped, built without SQLite\n", configs[c].label);
            continue;
        }
#endif
        if (access(bin, X_OK) != 0) {
            printf("# %s: skipped, %s is not executable\n", configs[c].label, bin);
            continue;
        }
        if (configs[c].sweep)
            run_sweep(&tot[c]);
        else if (configs[c].flow)
            run_flow(&configs[c], &tot[c]);
        else
            run_config(&configs[c], &tot[c]);
        ran[c] = true;
        if (configs[c].flow) {
            printf("# %s: %.1f s, %" PRIu64 " kills, %" PRIu64 " jobs acknowledged, %" PRIu64
                   " lost, %" PRIu64 " of %" PRIu64 " callbacks submitted exactly once, %" PRIu64
                   " children started before a parent succeeded, %" PRIu64 " failed checks\n",
                   configs[c].label, tot[c].secs, tot[c].kills, tot[c].acked, tot[c].lost,
                   tot[c].cb_once, tot[c].cb_want, tot[c].early, tot[c].errors);
            continue;
        }
        if (configs[c].sweep) {
            printf("# %s: %.1f s\n", configs[c].label, tot[c].secs);
            continue;
        }
        printf("# %s: %.1f s, %" PRIu64 " submits sent, %" PRIu64 " executions, %" PRIu64
               " completions observed, %" PRIu64 " unacknowledged ran, %" PRIu64
               " rejected, %" PRIu64 " errors, %" PRIu64 " duplicates without a kill, %" PRIu64
               " restarts short of owed jobs, restart mean %.1f ms max %.1f ms, "
               "per kill at most %u duplicates and %u re-runs of observed completions "
               "(the bound: %u, %s per worker)\n",
               configs[c].label, tot[c].secs, tot[c].sent, tot[c].execs, tot[c].observed,
               tot[c].unacked_ran, tot[c].rejected, tot[c].errors, tot[c].dups_nokill,
               tot[c].short_restarts,
               tot[c].kills + tot[c].cuts
                   ? tot[c].restart_ms_sum / (double)(tot[c].kills + tot[c].cuts)
                   : 0.0,
               tot[c].restart_ms_max, tot[c].max_dups_kill, tot[c].max_reruns_kill,
               dup_bound(&configs[c]), configs[c].gearmand ? "one" : "two");
#ifdef SOAK_CUTS
        if (configs[c].cut)
            printf("# %s: cuts that kept %" PRIu64 ", dropped %" PRIu64 ", tore %" PRIu64
                   " the unsynced writes; %" PRIu64 " unsynced writes in all, %" PRIu64
                   " sector pieces rolled back; %" PRIu64
                   " observed completions back in the store; %" PRIu64 " stores corrupt\n",
                   configs[c].label, tot[c].cut_modes[CUTVFS_KEEP], tot[c].cut_modes[CUTVFS_DROP],
                   tot[c].cut_modes[CUTVFS_TEAR], tot[c].cut_records, tot[c].cut_undone,
                   tot[c].cameback, tot[c].corrupt);
#endif
    }
    printf("\n%-20s %6s %10s %11s %12s %6s %8s %10s %9s %6s %s\n", "server", "kills", "power cuts",
           "sweep steps", "acknowledged", "lost", "phantoms", "duplicates", "callbacks", "early",
           "re-runs of observed completions");
    for (c = 0; c < NCONFIGS; c++) {
        char steps[24] = "-", reruns[24], cbs[48] = "-", early[24] = "-";
        bool fails;

        if (!ran[c])
            continue;
        if (configs[c].sweep)
            snprintf(steps, sizeof(steps), "%" PRIu64, tot[c].sweep_steps);
        fails = config_fails(&configs[c], &tot[c]);
        if (configs[c].sweep || configs[c].flow)
            snprintf(reruns, sizeof(reruns), "-");
        else
            snprintf(reruns, sizeof(reruns), "%" PRIu64, tot[c].reruns);
        if (configs[c].flow && tot[c].cb_want > 0)
            snprintf(cbs, sizeof(cbs), "%" PRIu64 "/%" PRIu64, tot[c].cb_once, tot[c].cb_want);
        if (configs[c].flow && tot[c].cb_want == 0)
            snprintf(early, sizeof(early), "%" PRIu64, tot[c].early);
        printf("%-20s %6" PRIu64 " %10" PRIu64 " %11s %12" PRIu64 " %6" PRIu64 " %8" PRIu64
               " %10" PRIu64 " %9s %6s %s%s\n",
               configs[c].label, tot[c].kills, tot[c].cuts, steps, tot[c].acked, tot[c].lost,
               tot[c].phantoms, tot[c].dups, cbs, early, reruns,
               tot[c].timed_out ? "  (timed out)"
               : tot[c].crashes ? "  (crashed or failed)"
               : fails          ? "  (FAILED)"
                                : "");
        if (fails)
            rc = 1;
    }
    if (ran[5] || ran[6])
        printf("# callbacks: batch callbacks submitted exactly once, of those due (the\n"
               "# 1,000-job batch's on_complete and on_success, the batch killed while\n"
               "# filled's on_complete); early: children started before a parent succeeded\n");
    if (ran[NCONFIGS - 1])
        printf("# gearmand-sqlite: kills only; cutvfs is registered by dsjobd_cut's main, and\n"
               "# gearmand cannot load it, so power cuts and the sweep are dsjobd's alone\n");
    printf("# total %.1f s\n", (double)(now_us() - t0) / 1e6);
    free(S.job);
    free(S.group);
    free(S.ep_dups);
    free(S.ep_reruns);
    free(S.ep_phantoms);
    free(S.ep_queued);
    free(S.ep_pending);
    return rc;
}
