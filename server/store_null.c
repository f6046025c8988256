/*
 * The "none" store: keeps nothing, so every flush succeeds at once. It
 * lets the server treat persistence as always present.
 */
#include "config.h"
#include "store.h"

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

static int
null_set_func(struct store *st, const struct store_func *sf, char *err)
{
    (void)st, (void)sf, (void)err;
    return DSJOB_OK;
}

static int
null_replay_funcs(struct store *st, store_func_fn *fn, void *arg, char *err)
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
    .name = "none",
    .open = null_open,
    .add = null_add,
    .remove = null_remove,
    .flush = null_flush,
    .replay = null_replay,
    .close = null_close,
    .update = null_add, /* keeps nothing either */
    .set_func = null_set_func,
    .replay_funcs = null_replay_funcs,
};
