/*
 * ssl_lazy: the OpenSSL functions link.c calls, each a call through the
 * address lazylib loaded from LIBSSL_SONAME on first use, so that
 * libdsjobclient and libdsjobworker link no OpenSSL (lazy/lazylib.h says
 * why). OpenSSL's headers declare them all, so the compiler checks each
 * definition against the real one; the macros link.c uses (SSL_CTX_set_mode,
 * BIO_get_fd, ...) expand to the *_ctrl and *_flags functions defined here.
 */
#include "config.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "lazy/lazylib.h"
#include "link/ssl_lazy.h"

/* The function pointer types some of them take or return. */
typedef int (*bio_create_fn)(BIO *);
typedef int (*bio_destroy_fn)(BIO *);
typedef long (*bio_ctrl_fn)(BIO *, int, long, void *);
typedef int (*bio_puts_fn)(BIO *, const char *);
typedef int (*bio_read_fn)(BIO *, char *, int);
typedef int (*bio_write_fn)(BIO *, const char *, int);

/*
 * F(ret, name, params, args) for a function returning ret, V(name, params,
 * args) for one returning nothing, FREE(name, type) for a free that does
 * nothing to NULL without loading the library (a link without TLS frees its
 * NULL context and session). A function link.c starts to call goes here too
 * (the link fails until it does).
 */
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
#define SSL_FUNCS_3(F) F(uint64_t, SSL_CTX_set_options, (SSL_CTX * c, uint64_t o), (c, o))
#else
#define SSL_FUNCS_3(F) /* a macro over SSL_CTX_ctrl */
#endif
#define SSL_FUNCS(F, V, FREE)                                                                      \
    V(BIO_clear_flags, (BIO * b, int f), (b, f))                                                   \
    F(long, BIO_ctrl, (BIO * b, int c, long l, void *p), (b, c, l, p))                             \
    F(int, BIO_get_new_index, (void), ())                                                          \
    F(long, BIO_int_ctrl, (BIO * b, int c, long l, int i), (b, c, l, i))                           \
    FREE(BIO_meth_free, BIO_METHOD)                                                                \
    F(bio_create_fn, BIO_meth_get_create, (const BIO_METHOD *m), (m))                              \
    F(bio_ctrl_fn, BIO_meth_get_ctrl, (const BIO_METHOD *m), (m))                                  \
    F(bio_destroy_fn, BIO_meth_get_destroy, (const BIO_METHOD *m), (m))                            \
    F(BIO_METHOD *, BIO_meth_new, (int t, const char *n), (t, n))                                  \
    F(int, BIO_meth_set_create, (BIO_METHOD * m, bio_create_fn f), (m, f))                         \
    F(int, BIO_meth_set_ctrl, (BIO_METHOD * m, bio_ctrl_fn f), (m, f))                             \
    F(int, BIO_meth_set_destroy, (BIO_METHOD * m, bio_destroy_fn f), (m, f))                       \
    F(int, BIO_meth_set_puts, (BIO_METHOD * m, bio_puts_fn f), (m, f))                             \
    F(int, BIO_meth_set_read, (BIO_METHOD * m, bio_read_fn f), (m, f))                             \
    F(int, BIO_meth_set_write, (BIO_METHOD * m, bio_write_fn f), (m, f))                           \
    F(BIO *, BIO_new, (const BIO_METHOD *m), (m))                                                  \
    F(const BIO_METHOD *, BIO_s_socket, (void), ())                                                \
    V(BIO_set_flags, (BIO * b, int f), (b, f))                                                     \
    V(ERR_clear_error, (void), ())                                                                 \
    V(ERR_error_string_n, (unsigned long e, char *b, size_t n), (e, b, n))                         \
    F(unsigned long, ERR_get_error, (void), ())                                                    \
    F(unsigned long, ERR_peek_error, (void), ())                                                   \
    F(int, SSL_CTX_check_private_key, (const SSL_CTX *c), (c))                                     \
    F(long, SSL_CTX_ctrl, (SSL_CTX * c, int cmd, long l, void *p), (c, cmd, l, p))                 \
    FREE(SSL_CTX_free, SSL_CTX)                                                                    \
    F(int, SSL_CTX_load_verify_locations, (SSL_CTX * c, const char *f, const char *p), (c, f, p))  \
    F(SSL_CTX *, SSL_CTX_new, (const SSL_METHOD *m), (m))                                          \
    F(int, SSL_CTX_set_default_verify_paths, (SSL_CTX * c), (c))                                   \
    SSL_FUNCS_3(F)                                                                                 \
    V(SSL_CTX_set_verify, (SSL_CTX * c, int m, SSL_verify_cb cb), (c, m, cb))                      \
    F(int, SSL_CTX_up_ref, (SSL_CTX * c), (c))                                                     \
    F(int, SSL_CTX_use_PrivateKey_file, (SSL_CTX * c, const char *f, int t), (c, f, t))            \
    F(int, SSL_CTX_use_certificate_chain_file, (SSL_CTX * c, const char *f), (c, f))               \
    F(int, SSL_connect, (SSL * s), (s))                                                            \
    F(long, SSL_ctrl, (SSL * s, int cmd, long l, void *p), (s, cmd, l, p))                         \
    FREE(SSL_free, SSL)                                                                            \
    F(X509_VERIFY_PARAM *, SSL_get0_param, (SSL * s), (s))                                         \
    F(int, SSL_get_error, (const SSL *s, int r), (s, r))                                           \
    F(long, SSL_get_verify_result, (const SSL *s), (s))                                            \
    F(SSL *, SSL_new, (SSL_CTX * c), (c))                                                          \
    F(int, SSL_read, (SSL * s, void *b, int n), (s, b, n))                                         \
    F(int, SSL_set1_host, (SSL * s, const char *h), (s, h))                                        \
    V(SSL_set_bio, (SSL * s, BIO * r, BIO * w), (s, r, w))                                         \
    F(int, SSL_write, (SSL * s, const void *b, int n), (s, b, n))                                  \
    F(const SSL_METHOD *, TLS_client_method, (void), ())                                           \
    F(int, X509_VERIFY_PARAM_set1_ip_asc, (X509_VERIFY_PARAM * p, const char *ip), (p, ip))        \
    F(const char *, X509_verify_cert_error_string, (long n), (n))

enum { SSL_FUNCS(LAZYLIB_INDEX, LAZYLIB_INDEX_V, LAZYLIB_INDEX_FREE) SSL_N };

static const char *const ssl_names[SSL_N] = {
    SSL_FUNCS(LAZYLIB_NAME, LAZYLIB_NAME_V, LAZYLIB_NAME_FREE)};
static lazylib_fn ssl_fns[SSL_N];
static struct lazylib ssl_lib = LAZYLIB_INIT(LIBSSL_SONAME, ssl_names, ssl_fns, SSL_N);

int
ssl_lazy_load(char *err, size_t errlen)
{
    return lazylib_load(&ssl_lib, err, errlen);
}

#define LAZYLIB_THIS ssl_lib
SSL_FUNCS(LAZYLIB_DEFINE, LAZYLIB_DEFINE_V, LAZYLIB_DEFINE_FREE)
