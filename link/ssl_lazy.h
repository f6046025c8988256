/*
 * ssl_lazy: the OpenSSL functions link.c calls, opened on first use (lazy/lazylib.h
 * says why): a client or worker that speaks plain text loads no libssl.
 */
#ifndef DSJOB_LINK_SSL_LAZY_H
#define DSJOB_LINK_SSL_LAZY_H

#include <stddef.h>

/*
 * ssl_lazy_load opens libssl (LIBSSL_SONAME, with the libcrypto it needs)
 * once: 0, or -1 with why ("cannot load libssl.so.3: ...") in err (errlen
 * bytes). link_tls_new calls it before any other OpenSSL function; the
 * frees of a NULL (a link that never had TLS) load nothing.
 */
int ssl_lazy_load(char *err, size_t errlen);

#endif
