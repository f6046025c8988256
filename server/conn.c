/*
 * Connections. Each has an input and an output evbuffer and two events on
 * its socket: a persistent read event, and a write event added only while
 * the kernel would not take all the output. Replies are not written where
 * they are made: conn_send appends to the output and puts the connection on
 * the server's flush list, and one deferred event writes every listed
 * connection after the callbacks of this loop turn, with one writev each.
 * So a job's JOB_CREATED, the NOOP that wakes a worker and the replies to a
 * burst of pipelined requests leave in as few system calls as possible, and
 * a socket that takes everything never costs an epoll_ctl: write interest
 * is asked for only when the kernel pushes back, not around every packet.
 *
 * The read callback is the framing loop: while the input holds a whole
 * packet or admin line, hand it to dispatch or admin, then consume it. The
 * first byte of each message picks the protocol (NUL: a binary packet;
 * anything else: an admin text line), so one connection may carry both, as
 * with gearmand. Reading pauses while the connection's own output is over
 * CONN_PAUSE_OUTPUT bytes and resumes when it drains, so a peer that
 * pipelines requests but does not read replies holds bounded memory; output
 * queued to a peer by others (results, NOOPs) is bounded by
 * --max-output-buffer, past which that peer is dropped with a log line.
 *
 * With --ssl a TCP connection first does its TLS handshake on the same two
 * events (tls.c), and only then reads; its reads and writes go through
 * tls_read and tls_write instead of readv and writev, into the same
 * evbuffers. A plain connection pays one test of c->ssl for it.
 */
#include "config.h"
#include "conn.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "admin.h"
#include "dispatch.h"
#include "lifecycle.h"
#include "proto/textcmd.h"
#include "srv.h"
#include "tls.h"

#define CONN_PAUSE_OUTPUT (1024 * 1024) /* stop reading a peer with this much unsent */
#define CONN_FLUSH_TIMEOUT 5            /* seconds a closing peer gets to read its ERROR */
#define CONN_LINGER_BYTES (1024 * 1024) /* input discarded while closing before we give up */
#define CONN_SMALL_PACKET 4096          /* payloads up to this are encoded in one piece */
#define CONN_READ_SIZE 16384            /* bytes asked of one read */
#define CONN_TLS_RECORD 16384           /* bytes handed to one SSL_write: a full record */

static const char *const conn_state_names[] = {
    [CONN_ACTIVE] = "active",
    [CONN_FLUSHING] = "flushing",
    [CONN_CLOSED] = "closed",
};
_Static_assert(sizeof(conn_state_names) / sizeof(conn_state_names[0]) == CONN_STATE_COUNT,
               "a name for every conn_state");

static void conn_read_cb(evutil_socket_t fd, short what, void *arg);
static void conn_write_cb(evutil_socket_t fd, short what, void *arg);
static void conn_linger(struct conn *c);
static void conn_retire(struct conn *c);
static void conn_process(struct conn *c);
static void conn_tls_step(struct conn *c);

const char *
conn_state_name(enum conn_state state)
{
    return (unsigned)state < CONN_STATE_COUNT ? conn_state_names[state] : "invalid";
}

void
conn_set_state(struct conn *c, enum conn_state state)
{
    /* States only move forward: active -> flushing -> closed. */
    assert(state > c->state || state == c->state);
    log_debug(&c->srv->log, "%s: %s -> %s", c->peer, conn_state_name(c->state),
              conn_state_name(state));
    c->state = state;
}

static void
conn_describe_peer(struct conn *c, const struct sockaddr *sa)
{
    char ip[INET6_ADDRSTRLEN];
    unsigned port = 0;

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        port = ntohs(in->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
        port = ntohs(in6->sin6_port);
    } else {
        snprintf(c->ip, sizeof(c->ip), "%s", "unix");
        snprintf(c->peer, sizeof(c->peer), "unix:%d", c->fd);
        return;
    }
    snprintf(c->ip, sizeof(c->ip), "%s", ip);
    snprintf(c->peer, sizeof(c->peer), "%s:%u", ip, port);
}

static void
conn_release(struct conn *c)
{
    if (c->rev != NULL)
        event_free(c->rev);
    if (c->wev != NULL)
        event_free(c->wev);
    tls_conn_free(c);
    if (c->in != NULL)
        evbuffer_free(c->in);
    if (c->out != NULL)
        evbuffer_free(c->out);
    close(c->fd);
    free(c->client_id);
    free(c->after);
    free(c->batch);
    free(c);
}

struct conn *
conn_new(struct srv *srv, int fd, const struct sockaddr *sa, socklen_t salen)
{
    struct conn *c = calloc(1, sizeof(*c));

    (void)salen;
    if (c == NULL) {
        close(fd);
        return NULL;
    }
    c->srv = srv;
    c->fd = fd;
    c->state = CONN_ACTIVE;
    queue_worker_init(&c->worker);
    TAILQ_INIT(&c->waiting);
    TAILQ_INIT(&c->acks);
    conn_describe_peer(c, sa);
    c->admin_ok = sa->sa_family == AF_UNIX || srv_admin_allowed(srv, sa);
    c->exceptions = srv->cfg.exceptions;
    c->reject_no_worker = srv->cfg.reject_no_worker;
    c->in = evbuffer_new();
    c->out = evbuffer_new();
    c->rev = event_new(srv->base, fd, EV_READ | EV_PERSIST, conn_read_cb, c);
    c->wev = event_new(srv->base, fd, EV_WRITE | EV_PERSIST, conn_write_cb, c);
    if (c->in == NULL || c->out == NULL || c->rev == NULL || c->wev == NULL) {
        conn_release(c);
        return NULL;
    }
    /*
     * A TLS handshake is bounded by --idle-timeout (conn_sweep_idle), not
     * by a timeout on the read event: libevent would arm that again on
     * every read of the persistent event for the connection's whole life.
     */
    if ((srv->tls != NULL && sa->sa_family != AF_UNIX && tls_conn_start(c) < 0) ||
        event_add(c->rev, NULL) < 0) {
        conn_release(c);
        return NULL;
    }
    if (c->tls_handshaking && srv->cfg.idle_timeout > 0)
        c->partial_since = clock_uptime();
    TAILQ_INSERT_TAIL(&srv->conns, c, link);
    srv->nconns++;
    srv->stats.accepted++;
    log_info(&srv->log, "%s: connected (fd %d)", c->peer, fd);
    return c;
}

void
conn_free(struct conn *c)
{
    if (c == NULL)
        return;
    assert(c->state == CONN_CLOSED);
    conn_release(c);
}

/* Put c on the flush list: its output is written after this turn's callbacks. */
static void
conn_want_flush(struct conn *c)
{
    struct srv *srv = c->srv;

    if (c->flush_queued || c->write_blocked)
        return; /* already listed, or the write event will do it */
    c->flush_queued = true;
    TAILQ_INSERT_TAIL(&srv->flushq, c, flush_link);
    if (TAILQ_FIRST(&srv->flushq) == c)
        event_active(srv->flush_ev, EV_TIMEOUT, 0);
}

static void
conn_unlist(struct conn *c)
{
    if (c->flush_queued) {
        TAILQ_REMOVE(&c->srv->flushq, c, flush_link);
        c->flush_queued = false;
    }
}

/* Hands the head of c's output to SSL_write, a record at most; drains what it took. */
static int
conn_tls_write(struct conn *c, size_t left)
{
    size_t len = left < CONN_TLS_RECORD ? left : CONN_TLS_RECORD;
    unsigned char *head = evbuffer_pullup(c->out, (ssize_t)len);
    ssize_t n;

    if (head == NULL) {
        errno = ENOMEM;
        return -1;
    }
    n = tls_write(c, head, len);
    if (n > 0)
        evbuffer_drain(c->out, (size_t)n);
    return (int)n;
}

/*
 * Write what c owes. Returns false if c was closed (write error). What the
 * kernel would not take waits for the write event; a closing connection
 * whose output is all out goes on to linger; a paused reader resumes once
 * its output is under half the pause mark.
 */
static bool
conn_flush(struct conn *c)
{
    size_t left = evbuffer_get_length(c->out);

    while (left > 0) {
        int n = c->ssl == NULL ? evbuffer_write(c->out, c->fd) : conn_tls_write(c, left);

        if (n > 0)
            c->srv->stats.bytes_out += (uint64_t)n;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            log_info(&c->srv->log, "%s: %s", c->peer, strerror(errno));
            if (c->state == CONN_ACTIVE)
                conn_close(c, false);
            else
                conn_retire(c);
            return false;
        }
        left = evbuffer_get_length(c->out);
    }
    if (left > 0 && !c->write_blocked) {
        struct timeval tv = {CONN_FLUSH_TIMEOUT, 0};

        c->write_blocked = true;
        event_add(c->wev, c->state == CONN_FLUSHING ? &tv : NULL);
    } else if (left == 0 && c->write_blocked) {
        c->write_blocked = false;
        event_del(c->wev);
    }
    if (c->state == CONN_FLUSHING && left == 0) {
        conn_linger(c);
        return true;
    }
    if (c->state == CONN_ACTIVE && c->read_paused && left <= CONN_PAUSE_OUTPUT / 2) {
        c->read_paused = false;
        event_add(c->rev, NULL);
        conn_process(c);
    }
    return true;
}

void
conn_flush_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;
    struct conn *c;

    (void)fd;
    (void)what;
    /*
     * conn_flush may resume a reader whose replies list it again, and a
     * close may wake workers or drop more peers: all go at the tail.
     */
    while ((c = TAILQ_FIRST(&srv->flushq)) != NULL) {
        conn_unlist(c);
        if (c->dropping)
            conn_close(c, false);
        else
            conn_flush(c);
    }
}

static void
conn_write_cb(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    (void)fd;
    if (c->tls_handshaking) {
        conn_tls_step(c);
        return;
    }
    if (what & EV_TIMEOUT) {
        log_notice(&c->srv->log, "%s: timed out while closing", c->peer);
        conn_retire(c);
        return;
    }
    if (!c->dropping) /* conn_flush_cb closes it */
        conn_flush(c);
}

static void
conn_retire(struct conn *c)
{
    struct srv *srv = c->srv;

    if (c->state == CONN_CLOSED)
        return;
    conn_set_state(c, CONN_CLOSED);
    conn_unlist(c);
    event_del(c->rev);
    event_del(c->wev);
    TAILQ_REMOVE(&srv->conns, c, link);
    srv->nconns--;
    TAILQ_INSERT_TAIL(&srv->closing, c, link);
    srv_schedule_reap(srv);
}

void
conn_close(struct conn *c, bool flush)
{
    if (c->state == CONN_CLOSED)
        return;
    if (c->state == CONN_ACTIVE) {
        log_info(&c->srv->log, "%s: closing", c->peer);
        lifecycle_detach(c);
    }
    if (flush && evbuffer_get_length(c->out) > 0) {
        if (c->state == CONN_ACTIVE)
            conn_set_state(c, CONN_FLUSHING);
        event_del(c->rev);
        if (c->write_blocked) {
            struct timeval tv = {CONN_FLUSH_TIMEOUT, 0};

            event_add(c->wev, &tv); /* now with the closing deadline */
        }
        conn_want_flush(c);
        return;
    }
    conn_retire(c);
}

/* Read one admin line, if a whole one is there. Returns false to stop reading. */
static bool
conn_read_line(struct conn *c, struct evbuffer *in, size_t avail)
{
    struct evbuffer_ptr eol;
    size_t eol_len = 0;
    const char *line;

    eol = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
    if (eol.pos < 0 || eol.pos > TEXTCMD_MAX_LINE) {
        /* Too long whether or not its end has been read yet. */
        if (avail > TEXTCMD_MAX_LINE) {
            log_notice(&c->srv->log, "%s: admin line longer than %d bytes", c->peer,
                       TEXTCMD_MAX_LINE);
            conn_printf(c, "ERR LINE_TOO_LONG admin+line+longer+than+%d+bytes\r\n",
                        TEXTCMD_MAX_LINE);
            conn_close(c, true);
        }
        return false;
    }
    line = (const char *)evbuffer_pullup(in, eol.pos + (ssize_t)eol_len);
    c->admin_seen = true;
    admin_line(c, line, (size_t)eol.pos);
    evbuffer_drain(in, (size_t)eol.pos + eol_len);
    return true;
}

/* Read one binary packet, if a whole one is there. Returns false to stop reading. */
static bool
conn_read_packet(struct conn *c, struct evbuffer *in, size_t avail)
{
    unsigned char hdr[PACKET_HEADER_SIZE];
    size_t have = avail < sizeof(hdr) ? avail : sizeof(hdr);
    size_t max = c->srv->cfg.max_packet_size;
    struct packet_header h;
    struct packet p;
    enum packet_status st;
    const char *why;
    size_t need;

    evbuffer_copyout(in, hdr, have);
    switch (packet_decode_header(hdr, have, max, &h)) {
    case PACKET_HEADER_NEED_MORE: return false;
    case PACKET_HEADER_BAD_MAGIC:
        log_notice(&c->srv->log, "%s: bad magic: closing", c->peer);
        conn_send_error(c, "INVALID_MAGIC", "bad magic: framing lost, closing");
        conn_close(c, true);
        return false;
    case PACKET_HEADER_TOO_LARGE:
        log_notice(&c->srv->log, "%s: %s packet of %u bytes is over --max-packet-size %zu: closing",
                   c->peer, packet_name(h.type), (unsigned)h.size, max);
        c->srv->stats.limits[STATS_LIMIT_MAX_PACKET_SIZE]++;
        conn_send_error(c, "PACKET_TOO_LARGE",
                        "packet of %u bytes is over the limit (--max-packet-size %zu)",
                        (unsigned)h.size, max);
        conn_close(c, true);
        return false;
    case PACKET_HEADER_OK: break;
    }
    need = PACKET_HEADER_SIZE + (size_t)h.size;
    if (avail < need)
        return false;
    st = packet_decode(evbuffer_pullup(in, (ssize_t)need), need, max, &p, &need, &why);
    switch (st) {
    case PACKET_NEED_MORE:
    case PACKET_FATAL: /* the header was read above: neither can happen */
        log_err(&c->srv->log, "%s: packet decoder disagrees with its header: closing", c->peer);
        conn_close(c, false);
        return false;
    case PACKET_BAD:
        log_notice(&c->srv->log, "%s: %s: %s", c->peer, packet_name(p.type), why);
        conn_send_error(c, "INVALID_PACKET", "%s: %s", packet_name(p.type), why);
        break;
    case PACKET_OK: dispatch_packet(c, &p); break;
    }
    evbuffer_drain(in, need);
    return true;
}

/* Must the next message wait for the answers c is owed? (Keeps c's replies in order.) */
static bool
conn_must_wait(struct conn *c, struct evbuffer *in, unsigned char first, size_t avail)
{
    unsigned char hdr[PACKET_HEADER_SIZE];
    struct packet_header h;

    if (first != '\0')
        return durable_must_wait(c, 0);
    if (avail < PACKET_HEADER_SIZE)
        return true; /* its type is not known yet: wait, it costs nothing */
    evbuffer_copyout(in, hdr, sizeof(hdr));
    switch (packet_decode_header(hdr, sizeof(hdr), c->srv->cfg.max_packet_size, &h)) {
    case PACKET_HEADER_OK:
    case PACKET_HEADER_TOO_LARGE: return durable_must_wait(c, h.type);
    default: return true; /* its refusal waits its turn too */
    }
}

static void
conn_process(struct conn *c)
{
    struct evbuffer *in = c->in;
    bool consumed = false;

    while (c->state == CONN_ACTIVE && !c->dropping) {
        size_t avail = evbuffer_get_length(in);
        unsigned char first;

        if (avail == 0)
            break;
        if (evbuffer_get_length(c->out) > CONN_PAUSE_OUTPUT) {
            /* Wait for the peer to read what it asked for before reading more. */
            c->read_paused = true;
            event_del(c->rev);
            break;
        }
        evbuffer_copyout(in, &first, 1);
        if (c->nacks > 0 && conn_must_wait(c, in, first, avail)) {
            c->ack_blocked = true; /* conn_resume picks up from here */
            break;
        }
        if (!(first == '\0' ? conn_read_packet(c, in, avail) : conn_read_line(c, in, avail)))
            break;
        consumed = true;
    }
    /* The clock of --idle-timeout starts when an incomplete message is first left over. */
    if (evbuffer_get_length(in) == 0)
        c->partial_since = 0;
    else if (consumed || c->partial_since == 0)
        c->partial_since = c->srv->cfg.idle_timeout > 0 ? clock_uptime() : 0;
}

void
conn_sweep_idle(struct srv *srv, int64_t now)
{
    int64_t limit = (int64_t)srv->cfg.idle_timeout;
    struct conn *c, *next;

    for (c = TAILQ_FIRST(&srv->conns); c != NULL; c = next) {
        next = TAILQ_NEXT(c, link);
        if (c->state != CONN_ACTIVE || c->partial_since == 0)
            continue;
        if (c->read_paused || c->ack_blocked) {
            c->partial_since = now; /* held back by the server, not by the peer */
            continue;
        }
        if (now - c->partial_since < limit)
            continue;
        if (c->tls_handshaking) {
            log_info(&srv->log, "%s: TLS handshake not done in %lld s: closing", c->peer,
                     (long long)(now - c->partial_since));
            conn_close(c, false);
            continue;
        }
        log_notice(&srv->log, "%s: %zu bytes of an incomplete message for %lld s: closing", c->peer,
                   evbuffer_get_length(c->in), (long long)(now - c->partial_since));
        srv->stats.limits[STATS_LIMIT_IDLE_TIMEOUT]++;
        conn_send_error(c, "IDLE_TIMEOUT",
                        "a message stayed incomplete for %lld s (--idle-timeout %u)",
                        (long long)(now - c->partial_since), srv->cfg.idle_timeout);
        conn_close(c, true);
    }
}

void
conn_resume(struct conn *c)
{
    if (!c->ack_blocked || c->state != CONN_ACTIVE)
        return;
    c->ack_blocked = false;
    conn_process(c);
}

/*
 * conn_fill for a TLS connection: SSL_read into the reserved space, each
 * piece in turn, until it is full or nothing more is decrypted now.
 */
static ssize_t
conn_tls_fill(struct conn *c, struct evbuffer_iovec *vec, int nvec)
{
    size_t got = 0;
    int i, used = 0;

    for (i = 0; i < nvec; i++) {
        size_t have = 0;

        while (have < vec[i].iov_len) {
            ssize_t n = tls_read(c, (char *)vec[i].iov_base + have, vec[i].iov_len - have);

            if (n <= 0) {
                if (got + have > 0)
                    break; /* what was read counts; the error or EOF comes back next time */
                evbuffer_commit_space(c->in, vec, 0);
                return n;
            }
            have += (size_t)n;
        }
        vec[i].iov_len = have;
        got += have;
        if (have > 0)
            used = i + 1;
        if (have == 0 || tls_pending(c) == 0)
            break;
    }
    evbuffer_commit_space(c->in, vec, used);
    return (ssize_t)got;
}

/*
 * Read once into the input buffer (no FIONREAD: a fixed-size read into the
 * buffer's own space). Returns the bytes read, 0 at end of file, -1 on an
 * error, or -2 if there was nothing to read after all.
 */
static ssize_t
conn_fill(struct conn *c)
{
    struct evbuffer_iovec vec[2];
    struct iovec iov[2];
    int nvec, i;
    size_t left;
    ssize_t n;

    nvec = evbuffer_reserve_space(c->in, CONN_READ_SIZE, vec, 2);
    if (nvec <= 0)
        return -1;
    if (c->ssl != NULL)
        return conn_tls_fill(c, vec, nvec);
    for (i = 0; i < nvec; i++) {
        iov[i].iov_base = vec[i].iov_base;
        iov[i].iov_len = vec[i].iov_len;
    }
    do
        n = readv(c->fd, iov, nvec);
    while (n < 0 && errno == EINTR);
    if (n <= 0) {
        evbuffer_commit_space(c->in, vec, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return -2;
        return n;
    }
    c->srv->stats.bytes_in += (uint64_t)n;
    left = (size_t)n;
    for (i = 0; i < nvec && left > 0; i++) {
        if (vec[i].iov_len > left)
            vec[i].iov_len = left;
        left -= vec[i].iov_len;
    }
    nvec = i;
    evbuffer_commit_space(c->in, vec, nvec);
    return n;
}

static void
conn_read_cb(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    ssize_t n;

    (void)fd;
    if (c->tls_handshaking) {
        conn_tls_step(c);
        return;
    }
    if (what & EV_TIMEOUT) {
        log_notice(&c->srv->log, "%s: timed out while closing", c->peer);
        conn_retire(c);
        return;
    }
    n = conn_fill(c);
    if (n == -2)
        return;
    if (n <= 0) {
        if (n == 0)
            log_info(&c->srv->log, "%s: peer closed", c->peer);
        else
            log_info(&c->srv->log, "%s: %s", c->peer, strerror(errno));
        if (c->state == CONN_ACTIVE)
            conn_close(c, false);
        else
            conn_retire(c);
        return;
    }
    if (c->lingering) {
        /* Input that arrives while lingering is read and thrown away. */
        c->lingered += (size_t)n;
        evbuffer_drain(c->in, evbuffer_get_length(c->in));
        if (c->lingered > CONN_LINGER_BYTES)
            conn_retire(c);
        return;
    }
    if (c->state == CONN_ACTIVE)
        conn_process(c);
    /* Bytes OpenSSL decrypted and we did not take are not seen by the read event. */
    if (c->ssl != NULL && c->state == CONN_ACTIVE && !c->read_paused && tls_pending(c) > 0)
        event_active(c->rev, EV_READ, 0);
}

/*
 * One step of c's TLS handshake, on either event. Done: reading starts
 * (and the handshake's clock stops). Failed: only c goes.
 */
static void
conn_tls_step(struct conn *c)
{
    int r = tls_handshake(c);

    if (r == -2 || r == -3) {
        /* Said in the clear to a peer that speaks in the clear, in its protocol; then closed. */
        tls_conn_free(c);
        c->tls_handshaking = false;
        event_del(c->wev);
        if (r == -2)
            conn_send_error(c, "TLS_REQUIRED", "this server takes TLS connections only (--ssl)");
        else
            conn_printf(c, "ERR TLS_REQUIRED this+server+takes+TLS+connections+only+(--ssl)\r\n");
        conn_close(c, true);
        return;
    }
    if (r < 0) {
        unsigned char junk[4096];
        int i;

        /*
         * Unread input would make close() send a reset, which can destroy
         * the alert that says why before the peer reads it: take what is
         * there (a few reads at most; this is no place to wait).
         */
        for (i = 0; i < 16 && recv(c->fd, junk, sizeof(junk), MSG_DONTWAIT) > 0; i++)
            ;
        conn_close(c, false);
        return;
    }
    if (r == 0) {
        if (c->tls_want_write)
            event_add(c->wev, NULL);
        else
            event_del(c->wev);
        return;
    }
    event_del(c->wev);
    c->partial_since = 0; /* the handshake's clock stops */
    /* The first request may have come with the handshake's last flight. */
    event_active(c->rev, EV_READ, 0);
}

/*
 * All that was owed has been written: half-close, and read until the peer
 * closes too (or CONN_FLUSH_TIMEOUT passes). Closing a socket with unread
 * input makes the kernel send a reset, which can destroy the ERROR we just
 * sent before the peer reads it; a peer still sending when we gave up on
 * it is exactly the peer that needs to read why.
 */
static void
conn_linger(struct conn *c)
{
    struct timeval tv = {CONN_FLUSH_TIMEOUT, 0};

    if (c->lingering)
        return;
    c->lingering = true;
    tls_shutdown(c);
    shutdown(c->fd, SHUT_WR);
    c->lingered += evbuffer_get_length(c->in);
    evbuffer_drain(c->in, evbuffer_get_length(c->in));
    event_add(c->rev, &tv);
}

/*
 * True if c can take more output. If not, c is marked dropping (logging
 * which limit) and listed for conn_flush_cb, which closes it once the
 * handler that sent has returned: closing here would free waiters, held
 * jobs and acks that the caller is walking.
 */
static bool
conn_room(struct conn *c, size_t more)
{
    struct srv *srv = c->srv;
    size_t queued;

    if (c->state != CONN_ACTIVE || c->dropping)
        return false;
    queued = evbuffer_get_length(c->out);
    if (queued + more > srv->cfg.max_output_buffer) {
        log_warn(&srv->log,
                 "%s: %zu bytes unread is over --max-output-buffer %zu: dropping the peer", c->peer,
                 queued + more, srv->cfg.max_output_buffer);
        srv->stats.limits[STATS_LIMIT_MAX_OUTPUT_BUFFER]++;
        c->dropping = true;
        event_del(c->rev);
        /* Listed even if its write event is armed: a peer that does not read never fires it. */
        if (!c->flush_queued) {
            c->flush_queued = true;
            TAILQ_INSERT_TAIL(&srv->flushq, c, flush_link);
        }
        event_active(srv->flush_ev, EV_TIMEOUT, 0);
        return false;
    }
    conn_want_flush(c);
    return true;
}

void
conn_send(struct conn *c, enum packet_type type, unsigned nargs, const void *const *args,
          const size_t *lens)
{
    size_t size = packet_args_size(nargs, lens);
    unsigned char hdr[PACKET_HEADER_SIZE];
    struct evbuffer *out;
    unsigned i;

    if (!conn_room(c, PACKET_HEADER_SIZE + size))
        return;
    out = c->out;
    /*
     * Small packets (nearly all) are built in place and added with one
     * call, not with an evbuffer_add per argument and per NUL, each with
     * its own buffer bookkeeping: this is on every job's path.
     */
    if (size <= CONN_SMALL_PACKET) {
        unsigned char buf[PACKET_HEADER_SIZE + CONN_SMALL_PACKET];
        size_t n = packet_encode(buf, sizeof(buf), PACKET_RES, type, nargs, args, lens);

        evbuffer_add(out, buf, n);
        return;
    }
    packet_encode_header(hdr, PACKET_RES, type, (uint32_t)size);
    evbuffer_add(out, hdr, sizeof(hdr));
    for (i = 0; i < nargs; i++) {
        if (lens[i] > 0)
            evbuffer_add(out, args[i], lens[i]);
        if (i + 1 < nargs)
            evbuffer_add(out, "", 1);
    }
}

void
conn_send_raw(struct conn *c, enum packet_type type, const void *payload, size_t len)
{
    conn_send(c, type, 1, &payload, &len);
}

void
conn_send_error(struct conn *c, const char *code, const char *fmt, ...)
{
    char text[512];
    const void *args[2];
    size_t lens[2];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    args[0] = code;
    lens[0] = strlen(code);
    args[1] = text;
    lens[1] = (size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1;
    conn_send(c, PACKET_ERROR, 2, args, lens);
}

void
conn_write(struct conn *c, const void *data, size_t len)
{
    if (conn_room(c, len))
        evbuffer_add(c->out, data, len);
}

void
conn_printf(struct conn *c, const char *fmt, ...)
{
    va_list ap;

    if (!conn_room(c, 0))
        return;
    va_start(ap, fmt);
    evbuffer_add_vprintf(c->out, fmt, ap);
    va_end(ap);
}
