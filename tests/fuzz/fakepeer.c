/*
 * The fake server of the client library targets (see fakepeer.h). The
 * libraries block in poll() on their own sockets, so the peer needs a
 * thread of its own. Rounds are kept apart by a mutex: the thread marks
 * itself busy before it accepts, and fakepeer_finish waits until it is
 * idle and nothing is left in the listen queue (a connection the library
 * still holds open is then closed by the peer). The input is copied, so
 * the thread never reads a buffer libFuzzer has freed.
 */
#include "config.h"
#include "fakepeer.h"

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle = PTHREAD_COND_INITIALIZER;
static int lfd = -1;
static char path[108];
static uint8_t *buf;   /* this round's bytes (owned) */
static size_t buf_len; /* bytes in buf */
static bool served;    /* the round's first connection was taken */
static bool busy;      /* the thread is serving a connection */
static bool over;      /* fakepeer_finish was called: stop reading */
static void (*done_fn)(void *);
static void *done_arg;

static bool
pending(void)
{
    struct pollfd p = {.fd = lfd, .events = POLLIN};

    return poll(&p, 1, 0) > 0;
}

static void
serve(int fd, const uint8_t *data, size_t size)
{
    char sink[4096];
    size_t off = 0;

    while (off < size) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);

        if (n <= 0)
            break;
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        bool stop;

        pthread_mutex_lock(&lock);
        stop = over;
        pthread_mutex_unlock(&lock);
        if (stop)
            break;
        if (poll(&p, 1, 5) > 0 && read(fd, sink, sizeof(sink)) <= 0)
            break;
    }
}

static void *
peer_main(void *unused)
{
    (void)unused;
    for (;;) {
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        void (*fn)(void *) = NULL;
        void *arg = NULL;
        bool first;
        int fd;

        if (poll(&p, 1, -1) <= 0)
            continue;
        pthread_mutex_lock(&lock);
        busy = true;
        first = !served;
        served = true;
        pthread_mutex_unlock(&lock);
        fd = accept(lfd, NULL, NULL);
        if (fd >= 0) {
            if (first) {
                serve(fd, buf, buf_len);
                fn = done_fn;
                arg = done_arg;
            }
            close(fd);
        }
        if (fn != NULL)
            fn(arg);
        pthread_mutex_lock(&lock);
        busy = false;
        pthread_cond_broadcast(&idle);
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

static void
cleanup(void)
{
    unlink(path);
}

const char *
fakepeer_start(void)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    pthread_t t;

    if (lfd >= 0)
        return path;
    snprintf(path, sizeof(path), "/tmp/dsjob-fuzzpeer-%ld.sock", (long)getpid());
    unlink(path);
    memcpy(sun.sun_path, path, strlen(path) + 1);
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sun, sizeof(sun)) < 0 || listen(lfd, 16) < 0 ||
        pthread_create(&t, NULL, peer_main, NULL) != 0)
        abort();
    pthread_detach(t);
    atexit(cleanup);
    return path;
}

void
fakepeer_arm(const uint8_t *data, size_t size, void (*done)(void *arg), void *arg)
{
    pthread_mutex_lock(&lock);
    free(buf);
    buf = malloc(size > 0 ? size : 1);
    if (buf == NULL)
        abort();
    memcpy(buf, data, size);
    buf_len = size;
    served = false;
    over = false;
    done_fn = done;
    done_arg = arg;
    pthread_mutex_unlock(&lock);
}

void
fakepeer_finish(void)
{
    pthread_mutex_lock(&lock);
    over = true;
    while (busy || pending())
        pthread_cond_wait(&idle, &lock);
    pthread_mutex_unlock(&lock);
}
