/*
 * One connection to one job server (see link.h). Connecting resolves the
 * address each time (so a server that moves is found again), connects
 * non-blocking and waits with poll() for the connect timeout. Queued
 * packets accumulate in one growing buffer, which is what lets a task set
 * pipeline thousands of submits without a round trip each. Input is read
 * into a buffer that is compacted lazily; decoded packets borrow it.
 */
#include "config.h"
#include "link/link.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <dsjob/common.h>

#include "link/addr.h"

int64_t
link_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
link_deadline(int timeout_ms)
{
    if (timeout_ms <= 0)
        return -1;
    return link_now_ms() + timeout_ms;
}

int
link_wait_ms(int64_t deadline)
{
    int64_t left;

    if (deadline < 0)
        return -1;
    left = deadline - link_now_ms();
    if (left <= 0)
        return 0;
    return left > 1000000 ? 1000000 : (int)left;
}

int
link_set_err(struct link *l, int err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(l->err, sizeof(l->err), fmt, ap);
    va_end(ap);
    return err;
}

int
link_init(struct link *l, const char *addr)
{
    size_t n;

    memset(l, 0, sizeof(*l));
    l->fd = -1;
    if (addr == NULL || *addr == '\0')
        return DSJOB_ERR_ARG;
    n = strlen(addr) + ADDR_EXTRA;
    l->addr = dsjob_malloc(n);
    if (l->addr == NULL)
        return DSJOB_ERR_NOMEM;
    if (addr_normalize(addr, l->addr, n) != 0) {
        dsjob_free(l->addr);
        l->addr = NULL;
        return DSJOB_ERR_ARG;
    }
    return DSJOB_OK;
}

void
link_release(struct link *l)
{
    link_close(l);
    dsjob_free(l->addr);
    dsjob_free(l->in);
    dsjob_free(l->out);
    memset(l, 0, sizeof(*l));
    l->fd = -1;
}

void
link_close(struct link *l)
{
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    l->out_off = l->out_len = 0;
    l->in_off = l->in_len = l->in_pending = 0;
    l->hello = false;
    l->hello_wait = false;
}

/* Waits for a non-blocking connect on fd to finish; returns DSJOB_OK or an error. */
static int
connect_wait(struct link *l, int fd, int64_t deadline)
{
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    int soerr = 0;
    socklen_t len = sizeof(soerr);
    int r;

    for (;;) {
        r = poll(&pfd, 1, link_wait_ms(deadline));
        if (r > 0)
            break;
        if (r == 0)
            return link_set_err(l, DSJOB_ERR_TIMEOUT, "connect to '%s' timed out", l->addr);
        if (errno != EINTR)
            return link_set_err(l, DSJOB_ERR_SYS, "poll: %s", strerror(errno));
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
        soerr = errno;
    if (soerr != 0)
        return link_set_err(l, DSJOB_ERR_SYS, "connect to '%s': %s", l->addr, strerror(soerr));
    return DSJOB_OK;
}

/* Makes a non-blocking, close-on-exec socket and starts connecting it. */
static int
connect_one(struct link *l, int family, const struct sockaddr *sa, socklen_t salen,
            int64_t deadline, int *fdp)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    int err;

    if (fd < 0)
        return link_set_err(l, DSJOB_ERR_SYS, "socket: %s", strerror(errno));
    if (family != AF_UNIX)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, sa, salen) == 0) {
        *fdp = fd;
        return DSJOB_OK;
    }
    if (errno != EINPROGRESS && errno != EAGAIN) {
        err = link_set_err(l, DSJOB_ERR_SYS, "connect to '%s': %s", l->addr, strerror(errno));
        close(fd);
        return err;
    }
    err = connect_wait(l, fd, deadline);
    if (err != DSJOB_OK) {
        close(fd);
        return err;
    }
    *fdp = fd;
    return DSJOB_OK;
}

int
link_connect(struct link *l, int connect_ms)
{
    int64_t deadline = link_deadline(connect_ms);
    struct addrinfo hints, *res = NULL, *ai;
    char host[256];
    const char *port;
    int err = DSJOB_ERR_SYS, gai;

    if (l->fd >= 0)
        return DSJOB_OK;
    if (l->addr[0] == '/') {
        struct sockaddr_un sun;

        memset(&sun, 0, sizeof(sun));
        sun.sun_family = AF_UNIX;
        memcpy(sun.sun_path, l->addr, strlen(l->addr));
        return connect_one(l, AF_UNIX, (struct sockaddr *)&sun, sizeof(sun), deadline, &l->fd);
    }
    port = addr_split(l->addr, host, sizeof(host));
    if (port == NULL)
        return link_set_err(l, DSJOB_ERR_NOTFOUND, "resolve '%s': host name too long", l->addr);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0)
        return link_set_err(l, DSJOB_ERR_NOTFOUND, "resolve '%s': %s", l->addr, gai_strerror(gai));
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        err = connect_one(l, ai->ai_family, ai->ai_addr, ai->ai_addrlen, deadline, &l->fd);
        if (err == DSJOB_OK || err == DSJOB_ERR_TIMEOUT)
            break;
    }
    freeaddrinfo(res);
    return err;
}

/* Makes room for n more bytes at the end of a buffer, compacting first. */
static int
buf_reserve(unsigned char **buf, size_t *off, size_t *len, size_t *cap, size_t n)
{
    unsigned char *nb;
    size_t ncap;

    if (*off > 0 && (*off == *len || *len + n > *cap)) {
        memmove(*buf, *buf + *off, *len - *off);
        *len -= *off;
        *off = 0;
    }
    if (*len + n <= *cap)
        return DSJOB_OK;
    ncap = *cap ? *cap : 4096;
    while (ncap < *len + n)
        ncap *= 2;
    nb = dsjob_malloc(ncap);
    if (nb == NULL)
        return DSJOB_ERR_NOMEM;
    if (*len > 0)
        memcpy(nb, *buf, *len);
    dsjob_free(*buf);
    *buf = nb;
    *cap = ncap;
    return DSJOB_OK;
}

int
link_queue(struct link *l, uint32_t type, unsigned nargs, const void *const *args,
           const size_t *lens)
{
    size_t size = PACKET_HEADER_SIZE + packet_args_size(nargs, lens);

    if (buf_reserve(&l->out, &l->out_off, &l->out_len, &l->out_cap, size) != DSJOB_OK)
        return link_set_err(l, DSJOB_ERR_NOMEM, "out of memory");
    packet_encode(l->out + l->out_len, size, PACKET_REQ, type, nargs, args, lens);
    l->out_len += size;
    return DSJOB_OK;
}

bool
link_want_write(const struct link *l)
{
    return l->out_off < l->out_len;
}

int
link_write_some(struct link *l)
{
    while (l->out_off < l->out_len) {
        ssize_t n = send(l->fd, l->out + l->out_off, l->out_len - l->out_off, MSG_NOSIGNAL);

        if (n > 0) {
            l->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return DSJOB_OK;
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
            return link_set_err(l, DSJOB_ERR_CLOSED, "'%s' closed the connection", l->addr);
        return link_set_err(l, DSJOB_ERR_SYS, "send to '%s': %s", l->addr, strerror(errno));
    }
    l->out_off = l->out_len = 0;
    return DSJOB_OK;
}

int
link_read_some(struct link *l)
{
    for (;;) {
        ssize_t n;

        if (l->in_pending > 0) {
            l->in_off += l->in_pending;
            l->in_pending = 0;
        }
        if (buf_reserve(&l->in, &l->in_off, &l->in_len, &l->in_cap, 16384) != DSJOB_OK)
            return link_set_err(l, DSJOB_ERR_NOMEM, "out of memory");
        n = recv(l->fd, l->in + l->in_len, l->in_cap - l->in_len, 0);
        if (n > 0) {
            l->in_len += (size_t)n;
            if (l->in_len < l->in_cap)
                return DSJOB_OK;
            continue;
        }
        if (n == 0)
            return link_set_err(l, DSJOB_ERR_CLOSED, "'%s' closed the connection", l->addr);
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return DSJOB_OK;
        if (errno == ECONNRESET)
            return link_set_err(l, DSJOB_ERR_CLOSED, "'%s' reset the connection", l->addr);
        return link_set_err(l, DSJOB_ERR_SYS, "recv from '%s': %s", l->addr, strerror(errno));
    }
}

int
link_next(struct link *l, struct packet *p)
{
    size_t need = 0;
    const char *why = NULL;
    enum packet_status st;

    l->in_off += l->in_pending;
    l->in_pending = 0;
    if (l->in_off == l->in_len)
        return 0;
    st = packet_decode(l->in + l->in_off, l->in_len - l->in_off, LINK_MAX_PACKET, p, &need, &why);
    switch (st) {
    case PACKET_NEED_MORE: return 0;
    case PACKET_OK:
        if (p->magic != PACKET_RES)
            return -link_set_err(l, DSJOB_ERR_PROTO, "'%s' sent a request packet", l->addr);
        l->in_pending = need;
        return 1;
    case PACKET_BAD:
    case PACKET_FATAL: break;
    }
    return -link_set_err(l, DSJOB_ERR_PROTO, "bad packet from '%s': %s", l->addr,
                         why ? why : "malformed");
}

/* Waits for fd to become readable or writable (events) until deadline. */
static int
link_poll(struct link *l, short events, int64_t deadline)
{
    struct pollfd pfd = {.fd = l->fd, .events = events};
    int r;

    for (;;) {
        r = poll(&pfd, 1, link_wait_ms(deadline));
        if (r > 0)
            return DSJOB_OK;
        if (r == 0)
            return link_set_err(l, DSJOB_ERR_TIMEOUT, "'%s' did not answer in time", l->addr);
        if (errno != EINTR)
            return link_set_err(l, DSJOB_ERR_SYS, "poll: %s", strerror(errno));
    }
}

int
link_flush(struct link *l, int64_t deadline)
{
    int err;

    if (l->fd < 0)
        return link_set_err(l, DSJOB_ERR_CLOSED, "not connected to '%s'", l->addr);
    for (;;) {
        err = link_write_some(l);
        if (err != DSJOB_OK || !link_want_write(l))
            return err;
        err = link_poll(l, POLLOUT, deadline);
        if (err != DSJOB_OK)
            return err;
    }
}

int
link_recv(struct link *l, struct packet *p, int64_t deadline)
{
    int r;

    if (l->fd < 0)
        return link_set_err(l, DSJOB_ERR_CLOSED, "not connected to '%s'", l->addr);
    for (;;) {
        short events = POLLIN;

        if (link_want_write(l)) {
            r = link_write_some(l);
            if (r != DSJOB_OK)
                return r;
        }
        r = link_next(l, p);
        if (r > 0)
            return DSJOB_OK;
        if (r < 0)
            return -r;
        if (link_want_write(l))
            events |= POLLOUT;
        r = link_poll(l, events, deadline);
        if (r != DSJOB_OK)
            return r;
        r = link_read_some(l);
        if (r != DSJOB_OK)
            return r;
    }
}
