/*
 * mc_lazy: the libmemcached functions the memcached store calls, each a
 * call through the address lazylib loaded from MEMCACHED_SONAME on first
 * use, so that dsjobd links no libmemcached (lazy/lazylib.h says why). The
 * library's headers declare them all, so the compiler checks each
 * definition against the real one.
 */
#include "config.h"

#include <libmemcached/memcached.h>

#include "lazy/lazylib.h"
#include "store.h"

/*
 * F(ret, name, params, args) for a function returning ret, V(name, params,
 * args) for one returning nothing. A function the store starts to call goes
 * here too (the link fails until it does).
 */
#define MC_FUNCS(F, V)                                                                             \
    F(memcached_return_t, memcached_behavior_set,                                                  \
      (memcached_st * m, const memcached_behavior_t b, uint64_t d), (m, b, d))                     \
    F(memcached_st *, memcached_create, (memcached_st * m), (m))                                   \
    F(memcached_return_t, memcached_delete,                                                        \
      (memcached_st * m, const char *k, size_t kl, time_t e), (m, k, kl, e))                       \
    F(memcached_result_st *, memcached_fetch_result,                                               \
      (memcached_st * m, memcached_result_st * r, memcached_return_t * e), (m, r, e))              \
    F(memcached_return_t, memcached_flush_buffers, (memcached_st * m), (m))                        \
    V(memcached_free, (memcached_st * m), (m))                                                     \
    F(char *, memcached_get,                                                                       \
      (memcached_st * m, const char *k, size_t kl, size_t *vl, uint32_t *f,                        \
       memcached_return_t *e),                                                                     \
      (m, k, kl, vl, f, e))                                                                        \
    F(int, memcached_last_error_errno, (const memcached_st *m), (m))                               \
    F(const char *, memcached_last_error_message, (const memcached_st *m), (m))                    \
    F(memcached_return_t, memcached_mget,                                                          \
      (memcached_st * m, const char *const *k, const size_t *kl, size_t n), (m, k, kl, n))         \
    F(memcached_result_st *, memcached_result_create,                                              \
      (const memcached_st *m, memcached_result_st *r), (m, r))                                     \
    V(memcached_result_free, (memcached_result_st * r), (r))                                       \
    F(size_t, memcached_result_key_length, (const memcached_result_st *r), (r))                    \
    F(const char *, memcached_result_key_value, (const memcached_result_st *r), (r))               \
    F(size_t, memcached_result_length, (const memcached_result_st *r), (r))                        \
    F(const char *, memcached_result_value, (const memcached_result_st *r), (r))                   \
    F(memcached_return_t, memcached_server_add, (memcached_st * m, const char *h, in_port_t p),    \
      (m, h, p))                                                                                   \
    F(const memcached_instance_st *, memcached_server_by_key,                                      \
      (memcached_st * m, const char *k, size_t kl, memcached_return_t *e), (m, k, kl, e))          \
    F(uint32_t, memcached_server_count, (const memcached_st *m), (m))                              \
    F(memcached_return_t, memcached_server_error_return, (const memcached_instance_st *i), (i))    \
    F(const memcached_instance_st *, memcached_server_get_last_disconnect,                         \
      (const memcached_st *m), (m))                                                                \
    F(const memcached_instance_st *, memcached_server_instance_by_position,                        \
      (const memcached_st *m, uint32_t p), (m, p))                                                 \
    F(uint8_t, memcached_server_major_version, (const memcached_instance_st *i), (i))              \
    F(const char *, memcached_server_name, (const memcached_instance_st *i), (i))                  \
    F(in_port_t, memcached_server_port, (const memcached_instance_st *i), (i))                     \
    F(memcached_return_t, memcached_set,                                                           \
      (memcached_st * m, const char *k, size_t kl, const char *v, size_t vl, time_t e,             \
       uint32_t f),                                                                                \
      (m, k, kl, v, vl, e, f))                                                                     \
    F(memcached_return_t, memcached_stat_execute,                                                  \
      (memcached_st * m, const char *a, memcached_stat_fn fn, void *c), (m, a, fn, c))             \
    F(const char *, memcached_strerror, (const memcached_st *m, memcached_return_t rc), (m, rc))   \
    F(memcached_return_t, memcached_version, (memcached_st * m), (m))

enum { MC_FUNCS(LAZYLIB_INDEX, LAZYLIB_INDEX_V) MC_N };

static const char *const mc_names[MC_N] = {MC_FUNCS(LAZYLIB_NAME, LAZYLIB_NAME_V)};
static lazylib_fn mc_fns[MC_N];
static struct lazylib mc_lib = LAZYLIB_INIT(MEMCACHED_SONAME, mc_names, mc_fns, MC_N);

int
mc_lazy_load(char *err, size_t errlen)
{
    return lazylib_load(&mc_lib, err, errlen);
}

#define LAZYLIB_THIS mc_lib
MC_FUNCS(LAZYLIB_DEFINE, LAZYLIB_DEFINE_V)
