/*
 * lazylib: dlopen of a library on first use (lazylib.h says why).
 */
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lazy/lazylib.h"

static struct lazylib *loading; /* the library pthread_once is loading */
static pthread_mutex_t loading_mu = PTHREAD_MUTEX_INITIALIZER;

static void
load_once(void)
{
    struct lazylib *lib = loading;
    void *h = dlopen(lib->soname, RTLD_NOW | RTLD_LOCAL);
    size_t i;

    if (h == NULL) {
        const char *why = dlerror();

        snprintf(lib->err, sizeof(lib->err), "cannot load %s: %s", lib->soname,
                 why != NULL ? why : "dlopen failed");
        return;
    }
    for (i = 0; i < lib->n; i++) {
        void *sym = dlsym(h, lib->names[i]);

        if (sym == NULL) {
            snprintf(lib->err, sizeof(lib->err), "cannot load %s: it has no %s", lib->soname,
                     lib->names[i]);
            dlclose(h);
            return;
        }
        /* POSIX: a dlsym'd function's address fits a function pointer. */
        memcpy(&lib->fns[i], &sym, sizeof(lib->fns[i]));
    }
    /* Release: a thread that reads rc == 0 in lazylib_get sees the fns. */
    __atomic_store_n(&lib->rc, 0, __ATOMIC_RELEASE);
}

int
lazylib_load(struct lazylib *lib, char *err, size_t errlen)
{
    /* pthread_once takes no argument: one load at a time says which. */
    pthread_mutex_lock(&loading_mu);
    loading = lib;
    pthread_once(&lib->once, load_once);
    pthread_mutex_unlock(&loading_mu);
    if (lib->rc != 0 && err != NULL && errlen > 0)
        snprintf(err, errlen, "%s", lib->err);
    return lib->rc;
}

lazylib_fn
lazylib_get(struct lazylib *lib, size_t i)
{
    if (__atomic_load_n(&lib->rc, __ATOMIC_ACQUIRE) != 0 && lazylib_load(lib, NULL, 0) != 0) {
        fprintf(stderr, "dsjob: %s\n", lib->err);
        abort();
    }
    return lib->fns[i];
}
