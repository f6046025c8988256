/*
 * One connection from a client or a worker to one job server, shared by
 * libdsjobclient and libdsjobworker: the address, the socket, an output
 * buffer that packets are queued into (so many can be pipelined), and an
 * input buffer that packets are decoded from with the proto codec. The
 * socket is non-blocking once connected; the blocking helpers wait with
 * poll() up to a deadline. Nothing here knows what the packets mean.
 */
#ifndef DSJOB_LINK_LINK_H
#define DSJOB_LINK_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/packet.h"

struct ssl_ctx_st;
struct ssl_st;
struct bio_method_st;

#define LINK_ERR_LEN 256
#define LINK_MAX_PACKET (64u * 1024 * 1024) /* largest packet accepted from a server */
#define LINK_SAID_LEN 160                   /* room for a server's last ERROR in a close's reason */
#define LINK_SAID_MS 10000 /* an ERROR this recent may explain the close that follows it */

struct link {
    char *addr;                /* "host:port", "[v6]:port" or "/path", normalized (owned) */
    int fd;                    /* the socket, or -1 when not connected */
    unsigned char *out;        /* queued bytes not yet written (owned) */
    size_t out_off;            /* bytes of out already written */
    size_t out_len;            /* bytes of out in use */
    size_t out_cap;            /* allocated size of out */
    unsigned char *in;         /* bytes read and not yet consumed (owned) */
    size_t in_off;             /* bytes of in already consumed */
    size_t in_len;             /* bytes of in in use */
    size_t in_cap;             /* allocated size of in */
    size_t in_pending;         /* size of the packet last returned, consumed on the next call */
    bool hello;                /* the owner's per-connection preamble is queued */
    uint8_t hello_wait;        /* answers to the preamble still due */
    bool expire_set;           /* the preamble sends expire_ms (libdsjobclient) */
    int64_t expire_ms;         /* OPTION_REQ expire-in of the client's jobs, 0: none */
    bool batch_set;            /* the preamble sends OPTION_REQ batch= (libdsjobclient) */
    char batch[72];            /* its id, "" to clear */
    char err[LINK_ERR_LEN];    /* why the last call failed */
    char said[LINK_SAID_LEN];  /* "CODE: text" of the ERROR link_next returned last, "" after
                                  any other packet: why the server closes, when it does next */
    int64_t said_ms;           /* link_now_ms() when said was set */
    struct ssl_ctx_st *tls;    /* TLS context for a TCP server (a reference, owned), NULL: plain */
    unsigned tls_flags;        /* DSJOB_TLS_* of the context */
    struct ssl_st *ssl;        /* the TLS session while connected over TLS (owned) */
    struct bio_method_st *bio; /* the session's socket I/O, without SIGPIPE (owned) */
};

/*
 * link_tls_new makes a client TLS context: the server's certificate is
 * checked against ca_file (NULL: the system's CAs) and, unless flags say
 * otherwise, against the name or address the link connects to; cert_file
 * and key_file (both NULL: none; key NULL: in cert_file) are the client's
 * certificate and key. TLS 1.2 at least. Returns the context, or NULL with
 * err naming the file that failed (or saying that TLS was not built).
 */
struct ssl_ctx_st *link_tls_new(const char *ca_file, const char *cert_file, const char *key_file,
                                unsigned flags, char *err, size_t errlen);

/* link_tls_free drops a reference to a context from link_tls_new; NULL is a no-op. */
void link_tls_free(struct ssl_ctx_st *ctx);

/*
 * link_set_tls makes l's later connections to a TCP server use TLS with
 * ctx (a reference is taken; NULL: plain) and flags; a unix socket stays
 * plain. A connection already open is left as it is. Returns DSJOB_OK.
 */
int link_set_tls(struct link *l, struct ssl_ctx_st *ctx, unsigned flags);

/* link_now_ms returns a monotonic clock in milliseconds. */
int64_t link_now_ms(void);

/*
 * link_deadline turns a timeout (ms; negative or 0 means none) into an
 * absolute link_now_ms() deadline, or -1 for none.
 */
int64_t link_deadline(int timeout_ms);

/*
 * link_wait_ms returns how long poll() may wait for a deadline from
 * link_deadline: -1 for none, 0 when it has passed.
 */
int link_wait_ms(int64_t deadline);

/*
 * link_init sets up an unconnected link to addr (borrowed; its normalized
 * form is kept in l->addr, see addr_normalize): "host[:port]",
 * "[v6addr][:port]", a bare IPv6 address, or a path starting with '/' for
 * a unix socket; no port means 4730. Returns DSJOB_ERR_ARG for an address
 * it cannot parse, DSJOB_ERR_NOMEM.
 */
int link_init(struct link *l, const char *addr);

/* link_release closes the socket and frees the buffers and the address. */
void link_release(struct link *l);

/*
 * link_connect connects the socket within connect_ms (<= 0: no limit), and
 * with a TLS context does the handshake within the same time. A
 * connected link returns DSJOB_OK at once. On failure the link stays closed,
 * l->err says why, and the result is DSJOB_ERR_SYS, DSJOB_ERR_TIMEOUT or
 * DSJOB_ERR_NOTFOUND (the host did not resolve), or DSJOB_ERR_PROTO (the
 * TLS handshake failed: l->err has OpenSSL's reason and the certificate's).
 */
int link_connect(struct link *l, int connect_ms);

/* link_close closes the socket and drops every queued and unread byte. */
void link_close(struct link *l);

/*
 * link_queue encodes a REQ packet with nargs arguments (borrowed) and
 * appends it to the output buffer; nothing is written yet. Returns
 * DSJOB_OK, DSJOB_ERR_ARG (the arguments do not fit the 4 GiB - 1 bytes
 * a packet can declare; l->err says so) or DSJOB_ERR_NOMEM.
 */
int link_queue(struct link *l, uint32_t type, unsigned nargs, const void *const *args,
               const size_t *lens);

/*
 * link_queue_raw appends len bytes of a text protocol (an admin command
 * line) to the output buffer as they are. Returns DSJOB_OK or
 * DSJOB_ERR_NOMEM.
 */
int link_queue_raw(struct link *l, const void *buf, size_t len);

/* link_want_write tells whether queued bytes are waiting to be written. */
bool link_want_write(const struct link *l);

/*
 * link_write_some writes what the socket takes now without blocking.
 * Returns DSJOB_OK (possibly with bytes left) or DSJOB_ERR_SYS/CLOSED.
 * When the server has closed, what it sent before (an ERROR saying why,
 * typically) is read into the input buffer for link_next, and l->err
 * quotes that ERROR.
 */
int link_write_some(struct link *l);

/*
 * link_read_some reads what the socket has now without blocking. Returns
 * DSJOB_OK (possibly having read nothing), DSJOB_ERR_CLOSED on EOF (l->err
 * quotes the ERROR the server sent last, if it sent one just before),
 * DSJOB_ERR_SYS, DSJOB_ERR_NOMEM.
 */
int link_read_some(struct link *l);

/*
 * link_next decodes the next whole packet already read. Returns 1 with *p
 * filled (its pointers borrow the input buffer and stay valid until the next
 * call on l), 0 when more bytes are needed, or a negative -DSJOB_ERR_PROTO
 * when the server sent something that is not a packet (l->err says what).
 */
int link_next(struct link *l, struct packet *p);

/*
 * link_flush writes every queued byte, waiting up to deadline (from
 * link_deadline). Returns DSJOB_OK, DSJOB_ERR_TIMEOUT, DSJOB_ERR_SYS or
 * DSJOB_ERR_CLOSED.
 */
int link_flush(struct link *l, int64_t deadline);

/*
 * link_recv flushes, then waits up to deadline for the next packet and
 * returns it in *p as link_next does. Packets read before a failure are
 * returned first. Returns DSJOB_OK, DSJOB_ERR_TIMEOUT, DSJOB_ERR_CLOSED,
 * DSJOB_ERR_SYS, DSJOB_ERR_PROTO, DSJOB_ERR_NOMEM.
 */
int link_recv(struct link *l, struct packet *p, int64_t deadline);

/*
 * link_recv_some flushes, then waits up to deadline until bytes beyond
 * those unread in l->in (from l->in_off to l->in_len) have come, for a
 * caller that reads a text protocol and consumes them itself (by moving
 * l->in_off). Returns DSJOB_OK, DSJOB_ERR_TIMEOUT, DSJOB_ERR_CLOSED,
 * DSJOB_ERR_SYS, DSJOB_ERR_PROTO (TLS), DSJOB_ERR_NOMEM.
 */
int link_recv_some(struct link *l, int64_t deadline);

/*
 * link_set_err formats the reason of the last failure into l->err and
 * returns err unchanged, so that a caller can write return link_set_err(...).
 */
int link_set_err(struct link *l, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
