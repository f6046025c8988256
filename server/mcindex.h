/*
 * The memcached store's index, as bytes: memcached cannot list its keys,
 * so the store writes which job ids exist as numbered chunks, one or more
 * a flush (the ids it added, then those it removed), and a head that
 * names the live range of chunks. This module encodes and decodes those
 * values and replays chunks into an id set; it does no I/O. Every value
 * (of chunks, the head and the job records alike) starts with "dsj" and a
 * format version byte, so that keys of something else under the prefix,
 * or of a newer dsjobd, are refused rather than misread. Integers are
 * little-endian. The job records and the function settings count their
 * format versions apart (JOB_FORMAT_VERSION and FUNCS_FORMAT_VERSION in
 * store_memcached.c, each with its own change procedure); the version
 * here is the head's and the chunks'.
 *
 *   head:  "dsj", version, first (8 bytes), next (8 bytes): chunks
 *          first..next-1 are live.
 *   chunk: "dsj", version, the count of adds and of removes (4 bytes
 *          each), then their ids (8 bytes each), adds first.
 *
 * Changing a layout: bump MCINDEX_FORMAT_VERSION. An older dsjobd then
 * refuses the store (mcindex_check_magic says -2); this one must go on
 * reading the old version, or say how to convert it.
 */
#ifndef DSJOB_SERVER_MCINDEX_H
#define DSJOB_SERVER_MCINDEX_H

#include <stddef.h>
#include <stdint.h>

#include "idset.h"

#define MCINDEX_MAGIC "dsj"
#define MCINDEX_MAGIC_LEN 3
#define MCINDEX_FORMAT_VERSION 1
#define MCINDEX_BODY (MCINDEX_MAGIC_LEN + 1)        /* where a value's fields start */
#define MCINDEX_HEAD_LEN (MCINDEX_BODY + 8 + 8)     /* a head's bytes */
#define MCINDEX_CHUNK_HEADER (MCINDEX_BODY + 4 + 4) /* a chunk's bytes before its ids */
#define MCINDEX_CHUNK_LEN(ids) (MCINDEX_CHUNK_HEADER + 8 * (size_t)(ids)) /* a chunk's bytes */

/* mcindex_put_le writes the n low bytes of v at p, least significant first. */
static inline void
mcindex_put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* mcindex_get_le reads n bytes at p, least significant first. */
static inline uint64_t
mcindex_get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;

    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline void
mcindex_put_u32(unsigned char *p, uint32_t v)
{
    mcindex_put_le(p, v, 4);
}

static inline void
mcindex_put_u64(unsigned char *p, uint64_t v)
{
    mcindex_put_le(p, v, 8);
}

static inline uint32_t
mcindex_get_u32(const unsigned char *p)
{
    return (uint32_t)mcindex_get_le(p, 4);
}

static inline uint64_t
mcindex_get_u64(const unsigned char *p)
{
    return mcindex_get_le(p, 8);
}

/* mcindex_put_magic writes "dsj" and the format version at p (MCINDEX_BODY bytes). */
void mcindex_put_magic(unsigned char *p);

/* mcindex_check_magic: 0 for a value of this format, -2 for a newer one, -1 for anything else. */
int mcindex_check_magic(const unsigned char *v, size_t len);

/* mcindex_head_encode writes the head naming chunks first..next-1 into out. */
void mcindex_head_encode(unsigned char out[MCINDEX_HEAD_LEN], uint64_t first, uint64_t next);

/*
 * mcindex_head_decode reads a head of len bytes into *first and *next:
 * 0, -2 if it is of a newer format, -1 if it is not a head (or first is
 * past next); *first and *next are then untouched.
 */
int mcindex_head_decode(const unsigned char *v, size_t len, uint64_t *first, uint64_t *next);

/*
 * mcindex_chunks is the number of chunks that nadd adds and nrem removes
 * take at per ids a chunk (per > 0): at least one, even for no ids, so
 * that a compaction of an empty set still writes a chunk.
 */
size_t mcindex_chunks(size_t nadd, size_t nrem, size_t per);

/*
 * mcindex_chunk_encode writes chunk k (0 <= k < mcindex_chunks(...)) of
 * the entries adds (nadd ids), then removes (nrem ids), per ids a chunk,
 * into buf, which has room for MCINDEX_CHUNK_LEN(per) bytes, and returns
 * its length. The adds come before the removes across the chunks, so
 * replaying them in order applies a batch's adds first. Arrays borrowed.
 */
size_t mcindex_chunk_encode(unsigned char *buf, const uint64_t *adds, size_t nadd,
                            const uint64_t *removes, size_t nrem, size_t per, size_t k);

/*
 * mcindex_chunk_apply replays the chunk v of len bytes into live: its adds,
 * then its removes. 0; -1 if v is not a chunk and -2 if it is of a newer
 * format (live untouched then); -3 if out of memory (live holds part).
 */
int mcindex_chunk_apply(const unsigned char *v, size_t len, struct idset *live);

#endif
