/*
 * One allocator for both client libraries however they are bound. Each
 * library is dlopen()ed with RTLD_DEEPBIND, so that it prefers its own
 * definitions to the program's and the other library's, as a library built
 * with -Bsymbolic-functions does. dsjob_set_alloc_funcs is called once,
 * through libdsjobclient; calls into libdsjobworker must then allocate and
 * free through it too, which holds only while dsjob_malloc and dsjob_free
 * have a single definition (libdsjobclient's). This program links neither
 * library, or they would be bound before the dlopen.
 */
#include "config.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dsjob/client.h>
#include <dsjob/worker.h>

#include "tap.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

static long nmalloc; /* allocations through counting_malloc */
static long nfree;   /* frees through counting_free */

static void *
counting_malloc(size_t n)
{
    nmalloc++;
    return malloc(n);
}

static void
counting_free(void *p)
{
    nfree++;
    free(p);
}

/* dlsym for a function: the object pointer copied into a function pointer. */
static void
sym(void *lib, const char *name, void *fnp, size_t size)
{
    void *p = dlsym(lib, name);

    if (p == NULL)
        tap_bail("dlsym %s: %s", name, dlerror());
    memcpy(fnp, &p, size);
}

/* Opens $top_builddir/DIR/.libs/NAME.so, preferring its own symbols. */
static void *
open_lib(const char *top, const char *dir, const char *name)
{
    char path[4096];
    void *h;

    snprintf(path, sizeof(path), "%s/%s/.libs/%s.so", top, dir, name);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (h == NULL)
        tap_bail("dlopen %s: %s", path, dlerror());
    return h;
}

static int
fn_nothing(struct dsjob_job *job, void *user)
{
    (void)job;
    (void)user;
    return DSJOB_WORK_COMPLETE;
}

int
main(void)
{
    const char *top = getenv("top_builddir");
    void *lc, *lw;
    void (*set_alloc_c)(void *(*)(size_t), void (*)(void *));
    void (*set_alloc_w)(void *(*)(size_t), void (*)(void *));
    struct dsjob_client *(*client_new)(void);
    void (*client_free)(struct dsjob_client *);
    int (*client_add)(struct dsjob_client *, const char *);
    struct dsjob_worker *(*worker_new)(void);
    void (*worker_free)(struct dsjob_worker *);
    int (*worker_add)(struct dsjob_worker *, const char *);
    int (*worker_register)(struct dsjob_worker *, const char *, dsjob_worker_fn, void *, int);
    struct dsjob_client *c;
    struct dsjob_worker *w;
    long m0, mc, mw;
    bool ok;

#ifdef UNDER_ASAN
    tap_skip_all("the sanitizer runtime refuses RTLD_DEEPBIND");
#endif
    if (top == NULL)
        top = ".";
    /* libdsjobclient first, as the dynamic linker would load it for the worker anyway. */
    lc = open_lib(top, "libclient", "libdsjobclient");
    lw = open_lib(top, "libworker", "libdsjobworker");
    sym(lc, "dsjob_set_alloc_funcs", &set_alloc_c, sizeof(set_alloc_c));
    sym(lw, "dsjob_set_alloc_funcs", &set_alloc_w, sizeof(set_alloc_w));
    sym(lc, "dsjob_client_new", &client_new, sizeof(client_new));
    sym(lc, "dsjob_client_free", &client_free, sizeof(client_free));
    sym(lc, "dsjob_client_add_server", &client_add, sizeof(client_add));
    sym(lw, "dsjob_worker_new", &worker_new, sizeof(worker_new));
    sym(lw, "dsjob_worker_free", &worker_free, sizeof(worker_free));
    sym(lw, "dsjob_worker_add_server", &worker_add, sizeof(worker_add));
    sym(lw, "dsjob_worker_register", &worker_register, sizeof(worker_register));

    tap_ok(set_alloc_w == set_alloc_c,
           "dsjob_set_alloc_funcs seen from libdsjobworker is libdsjobclient's");

    set_alloc_c(counting_malloc, counting_free);
    c = client_new();
    ok = c != NULL && client_add(c, "127.0.0.1:4730") == DSJOB_OK;
    mc = nmalloc;
    /* dsjob_client_new, then the address and the hash ring of add_server. */
    tap_ok(ok && mc >= 3, "calls into libdsjobclient allocate through the allocator set once (%ld)",
           mc);
    m0 = nmalloc;
    w = worker_new();
    ok = w != NULL && worker_add(w, "127.0.0.1:4730") == DSJOB_OK &&
         worker_register(w, "f", fn_nothing, NULL, 0) == DSJOB_OK;
    mw = nmalloc - m0;
    /* dsjob_worker_new, the server list and its address, the function. */
    tap_ok(ok && mw >= 3, "calls into libdsjobworker allocate through the same allocator (%ld)",
           mw);
    worker_free(w);
    client_free(c);
    tap_is_int(nfree, nmalloc, "each of the %ld allocations of both went back through its free",
               nmalloc);
    set_alloc_c(NULL, NULL);
    dlclose(lw);
    dlclose(lc);
    return tap_done();
}
