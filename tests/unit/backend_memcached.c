/*
 * The memcached backend as the store contract sees it, against a real
 * memcached that this test starts on a free loopback port (MEMCACHED_BIN,
 * or /usr/bin/memcached; skipped if there is none). Each case gets a key
 * prefix of its own, a second client looks at the keys from outside, and
 * SIGSTOP makes flushes fail. Also the memcached control and the raw
 * client of the memcached-only tests.
 */
#include "config.h"
#include "store_backends.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libmemcached/memcached.h>

#include <dsjob/common.h>

#include "tap.h"

/* In server/store_memcached.c; store.h may not declare it. */
extern const struct store_ops store_memcached_ops;

#define START_WAIT_MS 5000

static const char *mc_bin; /* the memcached binary */
pid_t mc_pid = -1;
int mc_port;
char mc_servers[64];

void
sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int
free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int fd, port = -1;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        tap_bail("socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    if (port < 0)
        tap_bail("cannot find a free port: %s", strerror(errno));
    return port;
}

static bool
can_connect(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    bool ok;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

void
mcd_stop(void)
{
    if (mc_pid <= 0)
        return;
    kill(mc_pid, SIGCONT); /* in case a case left it stopped */
    kill(mc_pid, SIGKILL);
    waitpid(mc_pid, NULL, 0);
    mc_pid = -1;
}

bool
mcd_start(int port)
{
    char portstr[16];
    int waited, status, fd;
    pid_t pid;

    snprintf(portstr, sizeof(portstr), "%d", port);
    pid = fork();
    if (pid < 0)
        tap_bail("fork: %s", strerror(errno));
    if (pid == 0) {
        fd = open("/dev/null", O_RDWR);
        if (fd >= 0) {
            dup2(fd, 0), dup2(fd, 1), dup2(fd, 2);
            close(fd);
        }
        execl(mc_bin, mc_bin, "-l", "127.0.0.1", "-p", portstr, "-U", "0", "-m", "64", "-M", "-t",
              "2", "-u", "root", (char *)NULL);
        _exit(127);
    }
    mc_pid = pid;
    for (waited = 0; waited < START_WAIT_MS; waited += 20) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            mc_pid = -1;
            return false;
        }
        if (can_connect(port))
            return true;
        sleep_ms(20);
    }
    mcd_stop();
    return false;
}

/* mcd_start_any starts memcached on some free port and sets mc_servers. */
static void
mcd_start_any(void)
{
    int tries;

    for (tries = 0; tries < 10; tries++) {
        mc_port = free_port();
        if (mcd_start(mc_port)) {
            snprintf(mc_servers, sizeof(mc_servers), "127.0.0.1:%d", mc_port);
            return;
        }
    }
    tap_bail("cannot start '%s' on a loopback port", mc_bin);
}

static memcached_st *
raw_client(void)
{
    memcached_st *mc = memcached_create(NULL);

    if (mc == NULL ||
        memcached_server_add(mc, "127.0.0.1", (in_port_t)mc_port) != MEMCACHED_SUCCESS)
        tap_bail("cannot make a libmemcached client");
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_KETAMA, 1);
    return mc;
}

bool
raw_exists(const char *prefix, const char *what)
{
    memcached_st *mc = raw_client();
    char key[256];
    memcached_return_t rc;
    size_t len;
    uint32_t flags;
    char *v;

    snprintf(key, sizeof(key), "%s:%s", prefix, what);
    v = memcached_get(mc, key, strlen(key), &len, &flags, &rc);
    free(v);
    memcached_free(mc);
    return rc == MEMCACHED_SUCCESS;
}

void
raw_set(const char *prefix, const char *what, const void *val, size_t len)
{
    memcached_st *mc = raw_client();
    char key[256];

    snprintf(key, sizeof(key), "%s:%s", prefix, what);
    if (memcached_set(mc, key, strlen(key), val, len, 0, 0) != MEMCACHED_SUCCESS)
        tap_bail("cannot set '%s'", key);
    memcached_free(mc);
}

static uint64_t
le64(const unsigned char *p)
{
    uint64_t v = 0;
    int i;

    for (i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* The head is "dsj", version 1, then the first and next chunk numbers. */
long long
head_chunks(const char *prefix)
{
    memcached_st *mc = raw_client();
    char key[256];
    memcached_return_t rc;
    size_t len;
    uint32_t flags;
    unsigned char *v;
    long long n = -1;

    snprintf(key, sizeof(key), "%s:head", prefix);
    v = (unsigned char *)memcached_get(mc, key, strlen(key), &len, &flags, &rc);
    if (rc == MEMCACHED_SUCCESS && len == 20 && memcmp(v, "dsj\1", 4) == 0)
        n = (long long)(le64(v + 12) - le64(v + 4));
    free(v);
    memcached_free(mc);
    return n;
}

/* A prefix of its own for each case, so that cases (and runs) do not see each other's keys. */
const char *
prefix_for(const char *name)
{
    static char buf[96];

    snprintf(buf, sizeof(buf), "t%ld-%s", (long)getpid(), name);
    return buf;
}

bool
mcd_setup(char *why, size_t len)
{
    mc_bin = getenv("MEMCACHED_BIN");
    if (mc_bin == NULL || mc_bin[0] == '\0')
        mc_bin = "/usr/bin/memcached";
    if (access(mc_bin, X_OK) != 0) {
        snprintf(why, len, "no memcached at '%s' (set MEMCACHED_BIN)", mc_bin);
        return false;
    }
    atexit(mcd_stop);
    mcd_start_any();
    tap_diag("memcached pid %ld on %s", (long)mc_pid, mc_servers);
    return true;
}

static char cur_prefix[96];
static struct store_config cur_cfg;

static const struct store_config *
mc_begin(const char *name)
{
    snprintf(cur_prefix, sizeof(cur_prefix), "%s", prefix_for(name));
    cur_cfg = (struct store_config){.servers = mc_servers, .prefix = cur_prefix};
    return &cur_cfg;
}

static void
mc_end(void)
{
}

static const char *
mc_where(void)
{
    return mc_servers;
}

static int
mc_outside(uint64_t id)
{
    char what[32];

    snprintf(what, sizeof(what), "job:%llu", (unsigned long long)id);
    /*
     * The store deletes without waiting for replies, on its own connection;
     * memcached may serve this one first. A key that is there is looked at
     * again a few times (50 ms at most) before it counts as present.
     */
    for (int i = 0; i < 5 && raw_exists(cur_prefix, what); i++)
        sleep_ms(10);
    return raw_exists(cur_prefix, what);
}

int
mc_flush_again(const struct store_ops *ops, struct store *st, char *err)
{
    int rc = ops->flush(st, err), waited;

    for (waited = 0; rc != DSJOB_OK && waited < 30000; waited += 20) {
        sleep_ms(20);
        rc = ops->flush(st, err);
    }
    return rc;
}

/*
 * A stopped memcached: requests time out. Back, it takes the retry timeout
 * to be tried again: the contract flushes again until it is
 * (.flush_again).
 */
static void
mc_fail_flushes(struct store *st, bool on)
{
    (void)st;
    kill(mc_pid, on ? SIGSTOP : SIGCONT);
}

const struct store_backend store_backend_memcached = {
    .name = "memcached",
    .ops = &store_memcached_ops,
    .big = 1000 * 1000, /* just under memcached's 1 MiB item */
    .many = 10000,
    .setup = mcd_setup,
    .teardown = mcd_stop,
    .begin = mc_begin,
    .end = mc_end,
    .where = mc_where,
    .outside = mc_outside,
    .fail_flushes = mc_fail_flushes,
    .flush_again = mc_flush_again,
};
