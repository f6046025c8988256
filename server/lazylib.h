/*
 * lazylib: a shared library the server opens on first use (dlopen) rather
 * than at every start. The postgres store's libpq and the memcached store's
 * libmemcached, with what they pull in (Kerberos, LDAP, GnuTLS, libstdc++),
 * were two thirds of the dynamic loader's work at each dsjobd start, and a
 * server that keeps its jobs in SQLite or in memory never calls them.
 * pq_lazy.c and mc_lazy.c define the library's functions the stores call,
 * each a call through the pointer loaded here; store_find loads the library
 * before it hands out the store, so a missing library is an error that
 * names it, not a failed start of every server.
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
 * library that cannot be loaded here is a bug (store_find loads it before
 * a store runs; a test that calls a store directly has it installed): it
 * prints why and aborts.
 */
lazylib_fn lazylib_get(struct lazylib *lib, size_t i);

/* pq_lazy_load and mc_lazy_load: lazylib_load for libpq and libmemcached. */
int pq_lazy_load(char *err, size_t errlen);
int mc_lazy_load(char *err, size_t errlen);

#endif
