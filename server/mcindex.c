/*
 * The memcached store's index values (see mcindex.h for their layout):
 * the head that names the live chunks, and the chunks, each a list of ids
 * added then removed, cut so that each fits in a memcached item. Encoding
 * and decoding only; store_memcached.c does the reads and writes.
 */
#include "config.h"
#include "mcindex.h"

#include <string.h>

void
mcindex_put_magic(unsigned char *p)
{
    memcpy(p, MCINDEX_MAGIC, MCINDEX_MAGIC_LEN);
    p[MCINDEX_MAGIC_LEN] = MCINDEX_FORMAT_VERSION;
}

int
mcindex_check_magic(const unsigned char *v, size_t len)
{
    if (len < MCINDEX_BODY || memcmp(v, MCINDEX_MAGIC, MCINDEX_MAGIC_LEN) != 0)
        return -1;
    if (v[MCINDEX_MAGIC_LEN] > MCINDEX_FORMAT_VERSION)
        return -2;
    return v[MCINDEX_MAGIC_LEN] == MCINDEX_FORMAT_VERSION ? 0 : -1;
}

void
mcindex_head_encode(unsigned char out[MCINDEX_HEAD_LEN], uint64_t first, uint64_t next)
{
    mcindex_put_magic(out);
    mcindex_put_u64(out + MCINDEX_BODY, first);
    mcindex_put_u64(out + MCINDEX_BODY + 8, next);
}

int
mcindex_head_decode(const unsigned char *v, size_t len, uint64_t *first, uint64_t *next)
{
    int rc = mcindex_check_magic(v, len);

    if (rc != 0)
        return rc;
    if (len != MCINDEX_HEAD_LEN ||
        mcindex_get_u64(v + MCINDEX_BODY) > mcindex_get_u64(v + MCINDEX_BODY + 8))
        return -1;
    *first = mcindex_get_u64(v + MCINDEX_BODY);
    *next = mcindex_get_u64(v + MCINDEX_BODY + 8);
    return 0;
}

size_t
mcindex_chunks(size_t nadd, size_t nrem, size_t per)
{
    size_t total = nadd + nrem;

    return total == 0 ? 1 : (total + per - 1) / per;
}

size_t
mcindex_chunk_encode(unsigned char *buf, const uint64_t *adds, size_t nadd, const uint64_t *removes,
                     size_t nrem, size_t per, size_t k)
{
    size_t total = nadd + nrem, done = k * per, n, na, i;

    n = total - done < per ? total - done : per;
    na = done < nadd ? (nadd - done < n ? nadd - done : n) : 0;
    mcindex_put_magic(buf);
    mcindex_put_u32(buf + MCINDEX_BODY, (uint32_t)na);
    mcindex_put_u32(buf + MCINDEX_BODY + 4, (uint32_t)(n - na));
    for (i = 0; i < n; i++) {
        size_t e = done + i;

        mcindex_put_u64(buf + MCINDEX_CHUNK_HEADER + 8 * i, e < nadd ? adds[e] : removes[e - nadd]);
    }
    return MCINDEX_CHUNK_LEN(n);
}

int
mcindex_chunk_apply(const unsigned char *v, size_t len, struct idset *live)
{
    int rc = mcindex_check_magic(v, len);
    uint32_t nadd, nrem, i;

    if (rc != 0)
        return rc;
    if (len < MCINDEX_CHUNK_HEADER || (len - MCINDEX_CHUNK_HEADER) % 8 != 0 ||
        (len - MCINDEX_CHUNK_HEADER) / 8 !=
            (uint64_t)mcindex_get_u32(v + MCINDEX_BODY) + mcindex_get_u32(v + MCINDEX_BODY + 4))
        return -1;
    nadd = mcindex_get_u32(v + MCINDEX_BODY);
    nrem = mcindex_get_u32(v + MCINDEX_BODY + 4);
    for (i = 0; i < nadd; i++)
        if (idset_add(live, mcindex_get_u64(v + MCINDEX_CHUNK_HEADER + 8 * i)) != 0)
            return -3;
    for (i = nadd; i < nadd + nrem; i++)
        idset_del(live, mcindex_get_u64(v + MCINDEX_CHUNK_HEADER + 8 * i));
    return 0;
}
