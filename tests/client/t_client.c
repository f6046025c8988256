/*
 * libdsjobclient's blocking calls against a real server, with our worker
 * in a child process: foreground results, failure and exception, progress
 * callbacks, background handles and their status, echo, epoch jobs,
 * priorities, consistent hashing and round-robin across two servers,
 * failover when the first server is down, and the errors when none is up.
 * The suite runs against dsjobd, then against gearmand 1.1.20 when it is
 * installed, so that the expectations are the reference's. Then refusals:
 * a job over dsjobd's --max-packet-size comes back with the server's
 * PACKET_TOO_LARGE, blocking and in a task set, even when the server
 * closes while the payload is still being written; and one over the 4 GiB
 * a packet can declare is refused before anything is sent.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dsjob/client.h>
#include <dsjob/worker.h>

#include "common.h"
#include "lib/peer.h"
#include "tap.h"

struct progress {
    int status;        /* WORK_STATUS seen */
    unsigned last_num; /* the last numerator */
    char data[64];     /* WORK_DATA bytes */
    int warnings;      /* WORK_WARNING seen */
};

static void
on_status(unsigned num, unsigned den, void *user)
{
    struct progress *pr = user;

    (void)den;
    pr->status++;
    pr->last_num = num;
}

static void
on_data(const void *data, size_t len, void *user)
{
    struct progress *pr = user;
    size_t have = strlen(pr->data);

    if (have + len < sizeof(pr->data))
        memcpy(pr->data + have, data, len);
}

static void
on_warning(const void *data, size_t len, void *user)
{
    (void)data;
    (void)len;
    ((struct progress *)user)->warnings++;
}

static struct dsjob_client *
client_for(int port)
{
    struct dsjob_client *c = dsjob_client_new();

    dsjob_client_add_server(c, addr_of(port));
    dsjob_client_set_timeout(c, 2000, 10000);
    return c;
}

/* Counts queued jobs of func in the server's admin "status" (TOTAL column). */
static int
admin_total(int port, const char *func)
{
    char buf[4096], *line;
    int fd = peer_connect(port);
    size_t flen = strlen(func);

    peer_admin(fd, "status", true, buf, sizeof(buf));
    close(fd);
    for (line = buf; line != NULL && *line != '\0';
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, func, flen) == 0 && line[flen] == '\t')
            return atoi(line + flen + 1);
    }
    return 0;
}

static void
suite_one(const char *kind, int port)
{
    struct dsjob_client *c = client_for(port);
    struct dsjob_client_callbacks cb = {on_status, on_data, on_warning};
    struct progress pr;
    struct dsjob_status st;
    const char *const servers[] = {addr_of(port), NULL};
    pid_t w = worker_fork(servers);
    char handle[DSJOB_HANDLE_MAX], unique[80];
    void *res = NULL;
    size_t len = 0;
    int err;
    static const unsigned char bin[] = {'a', 0, 'b', 0, 0, 'c'};

    err = dsjob_client_submit(c, "rev", NULL, "hello", 5, DSJOB_PRIO_NORMAL, &res, &len);
    tap_is_int(err, DSJOB_OK, "%s: foreground submit completes (%s)", kind, dsjob_client_errmsg(c));
    tap_is_mem(res, len, "olleh", 5, "%s: the result is the worker's bytes", kind);
    dsjob_free(res);

    err = dsjob_client_submit(c, "echo", "", bin, sizeof(bin), DSJOB_PRIO_HIGH, &res, &len);
    tap_ok(err == DSJOB_OK && len == sizeof(bin) && memcmp(res, bin, len) == 0,
           "%s: a payload with NULs comes back intact (high priority)", kind);
    dsjob_free(res);

    err = dsjob_client_submit(c, "echo", NULL, "", 0, DSJOB_PRIO_LOW, &res, &len);
    tap_ok(err == DSJOB_OK && len == 0 && res != NULL, "%s: an empty result at low priority", kind);
    dsjob_free(res);

    err = dsjob_client_submit(c, "fail", NULL, "x", 1, DSJOB_PRIO_NORMAL, &res, &len);
    tap_is_int(err, DSJOB_ERR_JOB_FAILED, "%s: WORK_FAIL gives DSJOB_ERR_JOB_FAILED", kind);
    tap_ok(res == NULL, "%s: no result after a failure", kind);

    err = dsjob_client_submit(c, "exc", NULL, "xyz", 3, DSJOB_PRIO_NORMAL, &res, &len);
    tap_is_int(err, DSJOB_ERR_JOB_EXCEPTION, "%s: WORK_EXCEPTION gives DSJOB_ERR_JOB_EXCEPTION",
               kind);
    tap_is_str(dsjob_client_errmsg(c), "boom:xyz", "%s: the exception text is in errmsg", kind);

    memset(&pr, 0, sizeof(pr));
    dsjob_client_set_callbacks(c, &cb, &pr);
    err = dsjob_client_submit(c, "progress", NULL, "p", 1, DSJOB_PRIO_NORMAL, &res, &len);
    tap_ok(err == DSJOB_OK && len == 4 && memcmp(res, "done", 4) == 0, "%s: progress job completes",
           kind);
    tap_ok(pr.status == 2 && pr.last_num == 2, "%s: both WORK_STATUS reach the callback (%d)", kind,
           pr.status);
    tap_is_str(pr.data, "chunk", "%s: WORK_DATA reaches the callback", kind);
    tap_is_int(pr.warnings, 1, "%s: WORK_WARNING reaches the callback", kind);
    dsjob_free(res);
    dsjob_client_set_callbacks(c, NULL, NULL);

    snprintf(unique, sizeof(unique), "bg-%s-%ld", kind, (long)getpid());
    err = dsjob_client_submit_bg(c, "nobody", unique, "d", 1, DSJOB_PRIO_NORMAL, handle,
                                 sizeof(handle));
    tap_ok(err == DSJOB_OK && handle[0] != '\0', "%s: background submit returns a handle (%s)",
           kind, handle);
    err = dsjob_client_status(c, handle, &st);
    tap_ok(err == DSJOB_OK && st.known == 1 && st.running == 0,
           "%s: status by handle: known, queued", kind);
    err = dsjob_client_status_unique(c, unique, &st);
    tap_ok(err == DSJOB_OK && st.known == 1 && st.waiting == 0,
           "%s: status by unique: known, no client waiting", kind);
    {
        char h2[DSJOB_HANDLE_MAX];

        err = dsjob_client_submit_bg(c, "nobody", unique, "other", 5, DSJOB_PRIO_HIGH, h2,
                                     sizeof(h2));
        tap_ok(err == DSJOB_OK && strcmp(h2, handle) == 0,
               "%s: same unique coalesces onto the same handle", kind);
    }
    err = dsjob_client_status(c, "H:nosuch:999", &st);
    tap_ok(err == DSJOB_OK && st.known == 0, "%s: unknown handle: known 0", kind);
    err = dsjob_client_submit_bg(c, "rev", NULL, "abc", 3, DSJOB_PRIO_LOW, handle, sizeof(handle));
    tap_is_int(err, DSJOB_OK, "%s: background low-priority job to a live worker", kind);
    {
        char u2[80];

        snprintf(u2, sizeof(u2), "small-%s-%ld", kind, (long)getpid());
        err = dsjob_client_submit_bg(c, "nobody", u2, "x", 1, DSJOB_PRIO_NORMAL, handle,
                                     DSJOB_HANDLE_MAX - 1);
        tap_is_int(err, DSJOB_ERR_ARG,
                   "%s: a handle buffer below DSJOB_HANDLE_MAX is DSJOB_ERR_ARG", kind);
        err = dsjob_client_status_unique(c, u2, &st);
        tap_ok(err == DSJOB_OK && st.known == 0, "%s: ... and no job was submitted (known %d)",
               kind, st.known);
        err = dsjob_client_submit_epoch(c, "nobody", u2, "x", 1, (int64_t)time(NULL) + 3600, handle,
                                        2);
        tap_ok(err == DSJOB_ERR_ARG && dsjob_client_status_unique(c, u2, &st) == DSJOB_OK &&
                   st.known == 0,
               "%s: the same for an epoch job", kind);
    }

    /*
     * A foreground job that no worker takes: the server answered
     * (JOB_CREATED), so the timeout is the job's, not the server's.
     */
    dsjob_client_set_timeout(c, 2000, 300);
    err = dsjob_client_submit(c, "nobody", NULL, "late", 4, DSJOB_PRIO_NORMAL, NULL, NULL);
    tap_is_int(err, DSJOB_ERR_TIMEOUT, "%s: a foreground job no worker takes times out", kind);
    tap_ok(strstr(dsjob_client_errmsg(c), "did not end in time") != NULL &&
               strstr(dsjob_client_errmsg(c), "did not answer") == NULL,
           "%s: errmsg says the job did not end in time: %s", kind, dsjob_client_errmsg(c));
    dsjob_client_set_timeout(c, 5000, 0);

    err = dsjob_client_submit_epoch(c, "nobody", NULL, "later", 5, (int64_t)time(NULL) + 3600,
                                    handle, sizeof(handle));
    tap_ok(err == DSJOB_OK && handle[0] != '\0', "%s: epoch submit returns a handle", kind);

    tap_is_int(dsjob_client_echo(c, "ping\0pong", 9), DSJOB_OK, "%s: echo with a NUL", kind);
    tap_is_int(dsjob_client_submit(c, "", NULL, "x", 1, DSJOB_PRIO_NORMAL, NULL, NULL),
               DSJOB_ERR_ARG, "%s: empty function name is DSJOB_ERR_ARG", kind);
    memset(unique, 'u', 65);
    unique[65] = '\0';
    tap_is_int(dsjob_client_submit_bg(c, "nobody", unique, "x", 1, DSJOB_PRIO_NORMAL, NULL, 0),
               DSJOB_ERR_ARG, "%s: a unique longer than 64 bytes is refused before sending", kind);

    dsjob_client_free(c);
    tap_is_int(worker_reap(w), 0, "%s: our worker stops cleanly on SIGTERM", kind);
}

/* Failover, round-robin and consistent hashing with two servers of one kind. */
static void
suite_two(const char *kind, int port_a, int port_b)
{
    struct dsjob_client *c = dsjob_client_new();
    const char *const servers[] = {addr_of(port_a), addr_of(port_b), NULL};
    pid_t w = worker_fork(servers);
    int dead = free_port(), i, ok_all = 1, a_before, b_before;
    char h1[DSJOB_HANDLE_MAX], h2[DSJOB_HANDLE_MAX], key[32];
    void *res;
    size_t len;

    dsjob_client_set_timeout(c, 2000, 10000);
    dsjob_client_add_server(c, addr_of(dead));
    dsjob_client_add_server(c, addr_of(port_a));
    for (i = 0; i < 6; i++) {
        int err = dsjob_client_submit(c, "rev", NULL, "ab", 2, DSJOB_PRIO_NORMAL, &res, &len);

        if (err != DSJOB_OK || len != 2 || memcmp(res, "ba", 2) != 0)
            ok_all = 0;
        dsjob_free(res);
    }
    tap_ok(ok_all, "%s: with the first server down every submit fails over and completes", kind);
    for (i = 0, ok_all = 1; i < 10; i++) {
        snprintf(key, sizeof(key), "fo-%d", i);
        if (dsjob_client_submit(c, "rev", key, "xy", 2, DSJOB_PRIO_NORMAL, &res, &len) != DSJOB_OK)
            ok_all = 0;
        dsjob_free(res);
    }
    tap_ok(ok_all, "%s: jobs with unique keys that hash to the dead server fail over too", kind);
    dsjob_client_free(c);

    c = dsjob_client_new();
    dsjob_client_set_timeout(c, 2000, 10000);
    dsjob_client_add_server(c, addr_of(port_a));
    dsjob_client_add_server(c, addr_of(port_b));
    a_before = admin_total(port_a, "nobody2");
    b_before = admin_total(port_b, "nobody2");
    for (i = 0; i < 4; i++)
        dsjob_client_submit_bg(c, "nobody2", NULL, "rr", 2, DSJOB_PRIO_NORMAL, NULL, 0);
    tap_ok(admin_total(port_a, "nobody2") - a_before == 2 &&
               admin_total(port_b, "nobody2") - b_before == 2,
           "%s: jobs without a unique key alternate between the servers", kind);
    for (i = 0, ok_all = 1; i < 20; i++) {
        struct dsjob_client *c2 = dsjob_client_new();

        /* A second client with the servers in the other order picks the same one. */
        dsjob_client_add_server(c2, addr_of(port_b));
        dsjob_client_add_server(c2, addr_of(port_a));
        snprintf(key, sizeof(key), "ch-%d-%ld", i, (long)getpid());
        if (dsjob_client_submit_bg(c, "nobody3", key, "1", 1, DSJOB_PRIO_NORMAL, h1, sizeof(h1)) !=
                DSJOB_OK ||
            dsjob_client_submit_bg(c2, "nobody3", key, "2", 1, DSJOB_PRIO_NORMAL, h2, sizeof(h2)) !=
                DSJOB_OK ||
            strcmp(h1, h2) != 0)
            ok_all = 0;
        dsjob_client_free(c2);
    }
    tap_ok(ok_all, "%s: a unique key hashes to one server whatever the order: same handle", kind);
    tap_ok(admin_total(port_a, "nobody3") > 0 && admin_total(port_b, "nobody3") > 0,
           "%s: the keys spread over both servers (%d, %d)", kind, admin_total(port_a, "nobody3"),
           admin_total(port_b, "nobody3"));
    dsjob_client_free(c);
    tap_is_int(worker_reap(w), 0, "%s: the two-server worker stops cleanly", kind);
}

static void
suite_errors(void)
{
    struct dsjob_client *c = dsjob_client_new();
    char h[DSJOB_HANDLE_MAX];
    int err;

    static const char *const bad[] = {
        "",     "host:port", "host:",  ":4730",  "127.0.0.1:0", "127.0.0.1:65536",
        "[::1", "[]:4730",   "[::1]x", "[::1]:", "1:2:3",       "::1:4730x",
    };
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        tap_is_int(dsjob_client_add_server(c, bad[i]), DSJOB_ERR_ARG, "address '%s' is refused",
                   bad[i]);
    tap_is_int(dsjob_client_add_server(c, NULL), DSJOB_ERR_ARG, "a NULL address is refused");
    tap_is_int(dsjob_client_submit(c, "f", NULL, "", 0, DSJOB_PRIO_NORMAL, NULL, NULL),
               DSJOB_ERR_ARG, "a submit without servers is DSJOB_ERR_ARG");
    dsjob_client_add_server(c, addr_of(free_port()));
    dsjob_client_add_server(c, "/nonexistent/dsjob.sock");
    err = dsjob_client_submit_bg(c, "f", NULL, "", 0, DSJOB_PRIO_NORMAL, h, sizeof(h));
    tap_ok(err == DSJOB_ERR_SYS, "no server reachable: DSJOB_ERR_SYS (%s)", dsjob_strerror(err));
    tap_ok(strstr(dsjob_client_errmsg(c), "connect") != NULL, "errmsg says what failed: %s",
           dsjob_client_errmsg(c));
    tap_ok(dsjob_client_echo(c, "x", 1) != DSJOB_OK, "echo fails too");
    dsjob_client_free(c);
    {
        /* In a child: a crash shows as a signal, a call into the allocator as its count. */
        pid_t pid = fork();
        int status = 0;

        if (pid < 0)
            tap_bail("fork: %s", strerror(errno));
        if (pid == 0) {
            count_mallocs = count_frees = 0;
            dsjob_set_alloc_funcs(count_malloc, count_free);
            dsjob_client_free(NULL);
            _exit(count_mallocs + count_frees > 100 ? 100 : (int)(count_mallocs + count_frees));
        }
        waitpid(pid, &status, 0);
        tap_ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "dsjob_client_free(NULL) is a no-op: no crash, no allocator call (status %d)",
               status);
    }
}

/*
 * A server that answers a background submit with a handle longer than
 * DSJOB_HANDLE_MAX - 1 breaks the protocol, but it has the job: the call
 * is DSJOB_ERR_PROTO and the job must not go to the next server too. The
 * fake server is a child on a listening socket made here; the next server
 * is a real dsjobd.
 */
static void
suite_long_handle(int real_port)
{
    struct sockaddr_in sin;
    socklen_t slen = sizeof(sin);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), fd, status;
    char fake[32], buf[4096];
    pid_t child;
    struct dsjob_client *c;
    int err;

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(lfd, 4) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sin, &slen) < 0)
        tap_bail("fake server: %s", strerror(errno));
    snprintf(fake, sizeof(fake), "127.0.0.1:%d", ntohs(sin.sin_port));
    child = fork();
    if (child < 0)
        tap_bail("fork: %s", strerror(errno));
    if (child == 0) {
        static const char opt[] = "exceptions";
        char handle[DSJOB_HANDLE_MAX + 44];
        const void *a1[1] = {opt}, *a2[1] = {handle};
        size_t l1[1] = {sizeof(opt) - 1}, l2[1] = {sizeof(handle)};
        unsigned char out[1024];
        size_t n;

        alarm(10);
        fd = accept(lfd, NULL, NULL);
        /* OPTION_REQ and the submit; their bytes do not matter here. */
        if (fd < 0 || read(fd, buf, sizeof(buf)) <= 0)
            _exit(1);
        memset(handle, 'h', sizeof(handle));
        n = packet_encode(out, sizeof(out), PACKET_RES, PACKET_OPTION_RES, 1, a1, l1);
        n += packet_encode(out + n, sizeof(out) - n, PACKET_RES, PACKET_JOB_CREATED, 1, a2, l2);
        if (write(fd, out, n) != (ssize_t)n)
            _exit(1);
        /* Until the client closes. */
        while (read(fd, buf, sizeof(buf)) > 0)
            ;
        _exit(0);
    }
    close(lfd);
    c = dsjob_client_new();
    dsjob_client_add_server(c, fake); /* first: a job without a unique goes to it */
    dsjob_client_add_server(c, addr_of(real_port));
    dsjob_client_set_timeout(c, 2000, 3000);
    err = dsjob_client_submit_bg(c, "long_handle", NULL, "x", 1, DSJOB_PRIO_NORMAL, buf,
                                 DSJOB_HANDLE_MAX);
    tap_is_int(err, DSJOB_ERR_PROTO,
               "a handle longer than DSJOB_HANDLE_MAX - 1 is DSJOB_ERR_PROTO");
    tap_ok(strstr(dsjob_client_errmsg(c), "the job was submitted") != NULL,
           "errmsg says the job was submitted: %s", dsjob_client_errmsg(c));
    dsjob_client_free(c);
    waitpid(child, &status, 0);
    fd = peer_connect(real_port);
    peer_admin(fd, "status", true, buf, sizeof(buf));
    close(fd);
    tap_ok(strstr(buf, "long_handle\t") == NULL,
           "the job was not submitted to the next server too");
}

/*
 * Starts dsjobd listening on listen_addr only, on port (our own start:
 * daemon_start always adds 127.0.0.1, where port 4730 may be someone
 * else's). Returns false when it did not come up, as when the port is
 * taken there.
 */
static bool
daemon_start_on(struct daemon *d, const char *listen_addr, const char *port)
{
    const char *bin = getenv("DSJOBD") ? getenv("DSJOBD") : "server/dsjobd";
    char portfile[300], logfile[300], real[4096];
    int i;

    if (peer_unwrap_libtool(bin, real, sizeof(real)))
        bin = real; /* the program, not libtool's wrapper (as daemon_start) */
    memset(d, 0, sizeof(*d));
    snprintf(d->dir, sizeof(d->dir), "%s/dsjob-t.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(d->dir) == NULL)
        tap_bail("mkdtemp: %s", strerror(errno));
    snprintf(portfile, sizeof(portfile), "%s/port", d->dir);
    snprintf(logfile, sizeof(logfile), "%s/dsjobd.log", d->dir);
    d->pid = fork();
    if (d->pid < 0)
        tap_bail("fork: %s", strerror(errno));
    if (d->pid == 0) {
        execl(bin, bin, "-L", listen_addr, "-p", port, "--port-file", portfile, "--log-file",
              logfile, (char *)NULL);
        _exit(127);
    }
    for (i = 0; i < 100; i++) {
        FILE *fp = fopen(portfile, "r");

        if (fp != NULL) {
            int ok = fscanf(fp, "%d", &d->port) == 1 && d->port > 0;

            fclose(fp);
            if (ok)
                return true;
        }
        if (!daemon_alive(d)) {
            d->pid = 0;
            daemon_stop(d);
            return false;
        }
        sleep_ms(50);
    }
    daemon_stop(d);
    return false;
}

/*
 * An address without a port means 4730, as with the gearman tools, for
 * the client and the worker alike; "[v6]:port" and "[v6]" work too. Port
 * 4730 on 127.0.0.1 may belong to another server on this machine, so the
 * IPv4 case uses a loopback address of its own, picked from our pid.
 */
static void
suite_addresses(void)
{
    struct daemon d;
    struct dsjob_client *c;
    char ip[32], v6[32];
    long pid = (long)getpid();
    const char *extra[] = {"-L", "::1", NULL};

    snprintf(ip, sizeof(ip), "127.%ld.%ld.%ld", 1 + pid % 250, 1 + pid / 250 % 250,
             2 + pid / 62500 % 250);
    if (daemon_start_on(&d, ip, "4730")) {
        const char *const servers[] = {ip, NULL};
        pid_t w = worker_fork(servers);
        void *res = NULL;
        size_t len = 0;
        int err;

        c = dsjob_client_new();
        tap_is_int(dsjob_client_add_server(c, ip), DSJOB_OK, "'%s' (no port) is taken", ip);
        tap_is_int(dsjob_client_echo(c, "p", 1), DSJOB_OK,
                   "the client reaches dsjobd on %s:4730 through '%s'", ip, ip);
        dsjob_client_set_timeout(c, 2000, 10000);
        err = dsjob_client_submit(c, "rev", NULL, "port", 4, DSJOB_PRIO_NORMAL, &res, &len);
        tap_ok(err == DSJOB_OK && len == 4 && memcmp(res, "trop", 4) == 0,
               "a worker given '%s' (no port) does the client's job (%s)", ip,
               dsjob_client_errmsg(c));
        dsjob_free(res);
        dsjob_client_free(c);
        worker_reap(w);
        daemon_stop(&d);
    } else {
        tap_skip(3, "dsjobd could not listen on %s:4730", ip);
    }

    daemon_start(&d, extra);
    snprintf(v6, sizeof(v6), "[::1]:%d", d.port);
    c = dsjob_client_new();
    tap_ok(dsjob_client_add_server(c, v6) == DSJOB_OK && dsjob_client_echo(c, "6", 1) == DSJOB_OK,
           "'%s' reaches dsjobd over IPv6 (%s)", v6, dsjob_client_errmsg(c));
    dsjob_client_free(c);
    daemon_stop(&d);

    if (daemon_start_on(&d, "::1", "4730")) {
        c = dsjob_client_new();
        tap_ok(dsjob_client_add_server(c, "[::1]") == DSJOB_OK &&
                   dsjob_client_echo(c, "6", 1) == DSJOB_OK,
               "'[::1]' (no port) reaches dsjobd on [::1]:4730 (%s)", dsjob_client_errmsg(c));
        dsjob_client_free(c);
        c = dsjob_client_new();
        tap_ok(dsjob_client_add_server(c, "::1") == DSJOB_OK &&
                   dsjob_client_echo(c, "6", 1) == DSJOB_OK,
               "'::1' (a bare IPv6 address) reaches it too (%s)", dsjob_client_errmsg(c));
        dsjob_client_free(c);
        daemon_stop(&d);
    } else {
        tap_skip(2, "dsjobd could not listen on [::1]:4730");
    }
}

static void
suite_unix(void)
{
    struct daemon d;
    char path[300], arg[320];
    const char *extra[] = {"--unix-socket", path, NULL};
    struct dsjob_client *c;

    snprintf(path, sizeof(path), "/tmp/dsjob-tc-%ld.sock", (long)getpid());
    (void)arg;
    daemon_start(&d, extra);
    c = dsjob_client_new();
    dsjob_client_add_server(c, path);
    tap_is_int(dsjob_client_echo(c, "unix", 4), DSJOB_OK, "dsjobd: echo over a unix socket");
    {
        const char *const servers[] = {path, NULL};
        pid_t w = worker_fork(servers);
        void *res = NULL;
        size_t len = 0;

        dsjob_client_set_timeout(c, 2000, 10000);
        tap_ok(dsjob_client_submit(c, "rev", NULL, "unix", 4, DSJOB_PRIO_NORMAL, &res, &len) ==
                       DSJOB_OK &&
                   len == 4 && memcmp(res, "xinu", 4) == 0,
               "dsjobd: client and worker over a unix socket");
        dsjob_free(res);
        worker_reap(w);
    }
    dsjob_client_free(c);
    daemon_stop(&d);
    unlink(path);
}

/* The task's error and text after one task set run of one job against port. */
static int
taskset_one(int port, const void *data, size_t len, unsigned flags, char *msg, size_t cap)
{
    struct dsjob_client *c = client_for(port);
    struct dsjob_taskset *ts = dsjob_taskset_new(c, NULL);
    struct dsjob_task *t = NULL;
    int err;

    err = dsjob_taskset_add(ts, "big", NULL, data, len, DSJOB_PRIO_NORMAL, flags, NULL, &t);
    if (err == DSJOB_OK)
        err = dsjob_taskset_run(ts, 20000);
    if (t != NULL && err != DSJOB_ERR_TIMEOUT)
        err = dsjob_task_error(t);
    snprintf(msg, cap, "%s", t != NULL ? dsjob_task_errmsg(t) : "");
    dsjob_taskset_free(ts);
    dsjob_client_free(c);
    return err;
}

/*
 * A payload over --max-packet-size: the server answers PACKET_TOO_LARGE
 * and closes. 8 MB is more than the sockets buffer, so the close comes
 * while the client is still writing, and its reason has to be read
 * after the write failed. The small one fits the buffers: the reason is
 * read as an answer.
 */
static void
suite_too_large(void)
{
    const char *extra[] = {"--max-packet-size", "4096", NULL};
    size_t sizes[2] = {8192, 8 << 20}, k;
    char *big = calloc(1, sizes[1]), handle[DSJOB_HANDLE_MAX], msg[600];
    struct daemon d;

    daemon_start(&d, extra);
    for (k = 0; k < 2; k++) {
        struct dsjob_client *c = client_for(d.port);
        int err;

        err = dsjob_client_submit_bg(c, "big", NULL, big, sizes[k], DSJOB_PRIO_NORMAL, handle,
                                     sizeof(handle));
        tap_ok(err == DSJOB_ERR_SERVER && strstr(dsjob_client_errmsg(c), "PACKET_TOO_LARGE"),
               "submit_bg of %zu bytes over --max-packet-size 4096: the server's reason (%s: %s)",
               sizes[k], dsjob_strerror(err), dsjob_client_errmsg(c));
        err = dsjob_client_submit(c, "big", NULL, big, sizes[k], DSJOB_PRIO_NORMAL, NULL, NULL);
        tap_ok(err == DSJOB_ERR_SERVER &&
                   strstr(dsjob_client_errmsg(c), "--max-packet-size 4096") != NULL,
               "submit of %zu bytes: the server's reason, naming the option (%s: %s)", sizes[k],
               dsjob_strerror(err), dsjob_client_errmsg(c));
        dsjob_client_free(c);
        err = taskset_one(d.port, big, sizes[k], 0, msg, sizeof(msg));
        tap_ok(err == DSJOB_ERR_SERVER && strstr(msg, "PACKET_TOO_LARGE") != NULL,
               "a task set's task of %zu bytes: the server's reason (%s: %s)", sizes[k],
               dsjob_strerror(err), msg);
        err = taskset_one(d.port, big, sizes[k], DSJOB_TASK_BACKGROUND, msg, sizeof(msg));
        tap_ok(err == DSJOB_ERR_SERVER && strstr(msg, "PACKET_TOO_LARGE") != NULL,
               "a background task of %zu bytes: the server's reason (%s: %s)", sizes[k],
               dsjob_strerror(err), msg);
    }
    {
        struct dsjob_client *c = client_for(d.port);

        tap_is_int(dsjob_client_echo(c, "still", 5), DSJOB_OK, "and the server still serves");
        dsjob_client_free(c);
    }
    daemon_stop(&d);
    free(big);
}

/*
 * A payload over what a packet can declare (4 GiB - 1 bytes) is refused
 * before anything is sent or copied: the server address is a port where
 * nothing listens, so only a check made first gives DSJOB_ERR_ARG. The
 * payload is a read-only mapping that is never touched.
 */
static void
suite_protocol_max(void)
{
    size_t len = (size_t)UINT32_MAX + 1;
    void *huge = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    struct dsjob_client *c;
    char handle[DSJOB_HANDLE_MAX], msg[600];
    int err;

    if (huge == MAP_FAILED) {
        tap_skip(3, "cannot map 4 GiB of address space: %s", strerror(errno));
        return;
    }
    c = client_for(free_port());
    err = dsjob_client_submit_bg(c, "big", NULL, huge, len, DSJOB_PRIO_NORMAL, handle,
                                 sizeof(handle));
    tap_ok(err == DSJOB_ERR_ARG && strstr(dsjob_client_errmsg(c), "Gearman packet can hold"),
           "submit_bg of 4 GiB: refused before sending (%s: %s)", dsjob_strerror(err),
           dsjob_client_errmsg(c));
    err = dsjob_client_submit(c, "big", NULL, huge, len, DSJOB_PRIO_NORMAL, NULL, NULL);
    tap_ok(err == DSJOB_ERR_ARG, "submit of 4 GiB: refused too (%s)", dsjob_strerror(err));
    dsjob_client_free(c);
    err = taskset_one(free_port(), huge, len, 0, msg, sizeof(msg));
    tap_is_int(err, DSJOB_ERR_ARG, "dsjob_taskset_add of 4 GiB: DSJOB_ERR_ARG");
    munmap(huge, len);
}

int
main(void)
{
    struct daemon d, d2;
    struct gearmand g, g2;

    alarm(240);
    signal(SIGPIPE, SIG_IGN);
    suite_errors();
    daemon_start(&d, NULL);
    daemon_start(&d2, NULL);
    suite_one("dsjobd", d.port);
    suite_two("dsjobd", d.port, d2.port);
    suite_long_handle(d.port);
    daemon_stop(&d2);
    daemon_stop(&d);
    suite_unix();
    suite_addresses();
    suite_too_large();
    suite_protocol_max();
    if (gearmand_start(&g)) {
        if (gearmand_start(&g2)) {
            suite_one("gearmand", g.port);
            suite_two("gearmand", g.port, g2.port);
            gearmand_stop(&g2);
        } else {
            tap_skip(1, "second gearmand did not start");
        }
        gearmand_stop(&g);
    } else {
        tap_skip(1, "gearmand not installed");
    }
    return tap_done();
}
