/*
 * TLS for the server's TCP connections, with OpenSSL. The server has one
 * SSL_CTX, made at bind time so that a certificate or key that cannot be
 * loaded stops the start with the file named; each connection has one SSL
 * on its non-blocking socket. The handshake is driven by the connection's
 * own events: SSL_do_handshake asks for a readable or a writable socket
 * and is called again when it is, so a peer that stalls or sends garbage
 * holds only its own connection. After the handshake, reads and writes go
 * through SSL_read and SSL_write; read-ahead stays off, so bytes OpenSSL
 * has not taken stay in the kernel where the read event sees them, and
 * the one record SSL_read may leave half read is asked about with
 * tls_pending. Without OpenSSL every function is a stub.
 */
#include "config.h"
#include "tls.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "conn.h"
#include "srv.h"

#ifdef HAVE_OPENSSL

#include <openssl/err.h>
#include <openssl/ssl.h>

bool
tls_built(void)
{
    return true;
}

/* OpenSSL's reason for the last failure, or fallback when its queue is empty. */
static const char *
tls_reason(char *buf, size_t len, const char *fallback)
{
    unsigned long e = ERR_get_error();
    unsigned long more;

    if (e == 0) {
        snprintf(buf, len, "%s", fallback);
        return buf;
    }
    ERR_error_string_n(e, buf, len);
    while ((more = ERR_get_error()) != 0)
        e = more; /* only the first is said; the rest are dropped with it */
    return buf;
}

int
tls_open(struct srv *srv)
{
    const struct dsjob_server_config *cfg = &srv->cfg;
    char why[256];
    SSL_CTX *ctx;

    if (!cfg->ssl)
        return 0;
    ERR_clear_error();
    ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "--ssl: cannot make a TLS context: %s",
                 tls_reason(why, sizeof(why), "out of memory"));
        return -1;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    /* A peer that closes without close_notify has closed, as on a plain connection. */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
    /* Retries of a blocked write hand in the output buffer's head again, perhaps moved. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg->ssl_certificate) != 1) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "--ssl-certificate: cannot load '%s': %s",
                 cfg->ssl_certificate, tls_reason(why, sizeof(why), "unknown error"));
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, cfg->ssl_key, SSL_FILETYPE_PEM) != 1) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "--ssl-key: cannot load '%s': %s", cfg->ssl_key,
                 tls_reason(why, sizeof(why), "unknown error"));
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        snprintf(srv->errmsg, sizeof(srv->errmsg),
                 "--ssl-key: '%s' is not the key of --ssl-certificate '%s'", cfg->ssl_key,
                 cfg->ssl_certificate);
        goto fail;
    }
    if (cfg->ssl_ca_file != NULL) {
        STACK_OF(X509_NAME) * names;

        if (SSL_CTX_load_verify_locations(ctx, cfg->ssl_ca_file, NULL) != 1) {
            snprintf(srv->errmsg, sizeof(srv->errmsg), "--ssl-ca-file: cannot load '%s': %s",
                     cfg->ssl_ca_file, tls_reason(why, sizeof(why), "unknown error"));
            goto fail;
        }
        /* The CAs a client is told to pick its certificate by. */
        names = SSL_load_client_CA_file(cfg->ssl_ca_file);
        if (names != NULL)
            SSL_CTX_set_client_CA_list(ctx, names);
        ERR_clear_error();
    }
    if (cfg->ssl_verify_client)
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    srv->tls = ctx;
    log_notice(&srv->log, "TLS on TCP connections: certificate %s%s%s", cfg->ssl_certificate,
               cfg->ssl_verify_client ? ", client certificates checked against " : "",
               cfg->ssl_verify_client ? cfg->ssl_ca_file : "");
    return 0;

fail:
    SSL_CTX_free(ctx);
    return -1;
}

void
tls_close(struct srv *srv)
{
    SSL_CTX_free(srv->tls);
    srv->tls = NULL;
}

int
tls_conn_start(struct conn *c)
{
    SSL *ssl = SSL_new(c->srv->tls);

    if (ssl == NULL || SSL_set_fd(ssl, c->fd) != 1) {
        log_err(&c->srv->log, "%s: cannot make a TLS session: out of memory", c->peer);
        SSL_free(ssl);
        ERR_clear_error();
        return -1;
    }
    SSL_set_accept_state(ssl);
    c->ssl = ssl;
    c->tls_handshaking = true;
    return 0;
}

int
tls_handshake(struct conn *c)
{
    char why[256];
    unsigned char first;
    int r, e;

    /*
     * A TLS handshake opens with a handshake record (22). A Gearman packet
     * opens with NUL and an admin line with a letter: a plain client is
     * told so in its own protocol, not left with a TLS alert it cannot read.
     */
    if (SSL_in_before(c->ssl) && recv(c->fd, &first, 1, MSG_PEEK) == 1 && first != 22) {
        log_info(&c->srv->log, "%s: TLS handshake failed: the peer speaks plain %s", c->peer,
                 first == 0 ? "Gearman" : "text");
        return first == 0 ? -2 : -3;
    }
    ERR_clear_error();
    r = SSL_do_handshake(c->ssl);
    if (r == 1) {
        c->tls_handshaking = false;
        c->tls_want_write = false;
        log_info(&c->srv->log, "%s: TLS handshake done: %s, %s", c->peer, SSL_get_version(c->ssl),
                 SSL_get_cipher_name(c->ssl));
        return 1;
    }
    e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        c->tls_want_write = e == SSL_ERROR_WANT_WRITE;
        return 0;
    }
    if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
        snprintf(why, sizeof(why), "%s", errno != 0 ? strerror(errno) : "the peer closed");
    else
        tls_reason(why, sizeof(why), "unknown error");
    if (SSL_get_verify_result(c->ssl) != X509_V_OK)
        log_info(&c->srv->log, "%s: TLS handshake failed: %s (client certificate: %s)", c->peer,
                 why, X509_verify_cert_error_string(SSL_get_verify_result(c->ssl)));
    else
        log_info(&c->srv->log, "%s: TLS handshake failed: %s", c->peer, why);
    return -1;
}

ssize_t
tls_read(struct conn *c, void *buf, size_t len)
{
    char why[256];
    int r, e;

    ERR_clear_error();
    r = SSL_read(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (r > 0)
        return r;
    e = SSL_get_error(c->ssl, r);
    switch (e) {
    case SSL_ERROR_ZERO_RETURN: return 0;
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE: return -2; /* renegotiation is off: only a KeyUpdate's answer */
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0) {
            if (errno == 0)
                return 0; /* closed without close_notify: taken as a close */
            return -1;
        }
        /* fall through */
    default:
        log_info(&c->srv->log, "%s: TLS: %s", c->peer, tls_reason(why, sizeof(why), "error"));
        errno = EPROTO;
        return -1;
    }
}

size_t
tls_pending(const struct conn *c)
{
    int n = SSL_pending(c->ssl);

    return n > 0 ? (size_t)n : 0;
}

ssize_t
tls_write(struct conn *c, const void *buf, size_t len)
{
    char why[256];
    int r, e;

    ERR_clear_error();
    r = SSL_write(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (r > 0)
        return r;
    e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
        errno = EAGAIN;
        return -1;
    }
    if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
        if (errno == 0)
            errno = EPIPE;
        return -1;
    }
    log_info(&c->srv->log, "%s: TLS: %s", c->peer, tls_reason(why, sizeof(why), "error"));
    errno = EPROTO;
    return -1;
}

void
tls_shutdown(struct conn *c)
{
    if (c->ssl == NULL || c->tls_handshaking)
        return;
    ERR_clear_error();
    SSL_shutdown(c->ssl);
    ERR_clear_error();
}

void
tls_conn_free(struct conn *c)
{
    SSL_free(c->ssl);
    c->ssl = NULL;
}

#else /* !HAVE_OPENSSL */

bool
tls_built(void)
{
    return false;
}

int
tls_open(struct srv *srv)
{
    if (!srv->cfg.ssl)
        return 0;
    snprintf(srv->errmsg, sizeof(srv->errmsg),
             "--ssl: TLS was not built: install libssl-dev and configure --with-openssl");
    return -1;
}

void
tls_close(struct srv *srv)
{
    (void)srv;
}

int
tls_conn_start(struct conn *c)
{
    (void)c;
    return -1;
}

int
tls_handshake(struct conn *c)
{
    (void)c;
    return -1;
}

ssize_t
tls_read(struct conn *c, void *buf, size_t len)
{
    (void)c, (void)buf, (void)len;
    errno = EPROTO;
    return -1;
}

size_t
tls_pending(const struct conn *c)
{
    (void)c;
    return 0;
}

ssize_t
tls_write(struct conn *c, const void *buf, size_t len)
{
    (void)c, (void)buf, (void)len;
    errno = EPROTO;
    return -1;
}

void
tls_shutdown(struct conn *c)
{
    (void)c;
}

void
tls_conn_free(struct conn *c)
{
    (void)c;
}

#endif
