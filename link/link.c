/*
 * One connection to one job server (see link.h). Connecting resolves the
 * address each time (so a server that moves is found again), connects
 * non-blocking and waits with poll() for the connect timeout. Queued
 * packets accumulate in one growing buffer, which is what lets a task set
 * pipeline thousands of submits without a round trip each. Input is read
 * into a buffer that is compacted lazily; decoded packets borrow it.
 *
 * With a TLS context (OpenSSL), a connection to a TCP server does its
 * handshake right after the connect, blocking with poll() up to the same
 * deadline, and then reads and writes through SSL_read and SSL_write on a
 * BIO of our own that sends with MSG_NOSIGNAL: a library must not let a
 * closed server raise SIGPIPE in its caller. A read takes everything
 * OpenSSL can decrypt, so no byte waits in OpenSSL where poll() cannot see
 * it. Built without OpenSSL, asking for TLS is an error. libssl is opened
 * by the first link_tls_new (ssl_lazy.c), not linked: a plain client loads
 * none of it, and a missing libssl is that call's error, naming it.
 */
#include "config.h"
#include "link/link.h"

#include <errno.h>
#include <inttypes.h>
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

#ifdef HAVE_OPENSSL
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "link/ssl_lazy.h"
#endif

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
    link_tls_free(l->tls);
    dsjob_free(l->addr);
    dsjob_free(l->in);
    dsjob_free(l->out);
    memset(l, 0, sizeof(*l));
    l->fd = -1;
}

static void link_tls_end(struct link *l);

void
link_close(struct link *l)
{
    link_tls_end(l);
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    l->out_off = l->out_len = 0;
    l->in_off = l->in_len = l->in_pending = 0;
    l->hello = false;
    l->hello_wait = 0;
    l->said[0] = '\0';
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

static int link_tls_start(struct link *l, const char *host, int64_t deadline);

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
    if (err == DSJOB_OK && l->tls != NULL) {
        err = link_tls_start(l, host, deadline);
        if (err != DSJOB_OK)
            link_close(l);
    }
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
    size_t body = packet_args_size(nargs, lens), size = PACKET_HEADER_SIZE + body;

    /* packet_encode would write nothing, and the bytes queued would be garbage. */
    if (body > UINT32_MAX)
        return link_set_err(l, DSJOB_ERR_ARG,
                            "a packet of %zu bytes is over the %" PRIu32
                            " bytes a Gearman packet can hold",
                            body, UINT32_MAX);
    if (buf_reserve(&l->out, &l->out_off, &l->out_len, &l->out_cap, size) != DSJOB_OK)
        return link_set_err(l, DSJOB_ERR_NOMEM, "out of memory");
    packet_encode(l->out + l->out_len, size, PACKET_REQ, type, nargs, args, lens);
    l->out_len += size;
    return DSJOB_OK;
}

int
link_queue_raw(struct link *l, const void *buf, size_t len)
{
    if (buf_reserve(&l->out, &l->out_off, &l->out_len, &l->out_cap, len) != DSJOB_OK)
        return link_set_err(l, DSJOB_ERR_NOMEM, "out of memory");
    memcpy(l->out + l->out_len, buf, len);
    l->out_len += len;
    return DSJOB_OK;
}

bool
link_want_write(const struct link *l)
{
    return l->out_off < l->out_len;
}

static int link_tls_write_some(struct link *l);
static int link_tls_read_some(struct link *l);

/* "CODE: text" of an ERROR packet into buf, bytes a terminal should not get as '?'. */
static void
said_format(const struct packet *p, char *buf, size_t cap)
{
    size_t i;

    snprintf(buf, cap, "%.*s: %.*s", (int)(p->nargs > 0 ? p->arg_len[0] : 0),
             p->nargs > 0 ? (const char *)p->arg[0] : "", (int)(p->nargs > 1 ? p->arg_len[1] : 0),
             p->nargs > 1 ? (const char *)p->arg[1] : "");
    for (i = 0; buf[i] != '\0'; i++) {
        if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] == 0x7f)
            buf[i] = '?';
    }
}

/*
 * The server's last word before a close, into buf: the last ERROR among
 * the packets read and not yet taken, else the one link_next returned
 * last if it is recent. Returns false when there is none.
 */
static bool
last_error(const struct link *l, char *buf, size_t cap)
{
    size_t off = l->in_off + l->in_pending;
    bool found = false;

    while (off < l->in_len) {
        struct packet p;
        size_t need = 0;
        const char *why = NULL;

        if (packet_decode(l->in + off, l->in_len - off, LINK_MAX_PACKET, &p, &need, &why) !=
            PACKET_OK)
            break;
        if (p.type == PACKET_ERROR) {
            said_format(&p, buf, cap);
            found = true;
        }
        off += need;
    }
    if (!found && l->said[0] != '\0' && link_now_ms() - l->said_ms <= LINK_SAID_MS) {
        snprintf(buf, cap, "%s", l->said);
        found = true;
    }
    return found;
}

/* The server closed (how: "closed" or "reset") the connection: say so, with its reason. */
static int
link_closed(struct link *l, const char *how)
{
    char why[LINK_SAID_LEN];

    if (last_error(l, why, sizeof(why)))
        return link_set_err(l, DSJOB_ERR_CLOSED, "'%s' %s the connection, saying %s", l->addr, how,
                            why);
    return link_set_err(l, DSJOB_ERR_CLOSED, "'%s' %s the connection", l->addr, how);
}

/*
 * The server closed while we were writing: read, without waiting, what it
 * sent before (most likely an ERROR saying why, such as PACKET_TOO_LARGE,
 * which the kernel keeps after the reset), so that the caller can see it.
 */
static int
link_closed_writing(struct link *l)
{
    (void)link_read_some(l);
    return link_closed(l, "closed");
}

int
link_write_some(struct link *l)
{
    if (l->ssl != NULL)
        return link_tls_write_some(l);
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
            return link_closed_writing(l);
        return link_set_err(l, DSJOB_ERR_SYS, "send to '%s': %s", l->addr, strerror(errno));
    }
    l->out_off = l->out_len = 0;
    return DSJOB_OK;
}

int
link_read_some(struct link *l)
{
    if (l->ssl != NULL)
        return link_tls_read_some(l);
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
            return link_closed(l, "closed");
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return DSJOB_OK;
        if (errno == ECONNRESET)
            return link_closed(l, "reset");
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
        l->said[0] = '\0';
        if (p->type == PACKET_ERROR) {
            said_format(p, l->said, sizeof(l->said));
            l->said_ms = link_now_ms();
        }
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

/*
 * Waits up to deadline for the socket to be readable (or writable, while
 * bytes are queued), then reads what it has: the wait of link_recv and
 * link_recv_some, which write what they can before it.
 */
static int
link_wait_read(struct link *l, int64_t deadline)
{
    int r = link_poll(l, link_want_write(l) ? POLLIN | POLLOUT : POLLIN, deadline);

    return r != DSJOB_OK ? r : link_read_some(l);
}

int
link_recv(struct link *l, struct packet *p, int64_t deadline)
{
    int r;

    if (l->fd < 0)
        return link_set_err(l, DSJOB_ERR_CLOSED, "not connected to '%s'", l->addr);
    for (;;) {
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
        r = link_wait_read(l, deadline);
        /* What came with an end of file is the server's: give it first. */
        if (r != DSJOB_OK)
            return link_next(l, p) > 0 ? DSJOB_OK : r;
    }
}

int
link_recv_some(struct link *l, int64_t deadline)
{
    size_t had;
    int r;

    if (l->fd < 0)
        return link_set_err(l, DSJOB_ERR_CLOSED, "not connected to '%s'", l->addr);
    l->in_off += l->in_pending;
    l->in_pending = 0;
    had = l->in_len - l->in_off;
    for (;;) {
        if (link_want_write(l)) {
            r = link_write_some(l);
            if (r != DSJOB_OK)
                return r;
        }
        r = link_wait_read(l, deadline);
        if (r != DSJOB_OK)
            return r;
        if (l->in_len - l->in_off > had)
            return DSJOB_OK;
    }
}

#ifdef HAVE_OPENSSL

/* OpenSSL's reason for the last failure, or fallback when its queue is empty. */
static const char *
tls_reason(char *buf, size_t len, const char *fallback)
{
    unsigned long e = ERR_get_error();

    if (e == 0)
        snprintf(buf, len, "%s", fallback);
    else
        ERR_error_string_n(e, buf, len);
    ERR_clear_error();
    return buf;
}

struct ssl_ctx_st *
link_tls_new(const char *ca_file, const char *cert_file, const char *key_file, unsigned flags,
             char *err, size_t errlen)
{
    char why[256];
    SSL_CTX *ctx;

    /* libssl is opened here, by the first program's call that asks for TLS. */
    if (ssl_lazy_load(err, errlen) != 0)
        return NULL;
    ERR_clear_error();
    ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        snprintf(err, errlen, "cannot make a TLS context: %s",
                 tls_reason(why, sizeof(why), "out of memory"));
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* The output buffer may move between a blocked SSL_write and its retry. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
    if (ca_file != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
            snprintf(err, errlen, "cannot load CA file '%s': %s", ca_file,
                     tls_reason(why, sizeof(why), "unknown error"));
            goto fail;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        snprintf(err, errlen, "cannot load the system's CA certificates: %s",
                 tls_reason(why, sizeof(why), "unknown error"));
        goto fail;
    }
    if (key_file != NULL && cert_file == NULL) {
        snprintf(err, errlen, "a key file '%s' without a certificate file", key_file);
        goto fail;
    }
    if (cert_file != NULL) {
        if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
            snprintf(err, errlen, "cannot load certificate file '%s': %s", cert_file,
                     tls_reason(why, sizeof(why), "unknown error"));
            goto fail;
        }
        if (key_file == NULL)
            key_file = cert_file;
        if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
            snprintf(err, errlen, "cannot load key file '%s': %s", key_file,
                     tls_reason(why, sizeof(why), "unknown error"));
            goto fail;
        }
        if (SSL_CTX_check_private_key(ctx) != 1) {
            snprintf(err, errlen, "key file '%s' is not the key of certificate file '%s'", key_file,
                     cert_file);
            ERR_clear_error();
            goto fail;
        }
    }
    SSL_CTX_set_verify(ctx, (flags & DSJOB_TLS_NO_VERIFY) ? SSL_VERIFY_NONE : SSL_VERIFY_PEER,
                       NULL);
    return ctx;

fail:
    SSL_CTX_free(ctx);
    return NULL;
}

void
link_tls_free(struct ssl_ctx_st *ctx)
{
    SSL_CTX_free(ctx);
}

int
link_set_tls(struct link *l, struct ssl_ctx_st *ctx, unsigned flags)
{
    if (ctx != NULL)
        SSL_CTX_up_ref(ctx);
    SSL_CTX_free(l->tls);
    l->tls = ctx;
    l->tls_flags = flags;
    return DSJOB_OK;
}

/* The socket BIO's I/O, with MSG_NOSIGNAL on every send. */
static int
bio_send(BIO *b, const char *buf, int len)
{
    ssize_t n;

    BIO_clear_retry_flags(b);
    do
        n = send(BIO_get_fd(b, NULL), buf, (size_t)len, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_write(b);
    return (int)n;
}

static int
bio_recv(BIO *b, char *buf, int len)
{
    ssize_t n;

    BIO_clear_retry_flags(b);
    do
        n = recv(BIO_get_fd(b, NULL), buf, (size_t)len, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_read(b);
    return (int)n;
}

static int
bio_puts(BIO *b, const char *s)
{
    return bio_send(b, s, (int)strlen(s));
}

/* A socket BIO (fd, close flag and controls as BIO_s_socket's) whose sends do not raise SIGPIPE. */
static BIO *
bio_new_nosigpipe(struct link *l)
{
    const BIO_METHOD *base = BIO_s_socket();
    BIO *b;

    l->bio = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                          "dsjob socket");
    if (l->bio == NULL)
        return NULL;
    BIO_meth_set_write(l->bio, bio_send);
    BIO_meth_set_read(l->bio, bio_recv);
    BIO_meth_set_puts(l->bio, bio_puts);
    BIO_meth_set_ctrl(l->bio, BIO_meth_get_ctrl(base));
    BIO_meth_set_create(l->bio, BIO_meth_get_create(base));
    BIO_meth_set_destroy(l->bio, BIO_meth_get_destroy(base));
    b = BIO_new(l->bio);
    if (b != NULL)
        BIO_set_fd(b, l->fd, BIO_NOCLOSE);
    return b;
}

/* Why a session failed: OpenSSL's reason, and the certificate check's when it failed. */
static int
link_tls_err(struct link *l, int err, const char *what, int ssl_err)
{
    char why[256];
    long v = l->ssl != NULL ? SSL_get_verify_result(l->ssl) : X509_V_OK;

    if (ssl_err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
        snprintf(why, sizeof(why), "%s", errno != 0 ? strerror(errno) : "the server closed");
    else
        tls_reason(why, sizeof(why), "unknown error");
    if (v != X509_V_OK)
        return link_set_err(l, err, "%s '%s' failed: %s (server certificate: %s)", what, l->addr,
                            why, X509_verify_cert_error_string(v));
    return link_set_err(l, err, "%s '%s' failed: %s", what, l->addr, why);
}

static int
link_tls_start(struct link *l, const char *host, int64_t deadline)
{
    unsigned char ip[16];
    BIO *b;
    int r, e;

    ERR_clear_error();
    l->ssl = SSL_new(l->tls);
    if (l->ssl == NULL || (b = bio_new_nosigpipe(l)) == NULL)
        return link_set_err(l, DSJOB_ERR_NOMEM, "out of memory");
    SSL_set_bio(l->ssl, b, b);
    if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1) {
        if (!(l->tls_flags & DSJOB_TLS_NO_VERIFY_NAME))
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(l->ssl), host);
    } else {
        SSL_set_tlsext_host_name(l->ssl, host);
        if (!(l->tls_flags & DSJOB_TLS_NO_VERIFY_NAME))
            SSL_set1_host(l->ssl, host);
    }
    for (;;) {
        struct pollfd pfd = {.fd = l->fd};

        errno = 0;
        r = SSL_connect(l->ssl);
        if (r == 1)
            return DSJOB_OK;
        e = SSL_get_error(l->ssl, r);
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
            return link_tls_err(l, DSJOB_ERR_PROTO, "TLS handshake with", e);
        pfd.events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        r = poll(&pfd, 1, link_wait_ms(deadline));
        if (r == 0)
            return link_set_err(l, DSJOB_ERR_TIMEOUT, "TLS handshake with '%s' timed out", l->addr);
        if (r < 0 && errno != EINTR)
            return link_set_err(l, DSJOB_ERR_SYS, "poll: %s", strerror(errno));
    }
}

static void
link_tls_end(struct link *l)
{
    if (l->ssl != NULL) {
        SSL_free(l->ssl); /* no close_notify: the server takes EOF as a close */
        ERR_clear_error();
    }
    l->ssl = NULL;
    BIO_meth_free(l->bio);
    l->bio = NULL;
}

static int
link_tls_write_some(struct link *l)
{
    while (l->out_off < l->out_len) {
        size_t len = l->out_len - l->out_off;
        int n, e;

        ERR_clear_error();
        errno = 0;
        n = SSL_write(l->ssl, l->out + l->out_off, len > INT32_MAX ? INT32_MAX : (int)len);
        if (n > 0) {
            l->out_off += (size_t)n;
            continue;
        }
        e = SSL_get_error(l->ssl, n);
        if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ)
            return DSJOB_OK;
        if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 &&
                                           (errno == 0 || errno == EPIPE || errno == ECONNRESET)))
            return link_closed_writing(l);
        return link_tls_err(l, DSJOB_ERR_PROTO, "TLS write to", e);
    }
    l->out_off = l->out_len = 0;
    return DSJOB_OK;
}

static int
link_tls_read_some(struct link *l)
{
    for (;;) {
        int n, e;

        if (l->in_pending > 0) {
            l->in_off += l->in_pending;
            l->in_pending = 0;
        }
        if (buf_reserve(&l->in, &l->in_off, &l->in_len, &l->in_cap, 16384) != DSJOB_OK)
            return link_set_err(l, DSJOB_ERR_NOMEM, "out of memory");
        ERR_clear_error();
        errno = 0;
        n = SSL_read(l->ssl, l->in + l->in_len,
                     l->in_cap - l->in_len > INT32_MAX ? INT32_MAX : (int)(l->in_cap - l->in_len));
        if (n > 0) {
            l->in_len += (size_t)n;
            continue; /* until OpenSSL holds nothing poll() cannot see */
        }
        e = SSL_get_error(l->ssl, n);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            return DSJOB_OK;
        if (e == SSL_ERROR_ZERO_RETURN ||
            (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && errno == 0))
            return link_closed(l, "closed");
        if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && errno == ECONNRESET)
            return link_closed(l, "reset");
        return link_tls_err(l, DSJOB_ERR_PROTO, "TLS read from", e);
    }
}

#else /* !HAVE_OPENSSL */

struct ssl_ctx_st *
link_tls_new(const char *ca_file, const char *cert_file, const char *key_file, unsigned flags,
             char *err, size_t errlen)
{
    (void)ca_file, (void)cert_file, (void)key_file, (void)flags;
    snprintf(err, errlen, "TLS was not built: install libssl-dev and configure --with-openssl");
    return NULL;
}

void
link_tls_free(struct ssl_ctx_st *ctx)
{
    (void)ctx;
}

int
link_set_tls(struct link *l, struct ssl_ctx_st *ctx, unsigned flags)
{
    (void)l, (void)ctx, (void)flags;
    return DSJOB_OK;
}

static int
link_tls_start(struct link *l, const char *host, int64_t deadline)
{
    (void)host, (void)deadline;
    return link_set_err(l, DSJOB_ERR_ARG, "TLS was not built");
}

static void
link_tls_end(struct link *l)
{
    (void)l;
}

static int
link_tls_write_some(struct link *l)
{
    return link_set_err(l, DSJOB_ERR_ARG, "TLS was not built");
}

static int
link_tls_read_some(struct link *l)
{
    return link_set_err(l, DSJOB_ERR_ARG, "TLS was not built");
}

#endif
