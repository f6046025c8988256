/*
 * The store contract (tests/unit/store_contract.c) over every durable
 * backend built into this dsjobd. A new backend is one line below, plus
 * its struct store_backend beside the others (tests/unit/backend_*.c).
 * What only one backend has (sqlite's schema version and file modes,
 * memcached's item size and chunk index) stays in t_store_sqlite and
 * t_store_memcached.
 */
#include "config.h"

#include <stddef.h>
#include <sys/stat.h>

#include "store_backends.h"
#include "tap.h"

static const struct store_backend *const backends[] = {
#ifdef HAVE_SQLITE
    &store_backend_sqlite,
#endif
#ifdef HAVE_MEMCACHED
    &store_backend_memcached,
#endif
    NULL,
};

int
main(void)
{
    size_t i;

    umask(022);
    for (i = 0; backends[i] != NULL; i++)
        store_contract_run(backends[i]);
    if (i == 0)
        tap_skip_all("no durable store backend was built");
    return tap_done();
}
