/*
 * Connections. The read callback is the framing loop: while the input holds
 * a whole packet or admin line, hand it to dispatch or admin, then consume
 * it. The first byte of each message picks the protocol (NUL: a binary
 * packet; anything else: an admin text line), so one connection may carry
 * both, as with gearmand. Reading pauses while the connection's own output
 * is over CONN_PAUSE_OUTPUT bytes and resumes when it drains, so a peer that
 * pipelines requests but does not read replies holds bounded memory; output
 * queued to a peer by others (results, NOOPs) is bounded by
 * --max-output-buffer, past which that peer is dropped with a log line.
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
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "admin.h"
#include "dispatch.h"
#include "proto/textcmd.h"
#include "srv.h"

#define CONN_PAUSE_OUTPUT (1024 * 1024) /* stop reading a peer with this much unsent */
#define CONN_FLUSH_TIMEOUT 5            /* seconds a closing peer gets to read its ERROR */
#define CONN_LINGER_BYTES (1024 * 1024) /* input discarded while closing before we give up */
#define CONN_SMALL_PACKET 4096          /* payloads up to this are encoded in one piece */

static const char *const conn_state_names[] = {
    [CONN_ACTIVE] = "active",
    [CONN_FLUSHING] = "flushing",
    [CONN_CLOSED] = "closed",
};
_Static_assert(sizeof(conn_state_names) / sizeof(conn_state_names[0]) == CONN_STATE_COUNT,
               "a name for every conn_state");

static void conn_read_cb(struct bufferevent *bev, void *arg);
static void conn_write_cb(struct bufferevent *bev, void *arg);
static void conn_event_cb(struct bufferevent *bev, short what, void *arg);
static void conn_linger(struct conn *c);

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
    c->bev = bufferevent_socket_new(srv->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (c->bev == NULL) {
        close(fd);
        free(c);
        return NULL;
    }
    bufferevent_setcb(c->bev, conn_read_cb, NULL, conn_event_cb, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    TAILQ_INSERT_TAIL(&srv->conns, c, link);
    srv->nconns++;
    log_info(&srv->log, "%s: connected (fd %d)", c->peer, fd);
    return c;
}

void
conn_free(struct conn *c)
{
    if (c == NULL)
        return;
    assert(c->state == CONN_CLOSED);
    bufferevent_free(c->bev);
    free(c->client_id);
    free(c);
}

static void
conn_retire(struct conn *c)
{
    struct srv *srv = c->srv;

    conn_set_state(c, CONN_CLOSED);
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
    TAILQ_REMOVE(&srv->conns, c, link);
    srv->nconns--;
    TAILQ_INSERT_TAIL(&srv->closing, c, link);
    srv_schedule_reap(srv);
}

void
conn_close(struct conn *c, bool flush)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);

    if (c->state == CONN_CLOSED)
        return;
    if (c->state == CONN_ACTIVE) {
        log_info(&c->srv->log, "%s: closing", c->peer);
        dispatch_detach(c);
    }
    if (flush && evbuffer_get_length(out) > 0) {
        struct timeval tv = {CONN_FLUSH_TIMEOUT, 0};

        if (c->state == CONN_ACTIVE)
            conn_set_state(c, CONN_FLUSHING);
        bufferevent_disable(c->bev, EV_READ);
        bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
        bufferevent_set_timeouts(c->bev, NULL, &tv);
        bufferevent_setcb(c->bev, NULL, conn_write_cb, conn_event_cb, c);
        bufferevent_enable(c->bev, EV_WRITE);
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
    if (eol.pos < 0) {
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
    const unsigned char *buf = hdr;
    struct packet p;
    enum packet_status st;
    const char *why;
    size_t need;

    evbuffer_copyout(in, hdr, have);
    st = packet_decode(hdr, have, c->srv->cfg.max_packet_size, &p, &need, &why);
    if (st == PACKET_NEED_MORE && need > have) {
        if (avail < need)
            return false;
        buf = evbuffer_pullup(in, (ssize_t)need);
        st = packet_decode(buf, need, c->srv->cfg.max_packet_size, &p, &need, &why);
    }
    switch (st) {
    case PACKET_NEED_MORE:
        return false;
    case PACKET_FATAL:
        if (strcmp(why, "packet too large") == 0) {
            log_notice(&c->srv->log,
                       "%s: %s packet of %u bytes is over --max-packet-size %zu: closing",
                       c->peer, packet_name(p.type), (unsigned)p.size,
                       c->srv->cfg.max_packet_size);
            conn_send_error(c, "PACKET_TOO_LARGE",
                            "packet of %u bytes is over the limit (--max-packet-size %zu)",
                            (unsigned)p.size, c->srv->cfg.max_packet_size);
        } else {
            log_notice(&c->srv->log, "%s: %s: closing", c->peer, why);
            conn_send_error(c, "INVALID_MAGIC", "%s: framing lost, closing", why);
        }
        conn_close(c, true);
        return false;
    case PACKET_BAD:
        log_notice(&c->srv->log, "%s: %s: %s", c->peer, packet_name(p.type), why);
        conn_send_error(c, "INVALID_PACKET", "%s: %s", packet_name(p.type), why);
        break;
    case PACKET_OK:
        dispatch_packet(c, &p);
        break;
    }
    evbuffer_drain(in, need);
    return true;
}

/* Must the next message wait for the answers c is owed? (Keeps c's replies in order.) */
static bool
conn_must_wait(struct conn *c, struct evbuffer *in, unsigned char first, size_t avail)
{
    unsigned char hdr[PACKET_HEADER_SIZE];

    if (first != '\0')
        return storage_must_wait(c, 0);
    if (avail < PACKET_HEADER_SIZE)
        return true; /* its type is not known yet: wait, it costs nothing */
    evbuffer_copyout(in, hdr, sizeof(hdr));
    return storage_must_wait(c, (uint32_t)hdr[4] << 24 | (uint32_t)hdr[5] << 16 |
                                    (uint32_t)hdr[6] << 8 | hdr[7]);
}

static void
conn_process(struct conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    struct evbuffer *out = bufferevent_get_output(c->bev);

    while (c->state == CONN_ACTIVE) {
        size_t avail = evbuffer_get_length(in);
        unsigned char first;

        if (avail == 0)
            break;
        if (evbuffer_get_length(out) > CONN_PAUSE_OUTPUT) {
            /* Wait for the peer to read what it asked for before reading more. */
            c->read_paused = true;
            bufferevent_disable(c->bev, EV_READ);
            bufferevent_setwatermark(c->bev, EV_WRITE, CONN_PAUSE_OUTPUT / 2, 0);
            bufferevent_setcb(c->bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
            break;
        }
        evbuffer_copyout(in, &first, 1);
        if (c->nacks > 0 && conn_must_wait(c, in, first, avail)) {
            c->ack_blocked = true; /* conn_resume picks up from here */
            break;
        }
        if (!(first == '\0' ? conn_read_packet(c, in, avail) : conn_read_line(c, in, avail)))
            break;
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

static void
conn_read_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    conn_process(arg);
}

/* Input that arrives while lingering is read and thrown away. */
static void
conn_discard_cb(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);

    c->lingered += evbuffer_get_length(in);
    evbuffer_drain(in, evbuffer_get_length(in));
    if (c->lingered > CONN_LINGER_BYTES)
        conn_retire(c);
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

    shutdown(c->fd, SHUT_WR);
    bufferevent_disable(c->bev, EV_WRITE);
    bufferevent_setcb(c->bev, conn_discard_cb, NULL, conn_event_cb, c);
    bufferevent_set_timeouts(c->bev, &tv, NULL);
    bufferevent_enable(c->bev, EV_READ);
    conn_discard_cb(c->bev, c);
}

static void
conn_write_cb(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;

    (void)bev;
    if (c->state == CONN_FLUSHING) {
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
            conn_linger(c);
        return;
    }
    if (c->state == CONN_ACTIVE && c->read_paused) {
        c->read_paused = false;
        bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
        bufferevent_setcb(c->bev, conn_read_cb, NULL, conn_event_cb, c);
        bufferevent_enable(c->bev, EV_READ);
        conn_process(c);
    }
}

static void
conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;

    (void)bev;
    if (what & BEV_EVENT_EOF)
        log_info(&c->srv->log, "%s: peer closed", c->peer);
    else if (what & BEV_EVENT_TIMEOUT)
        log_notice(&c->srv->log, "%s: timed out while closing", c->peer);
    else if (what & BEV_EVENT_ERROR)
        log_info(&c->srv->log, "%s: %s", c->peer, strerror(EVUTIL_SOCKET_ERROR()));
    if (c->state == CONN_ACTIVE)
        conn_close(c, false);
    else if (c->state == CONN_FLUSHING)
        conn_retire(c);
}

/* True if c can take more output; drops c (logging which limit) if not. */
static bool
conn_room(struct conn *c, size_t more)
{
    size_t queued;

    if (c->state != CONN_ACTIVE)
        return false;
    queued = evbuffer_get_length(bufferevent_get_output(c->bev));
    if (queued + more > c->srv->cfg.max_output_buffer) {
        log_warn(&c->srv->log,
                 "%s: %zu bytes unread is over --max-output-buffer %zu: dropping the peer",
                 c->peer, queued + more, c->srv->cfg.max_output_buffer);
        conn_close(c, false);
        return false;
    }
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
    out = bufferevent_get_output(c->bev);
    /*
     * Small packets (nearly all) are built in place and added with one
     * call: an evbuffer_add per argument and per NUL was a third of the
     * server's instructions per job (callgrind, bench fg1).
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
        evbuffer_add(bufferevent_get_output(c->bev), data, len);
}

void
conn_printf(struct conn *c, const char *fmt, ...)
{
    va_list ap;

    if (!conn_room(c, 0))
        return;
    va_start(ap, fmt);
    evbuffer_add_vprintf(bufferevent_get_output(c->bev), fmt, ap);
    va_end(ap);
}
