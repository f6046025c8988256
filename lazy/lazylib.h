/*
 * lazylib: a shared library opened on first use (dlopen) rather than at
 * every start. The server's postgres and memcached stores call libpq and
 * libmemcached, which with what they pull in (Kerberos, LDAP, GnuTLS,
 * libstdc++) were two thirds of the dynamic loader's work at each dsjobd
 * start; the client libraries call OpenSSL, more than half of a dsjob
 * start, for TLS only. A server that keeps its jobs in SQLite or in memory,
 * a client that speaks plain text, never calls them. A NAME_lazy.c file
 * defines the library's functions its module calls, each a call through
 * the pointer loaded here (server/pq_lazy.c, server/mc_lazy.c,
 * link/ssl_lazy.c); the module loads the library before its first call
 * (store_find, link_tls_new), so a missing library is an error that names
 * it, not a failed start of every program. Built into the server and into
 * link (libdslink), hidden in both.
 */
#ifndef DSJOB_LAZYLIB_H
#define DSJOB_LAZYLIB_H

#include <pthread.h>
#include <stddef.h>

/* A library's generic function pointer; cast to its real type to call it. */
typedef void (*lazylib_fn)(void);

struct lazylib {
    const char *soname;       /* what dlopen opens, from configure */
    const char *const *names; /* the n symbols */
    lazylib_fn *fns;          /* their addresses, filled by the load */
    size_t n;
    pthread_once_t once;
    int rc; /* 0 once loaded, else -1 with err */
    char err[256];
};

#define LAZYLIB_INIT(so, names, fns, n)                                                            \
    {                                                                                              \
        (so), (names), (fns), (n), PTHREAD_ONCE_INIT, -1, ""                                       \
    }

/*
 * lazylib_load opens lib and resolves all of its names once (the first
 * call does the work, from any thread). Returns 0, or -1 and copies why
 * ("cannot load libpq.so.5: ...") into err (errlen bytes) when err is not
 * NULL.
 */
int lazylib_load(struct lazylib *lib, char *err, size_t errlen);

/*
 * lazylib_get returns the address of lib's symbol i, loading lib first. A
 * library that cannot be loaded here is a bug (its module loads it before
 * the first call; a test that calls a store directly has it installed): it
 * prints why and aborts.
 */
lazylib_fn lazylib_get(struct lazylib *lib, size_t i);

/*
 * The shapes a NAME_lazy.c file is written in. It lists its functions once,
 * as F(ret, name, params, args), V(name, params, args) for one returning
 * nothing and FREE(name, type) for a free that does nothing to NULL without
 * loading the library; expands the list with LAZYLIB_INDEX* into an enum
 * and with LAZYLIB_NAME* into the names; and, with LAZYLIB_THIS defined as
 * its struct lazylib, with LAZYLIB_DEFINE* into the functions.
 */
#define LAZYLIB_INDEX(ret, name, params, args) LAZYLIB_I_##name,
#define LAZYLIB_INDEX_V(name, params, args) LAZYLIB_I_##name,
#define LAZYLIB_INDEX_FREE(name, type) LAZYLIB_I_##name,
#define LAZYLIB_NAME(ret, name, params, args) #name,
#define LAZYLIB_NAME_V(name, params, args) #name,
#define LAZYLIB_NAME_FREE(name, type) #name,
#define LAZYLIB_DEFINE(ret, name, params, args)                                                    \
    ret name params                                                                                \
    {                                                                                              \
        return ((ret(*) params)lazylib_get(&LAZYLIB_THIS, LAZYLIB_I_##name))args;                  \
    }
#define LAZYLIB_DEFINE_V(name, params, args)                                                       \
    void name params                                                                               \
    {                                                                                              \
        ((void(*) params)lazylib_get(&LAZYLIB_THIS, LAZYLIB_I_##name)) args;                       \
    }
#define LAZYLIB_DEFINE_FREE(name, type)                                                            \
    void name(type *p)                                                                             \
    {                                                                                              \
        if (p != NULL)                                                                             \
            ((void (*)(type *))lazylib_get(&LAZYLIB_THIS, LAZYLIB_I_##name))(p);                   \
    }

#endif
