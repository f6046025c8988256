/*
 * What the store backends share and how the server picks one: store_find
 * maps a --store name (ours or gearmand's) to the backend built into this
 * dsjobd, store_say fills a backend's err buffer, store_ids_push grows
 * the array of removes that a failed batch leaves pending, and
 * store_make_dir makes a work directory. The backends
 * themselves live in store_null.c, store_sqlite.c and store_memcached.c.
 */
#include "config.h"
#include "store.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <dsjob/common.h>

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
store_make_dir(const char *dir, char *err)
{
    struct stat sb;
    char *path, *s;
    int rc = DSJOB_OK;

    path = strdup(dir);
    if (path == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "cannot create work directory '%s': out of memory",
                         dir);
    for (s = path + 1; *s != '\0'; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(path, 0750) != 0 && errno != EEXIST)
            goto fail;
        *s = '/';
    }
    if (mkdir(path, 0750) != 0 && errno != EEXIST)
        goto fail;
    if (stat(path, &sb) != 0)
        goto fail;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        goto fail;
    }
    goto free_path;
fail:
    rc = store_say(err, DSJOB_ERR_SYS, "cannot create work directory '%s': %s", dir,
                   strerror(errno));
free_path:
    free(path);
    return rc;
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

void
store_lease_free(struct store_lease *ls)
{
    free(ls->jobs);
    free(ls->held);
    free(ls->mem);
    free(ls->ended);
    free(ls->ended_mem);
    ls->ended = NULL;
    ls->ended_mem = NULL;
    ls->nended = 0;
    ls->jobs = NULL;
    ls->held = NULL;
    ls->mem = NULL;
    ls->njobs = ls->nheld = ls->nreleased = 0;
    ls->renewed = false;
    ls->expiry_ms = -1;
    ls->due_ms = -1;
    free(ls->flows);
    ls->flows = NULL;
    ls->nflows = 0;
    ls->flows_read = false;
    ls->token_ms = -1;
}

int
store_cmp_strs(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
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
        if (mc_lazy_load(err, STORE_ERRLEN) != 0)
            return NULL;
        return &store_memcached_ops;
#else
        snprintf(err, STORE_ERRLEN,
                 "store 'memcached' was not built: install libmemcached-dev and configure "
                 "--with-memcached");
        return NULL;
#endif
    }
    if (strcmp(name, "postgres") == 0 || strcmp(name, "postgresql") == 0 ||
        strcmp(name, "Postgres") == 0) {
#ifdef HAVE_LIBPQ
        if (pq_lazy_load(err, STORE_ERRLEN) != 0)
            return NULL;
        return &store_postgres_ops;
#else
        snprintf(err, STORE_ERRLEN,
                 "store 'postgres' was not built: install libpq-dev and configure --with-postgres");
        return NULL;
#endif
    }
    snprintf(err, STORE_ERRLEN, "unknown store '%s' (none, sqlite, memcached, postgres)", name);
    return NULL;
}
