/*
 * TLS on the Gearman port (--ssl), with OpenSSL. srv.c makes the server's
 * one SSL_CTX at bind time from the certificate, key and CA files; conn.c
 * gives each accepted TCP connection an SSL of its own, drives its
 * handshake from the connection's read and write events, and then reads
 * and writes through tls_read and tls_write into the same evbuffers as a
 * plain connection. Built only with OpenSSL (HAVE_OPENSSL); without it
 * these are stubs and dsjob_server_new refuses --ssl.
 */
#ifndef DSJOB_SERVER_TLS_H
#define DSJOB_SERVER_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct srv;
struct conn;

/* tls_built tells whether this server was built with TLS (OpenSSL). */
bool tls_built(void);

/*
 * tls_open makes srv->tls from srv->cfg (--ssl-certificate, --ssl-key,
 * --ssl-ca-file, --ssl-verify-client): TLS 1.2 at least, no renegotiation.
 * Returns 0, or -1 with srv->errmsg naming the option and the file that
 * failed. Does nothing without cfg.ssl.
 */
int tls_open(struct srv *srv);

/* tls_close frees srv->tls; safe when there is none. */
void tls_close(struct srv *srv);

/*
 * tls_conn_start gives c (accepted, not yet reading) an SSL in the accept
 * state. Returns 0, or -1 (out of memory; logged).
 */
int tls_conn_start(struct conn *c);

/*
 * tls_handshake takes c's handshake one step further, as its socket is
 * ready. Returns 1 when the handshake is done, 0 when it waits for the
 * socket (c->tls_want_write says whether for writing), -1 when it failed
 * (logged at INFO with the peer and OpenSSL's reason; the caller closes c),
 * -2 when the peer's first byte shows a plain Gearman packet, -3 when it
 * shows a plain admin line (logged too; the caller may answer it in its
 * own protocol, then close c).
 */
int tls_handshake(struct conn *c);

/*
 * tls_read reads up to len decrypted bytes into buf. Returns the bytes
 * read, 0 when the peer closed, -1 on an error (errno set; a TLS error is
 * logged with its reason), -2 when nothing can be read now.
 */
ssize_t tls_read(struct conn *c, void *buf, size_t len);

/* tls_pending tells how many decrypted bytes c's SSL holds, unread. */
size_t tls_pending(const struct conn *c);

/*
 * tls_write writes len bytes of buf. Returns the bytes taken, -1 on an
 * error (errno set; EAGAIN when the socket would block), as write(2).
 * A write that blocked must be retried with at least the same bytes.
 */
ssize_t tls_write(struct conn *c, const void *buf, size_t len);

/* tls_shutdown sends close_notify once, without waiting for the peer's. */
void tls_shutdown(struct conn *c);

/* tls_conn_free frees c's SSL; safe when it has none. */
void tls_conn_free(struct conn *c);

#endif
