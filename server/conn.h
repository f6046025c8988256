/*
 * A connection: a socket with its buffers and events, the framing loop that
 * turns its input into packets and admin lines, and the helpers that write
 * replies. Once an accepted socket is a connection, only conn.c reads or
 * writes it (listener.c sets its options before, and writes the one ERROR
 * of a refusal to a socket it never hands over). A closed connection is
 * detached from every queue at once but freed later, by the server's
 * reaper, so no callback ever runs on freed memory.
 */
#ifndef DSJOB_SERVER_CONN_H
#define DSJOB_SERVER_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/util.h>

#include "job.h"
#include "proto/packet.h"
#include "queue.h"
#include "durable.h"

struct srv;
struct evbuffer;
struct event;
struct ssl_st;

enum conn_state {
    CONN_ACTIVE,   /* reading and writing */
    CONN_FLUSHING, /* closed for reading: sends what it has queued, then goes */
    CONN_CLOSED,   /* detached from everything, waiting for the reaper */
    CONN_STATE_COUNT
};

struct conn {
    struct srv *srv;              /* the server (borrowed) */
    struct evbuffer *in;          /* bytes read and not yet consumed, owned */
    struct evbuffer *out;         /* bytes owed to the peer, owned */
    struct event *rev;            /* persistent read event, owned */
    struct event *wev;            /* write event, added only while write_blocked */
    TAILQ_ENTRY(conn) link;       /* in srv->conns, or srv->closing */
    TAILQ_ENTRY(conn) flush_link; /* in srv->flushq while flush_queued */
    bool flush_queued;            /* output waits for the end of the loop turn */
    bool write_blocked;           /* the kernel took less than all: wev is armed */
    bool lingering;               /* all sent and half-closed: input is discarded */
    struct qworker worker;        /* the queue's view of it as a worker */
    struct waiter_list waiting;   /* foreground jobs it waits for */
    enum conn_state state;        /* see conn_set_state */
    int fd;                       /* the socket, owned (closed when freed) */
    char ip[64];                  /* peer address, as admin "workers" shows it */
    char peer[80];                /* "ip:port", for log lines */
    char *client_id;              /* from SET_CLIENT_ID, or NULL */
    char *batch;                  /* OPTION_REQ batch=ID: its background submits join it; NULL */
    bool exceptions;              /* asked for WORK_EXCEPTION forwarding */
    bool reject_no_worker;        /* its submits for a function no worker can do get ERROR */
    int64_t expire_in_ms;         /* OPTION_REQ expire-in: its new jobs must start within; 0 */
    int64_t deadline_ms;          /* OPTION_REQ deadline: ... by this epoch ms; 0: none */
    char *after;                  /* owned: OPTION_REQ after=, handles for its next submit to
                                     wait for (deps.c), or NULL */
    size_t after_len;             /* bytes of after */
    uint8_t after_fail;           /* OPTION_REQ after-fail=: enum deps_policy */
    bool admin_ok;                /* may run shutdown, cancel, drop, maxqueue */
    bool admin_seen;              /* sent an admin line: counted as an admin connection */
    bool read_paused;             /* input left unread until output drains */
    bool dropping;                /* over --max-output-buffer: closed after this turn's
                                     handler, by conn_flush_cb, never inside a send */
    size_t lingered;              /* input bytes thrown away while closing */
    struct ack_list acks;         /* answers owed once the store commits */
    unsigned nacks;               /* entries in acks but ends: answers owed */
    unsigned nends;               /* entries in acks that note its ends not yet durable */
    unsigned nholds;              /* entries in nacks that answer nothing: they hold a
                                     worker until its last end is durable (durable_held) */
    bool hold_slept;              /* sent PRE_SLEEP while held: it sleeps once the hold ends */
    bool grab_due;                /* held past --store-grab-wait: its grabs get NO_JOB */
    struct event *grab_ev;        /* --store-grab-wait's timer (owned), or NULL */
    bool ack_blocked;             /* input waits until acks are answered */
    int64_t partial_since;        /* monotonic s since which the input ends in the same
                                     incomplete message; 0: it does not */
    struct ssl_st *ssl;           /* its TLS session (owned), NULL on a plain connection */
    bool tls_handshaking;         /* the TLS handshake is not done: no packet is read yet */
    bool tls_want_write;          /* the handshake waits for a writable socket (wev armed) */
};

/*
 * conn_new wraps an accepted socket fd (ownership passes to the conn, even
 * on failure, where fd is closed). Returns NULL on failure.
 */
struct conn *conn_new(struct srv *srv, int fd, const struct sockaddr *sa, socklen_t salen);

/* conn_free frees a CLOSED connection; only the reaper calls it. */
void conn_free(struct conn *c);

/*
 * conn_close detaches c from every job and queue and stops reading. With
 * flush, what is already queued for it is still sent (an ERROR before a
 * close); without, it goes at once. Safe on a connection already closed.
 */
void conn_close(struct conn *c, bool flush);

/*
 * conn_flush_cb writes every connection on srv->flushq (the srv's flush_ev),
 * and closes those a send marked as dropping: a send never closes a
 * connection itself, so no handler sees a waiter, job or ack list change
 * under it.
 */
void conn_flush_cb(evutil_socket_t fd, short what, void *arg);

/*
 * conn_sweep_idle closes, with an ERROR, every connection whose input has
 * ended in the same incomplete packet or admin line for --idle-timeout
 * seconds or more (srv.c calls it once a second). Input the server itself
 * holds back (output over its pause mark, answers owed by the store) does
 * not count against the peer.
 */
void conn_sweep_idle(struct srv *srv, int64_t now);

/* conn_resume reads on after c's owed answers went out (storage.c). */
void conn_resume(struct conn *c);

/* conn_set_state moves c to a new state, asserting the move is legal. */
void conn_set_state(struct conn *c, enum conn_state state);

/* conn_state_name names a state, for log lines. */
const char *conn_state_name(enum conn_state state);

/*
 * conn_send queues a response packet of nargs arguments (copied). A peer
 * that would go over --max-output-buffer gets nothing more and is marked
 * dropping: it is closed after the current callback returns.
 */
void conn_send(struct conn *c, enum packet_type type, unsigned nargs, const void *const *args,
               const size_t *lens);

/* conn_send_raw queues a response packet whose payload is given whole. */
void conn_send_raw(struct conn *c, enum packet_type type, const void *payload, size_t len);

/* conn_send_error queues an ERROR packet: code (e.g. "ERR_QUEUE_FULL") and text. */
void conn_send_error(struct conn *c, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* conn_write queues raw bytes (admin replies). */
void conn_write(struct conn *c, const void *data, size_t len);

/* conn_printf queues formatted text (admin replies). */
void conn_printf(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* conn_of_worker returns the connection a qworker is embedded in. */
static inline struct conn *
conn_of_worker(struct qworker *w)
{
    return (struct conn *)((char *)w - offsetof(struct conn, worker));
}

#endif
