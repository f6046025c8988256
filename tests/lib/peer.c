/*
 * Raw Gearman peers for tests. Deliberately independent of the server's
 * own I/O code: plain blocking sockets, poll for timeouts, the shared codec
 * for framing only.
 */
#include "config.h"
#include "peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

void
daemon_start(struct daemon *d, const char *const *extra)
{
    const char *bin = getenv("DSJOBD");
    const char *outside = getenv("DSJOBD_TEST_ADDR");
    char portfile[300], logfile[300];
    const char *argv[64];
    int argc = 0, i;
    FILE *fp;

    memset(d, 0, sizeof(*d));
    if (outside != NULL && *outside != '\0') {
        const char *colon = strrchr(outside, ':');

        d->port = atoi(colon ? colon + 1 : outside);
        return;
    }
    if (bin == NULL)
        bin = "server/dsjobd";
    snprintf(d->dir, sizeof(d->dir), "%s/dsjob-t.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(d->dir) == NULL)
        tap_bail("mkdtemp: %s", strerror(errno));
    snprintf(portfile, sizeof(portfile), "%s/port", d->dir);
    snprintf(logfile, sizeof(logfile), "%s/dsjobd.log", d->dir);
    argv[argc++] = bin;
    argv[argc++] = "-L";
    argv[argc++] = "127.0.0.1";
    argv[argc++] = "-p";
    argv[argc++] = "0";
    argv[argc++] = "--port-file";
    argv[argc++] = portfile;
    argv[argc++] = "--log-file";
    argv[argc++] = logfile;
    argv[argc++] = "--verbose";
    argv[argc++] = "INFO";
    for (i = 0; extra != NULL && extra[i] != NULL && argc < 62; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    d->pid = fork();
    if (d->pid < 0)
        tap_bail("fork: %s", strerror(errno));
    if (d->pid == 0) {
#ifdef __linux__
        /* A test killed by its watchdog must not leave its daemon behind. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    for (i = 0; i < 100; i++) {
        fp = fopen(portfile, "r");
        if (fp != NULL) {
            if (fscanf(fp, "%d", &d->port) == 1 && d->port > 0) {
                fclose(fp);
                return;
            }
            fclose(fp);
        }
        if (!daemon_alive(d))
            tap_bail("dsjobd (%s) exited at start", bin);
        sleep_ms(50);
    }
    tap_bail("dsjobd did not write its port file within 5 s");
}

bool
daemon_alive(struct daemon *d)
{
    int status;

    if (d->pid == 0)
        return true;
    return waitpid(d->pid, &status, WNOHANG) == 0;
}

int
daemon_stop(struct daemon *d)
{
    int status = 0, i;
    char cmd[300];

    if (d->pid == 0)
        return 0;
    kill(d->pid, SIGTERM);
    for (i = 0; i < 100; i++) {
        pid_t r = waitpid(d->pid, &status, WNOHANG);

        if (r == d->pid)
            break;
        sleep_ms(50);
    }
    if (i == 100) {
        kill(d->pid, SIGKILL);
        waitpid(d->pid, &status, 0);
        status = -1;
    }
    d->pid = 0;
    if (getenv("DSJOB_KEEP_TMP") == NULL) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
        if (system(cmd) != 0)
            tap_diag("could not remove %s", d->dir);
    }
    return status == -1 ? -1 : (WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

int
peer_connect(int port)
{
    struct sockaddr_in sin;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;

    if (fd < 0)
        tap_bail("socket: %s", strerror(errno));
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
        tap_bail("connect to port %d: %s", port, strerror(errno));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

int
peer_send_raw(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int
peer_send_bin(int fd, uint32_t type, unsigned nargs, const void *const *args, const size_t *lens)
{
    size_t size = PACKET_HEADER_SIZE + packet_args_size(nargs, lens);
    unsigned char *buf = malloc(size);
    int rc;

    if (buf == NULL)
        return -1;
    packet_encode(buf, size, PACKET_REQ, type, nargs, args, lens);
    rc = peer_send_raw(fd, buf, size);
    free(buf);
    return rc;
}

int
peer_send(int fd, uint32_t type, unsigned nargs, ...)
{
    const void *args[PACKET_MAX_ARGS];
    size_t lens[PACKET_MAX_ARGS];
    va_list ap;
    unsigned i;

    va_start(ap, nargs);
    for (i = 0; i < nargs && i < PACKET_MAX_ARGS; i++) {
        const char *s = va_arg(ap, const char *);

        args[i] = s;
        lens[i] = strlen(s);
    }
    va_end(ap);
    return peer_send_bin(fd, type, nargs, args, lens);
}

/* Read exactly len bytes within the deadline. 1: done, 0: timeout/error, -1: EOF. */
static int
read_full(int fd, void *buf, size_t len, int timeout_ms)
{
    char *p = buf;

    while (len > 0) {
        struct pollfd pfd = {fd, POLLIN, 0};
        ssize_t n;
        int r = poll(&pfd, 1, timeout_ms);

        if (r <= 0)
            return 0;
        n = recv(fd, p, len, 0);
        if (n == 0)
            return -1;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == ECONNRESET ? -1 : 0;
        }
        p += n;
        len -= (size_t)n;
    }
    return 1;
}

int
peer_recv(int fd, struct peer_pkt *p, int timeout_ms)
{
    unsigned char hdr[PACKET_HEADER_SIZE];
    unsigned char *whole;
    struct packet pk;
    const char *why;
    size_t need;
    int r;
    unsigned i;

    memset(p, 0, sizeof(*p));
    r = read_full(fd, hdr, sizeof(hdr), timeout_ms);
    if (r <= 0)
        return r;
    if (packet_decode(hdr, sizeof(hdr), UINT32_MAX, &pk, &need, &why) == PACKET_FATAL)
        return 0;
    whole = malloc(need + 1);
    if (whole == NULL)
        return 0;
    memcpy(whole, hdr, sizeof(hdr));
    r = read_full(fd, whole + sizeof(hdr), need - sizeof(hdr), timeout_ms);
    if (r <= 0) {
        free(whole);
        return r;
    }
    whole[need] = '\0';
    if (packet_decode(whole, need, UINT32_MAX, &pk, &need, &why) != PACKET_OK ||
        pk.magic != PACKET_RES) {
        free(whole);
        return 0;
    }
    p->type = pk.type;
    p->size = pk.size;
    p->payload = whole; /* the header stays in front; arg pointers point past it */
    p->nargs = pk.nargs;
    for (i = 0; i < pk.nargs; i++) {
        p->arg[i] = pk.arg[i];
        p->arg_len[i] = pk.arg_len[i];
    }
    return (int)p->type;
}

void
peer_pkt_release(struct peer_pkt *p)
{
    free(p->payload);
    memset(p, 0, sizeof(*p));
}

bool
peer_arg_is(const struct peer_pkt *p, unsigned i, const char *s)
{
    return i < p->nargs && p->arg_len[i] == strlen(s) && memcmp(p->arg[i], s, p->arg_len[i]) == 0;
}

bool
peer_recv_type(int fd, int type, char *out, size_t cap, int timeout_ms)
{
    struct peer_pkt p;
    int t = peer_recv(fd, &p, timeout_ms);

    if (out != NULL && t > 0 && p.nargs > 0)
        snprintf(out, cap, "%.*s", (int)p.arg_len[0], (const char *)p.arg[0]);
    peer_pkt_release(&p);
    return t == type;
}

bool
peer_closed(int fd, int timeout_ms)
{
    char buf[4096];

    for (;;) {
        struct pollfd pfd = {fd, POLLIN, 0};
        ssize_t n;

        if (poll(&pfd, 1, timeout_ms) <= 0)
            return false;
        n = recv(fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return true;
        if (n < 0)
            return false;
    }
}

size_t
peer_admin(int fd, const char *line, bool multi, char *buf, size_t cap)
{
    size_t len = 0;
    char cmd[512];

    snprintf(cmd, sizeof(cmd), "%s\n", line);
    if (peer_send_raw(fd, cmd, strlen(cmd)) < 0)
        return 0;
    while (len + 1 < cap) {
        struct pollfd pfd = {fd, POLLIN, 0};
        ssize_t n;

        if (poll(&pfd, 1, PEER_TIMEOUT_MS) <= 0)
            break;
        n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        if (!multi && strchr(buf, '\n') != NULL)
            break;
        if (multi && (strcmp(buf, ".\n") == 0 || (len >= 3 && strcmp(buf + len - 3, "\n.\n") == 0)))
            break;
    }
    buf[len] = '\0';
    return len;
}

bool
peer_run_job(int port, const char *func, const char *payload)
{
    int w = peer_connect(port), c = peer_connect(port);
    struct peer_pkt p;
    size_t n = strlen(payload), i;
    char *rev = malloc(n + 1);
    char handle[256];
    bool ok = false;

    for (i = 0; i < n; i++)
        rev[i] = payload[n - 1 - i];
    rev[n] = '\0';
    peer_send(w, PACKET_CAN_DO, 1, func);
    peer_send(c, PACKET_SUBMIT_JOB, 3, func, "", payload);
    if (peer_recv(c, &p, PEER_TIMEOUT_MS) != PACKET_JOB_CREATED)
        goto out;
    snprintf(handle, sizeof(handle), "%.*s", (int)p.arg_len[0], (const char *)p.arg[0]);
    peer_pkt_release(&p);
    peer_send(w, PACKET_GRAB_JOB_UNIQ, 0);
    if (peer_recv(w, &p, PEER_TIMEOUT_MS) != PACKET_JOB_ASSIGN_UNIQ)
        goto out;
    peer_pkt_release(&p);
    peer_send(w, PACKET_WORK_COMPLETE, 2, handle, rev);
    if (peer_recv(c, &p, PEER_TIMEOUT_MS) != PACKET_WORK_COMPLETE)
        goto out;
    ok = p.arg_len[1] == n && memcmp(p.arg[1], rev, n) == 0;
    peer_pkt_release(&p);
out:
    peer_pkt_release(&p);
    free(rev);
    close(w);
    close(c);
    return ok;
}

long
peer_rss_kb(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    FILE *fp;

    snprintf(path, sizeof(path), "/proc/%ld/status", (long)pid);
    fp = fopen(path, "r");
    if (fp == NULL)
        return -1;
    while (fgets(line, sizeof(line), fp) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(fp);
    return kb;
}

double
peer_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

double
peer_median(double *us, int n)
{
    if (n <= 0)
        return -1;
    qsort(us, (size_t)n, sizeof(us[0]), cmp_double);
    return us[n / 2];
}
