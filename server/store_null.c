/*
 * The "none" store: keeps nothing, so every flush succeeds at once. It
 * lets the server treat persistence as always present. Also the helpers
 * every backend shares: store_find, store_say, store_ids_push.
 */
#include "config.h"
#include "store.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dsjob/common.h>

struct store {
    int unused; /* a store must be an object; this one has no state */
};

static struct store null_store;

static int
null_open(struct store **out, const struct store_config *cfg, char *err)
{
    (void)cfg;
    (void)err;
    *out = &null_store;
    return DSJOB_OK;
}

static int
null_add(struct store *st, const struct store_job *sj, char *err)
{
    (void)st, (void)sj, (void)err;
    return DSJOB_OK;
}

static int
null_remove(struct store *st, uint64_t id, char *err)
{
    (void)st, (void)id, (void)err;
    return DSJOB_OK;
}

static int
null_flush(struct store *st, char *err)
{
    (void)st, (void)err;
    return DSJOB_OK;
}

static int
null_replay(struct store *st, store_replay_fn *fn, void *arg, char *err)
{
    (void)st, (void)fn, (void)arg, (void)err;
    return DSJOB_OK;
}

static void
null_close(struct store *st)
{
    (void)st;
}

const struct store_ops store_null_ops = {
    .version = STORE_OPS_VERSION,
    .name = "none",
    .open = null_open,
    .add = null_add,
    .remove = null_remove,
    .flush = null_flush,
    .replay = null_replay,
    .close = null_close,
};

int
store_say(char *err, int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, STORE_ERRLEN, fmt, ap);
    va_end(ap);
    return code;
}

int
store_ids_push(uint64_t **ids, size_t *n, size_t *cap, uint64_t id)
{
    if (*n == *cap) {
        size_t more = *cap ? *cap * 2 : 64;
        uint64_t *grown = realloc(*ids, more * sizeof(*grown));

        if (grown == NULL)
            return -1;
        *ids = grown;
        *cap = more;
    }
    (*ids)[(*n)++] = id;
    return 0;
}

const struct store_ops *
store_find(const char *name, char *err)
{
    if (strcmp(name, "none") == 0 || strcmp(name, "builtin") == 0)
        return &store_null_ops;
    if (strcmp(name, "sqlite") == 0 || strcmp(name, "libsqlite3") == 0) {
#ifdef HAVE_SQLITE
        return &store_sqlite_ops;
#else
        snprintf(
            err, STORE_ERRLEN,
            "store 'sqlite' was not built: install libsqlite3-dev and configure --with-sqlite");
        return NULL;
#endif
    }
    if (strcmp(name, "memcached") == 0 || strcmp(name, "libmemcached") == 0) {
#ifdef HAVE_MEMCACHED
        return &store_memcached_ops;
#else
        snprintf(err, STORE_ERRLEN,
                 "store 'memcached' was not built: install libmemcached-dev and configure "
                 "--with-memcached");
        return NULL;
#endif
    }
    snprintf(err, STORE_ERRLEN, "unknown store '%s' (none, sqlite, memcached)", name);
    return NULL;
}
