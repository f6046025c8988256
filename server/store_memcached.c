/*
 * The "memcached" store: background jobs kept in one or more memcached
 * servers through libmemcached, one key per job, plus an index, because
 * memcached cannot list its keys.
 *
 * Not durable like sqlite. memcached keeps everything in memory: it keeps
 * nothing across its own restart, so this store survives a crash or
 * restart of dsjobd, not of memcached. memcached also evicts items when it
 * runs out of memory, and an evicted job is lost: run it with -M (return
 * errors instead of evicting) and enough -m. Changing the server list moves
 * keys between servers (consistent hashing moves only some), and the jobs
 * whose keys moved are lost too. One dsjobd per prefix: nothing stops two
 * from sharing one, and they would overwrite each other's index.
 *
 * Keys, under the prefix P (--memcached-prefix, default "dsjob"):
 *
 *   P:job:<id>    one job record: every field of struct store_job,
 *                 length-prefixed (see encode_job), format version first.
 *                 An update rewrites it whole.
 *   P:batch:<n>   an index chunk: the ids one flush added, then the ids it
 *                 removed. Replaying chunks first..next-1 in order (adds,
 *                 then removes, chunk by chunk) gives the live ids.
 *   P:head        the range of live chunks: first and next.
 *   P:funcs       every function's settings (set_func), in one value that
 *                 a flush rewrites whole (see encode_funcs).
 *
 * The index values are encoded by mcindex.c, and the live ids are kept in
 * an idset (idset.c); this file does the memcached I/O and the records.
 *
 * A flush writes the function settings if they changed, its job keys (adds
 * and updates), then its chunk(s) at number next, then the head with next
 * moved past them, so it costs O(batch), never O(queue).
 * Chunks pile up one per flush, so the store keeps the live ids in memory
 * and now and then rewrites them as fresh chunks after the old ones
 * (compaction, O(queue) but amortized over at least as many entries), then
 * the head, then deletes the old chunks; at open it does the same once.
 * Every value is written with expiration 0 (never). The live ids cost
 * about 16 bytes a job of dsjobd's memory; replay holds every record in
 * memory at once to sort it, since memcached has no order of its own.
 *
 * When a server fails, flush fails naming it and libmemcached does not try
 * it again for about RETRY_TIMEOUT_S seconds (flushes fail at once
 * meanwhile); then it reconnects, and the next flush works, carrying the
 * removes of the failed batches.
 */
#include "config.h"
#include "store.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libmemcached/memcached.h>

#include <dsjob/common.h>

#include "idset.h"
#include "mcindex.h"

/* Every value starts with "dsj" and a format version byte: see mcindex.h. */
#define MAGIC_LEN MCINDEX_MAGIC_LEN
#define FORMAT_VERSION MCINDEX_FORMAT_VERSION
#define BODY MCINDEX_BODY /* where a value's fields start */
#define DEFAULT_PREFIX "dsjob"
#define MAX_PREFIX 200                 /* memcached keys are at most 250 bytes */
#define DEFAULT_ITEM_MAX (1024 * 1024) /* memcached -I, if stats do not say */
/*
 * memcached stores a value with a header (48 bytes), its CAS (8), the key
 * and a terminator, flags and "\r\n"; a value is refused when all of that
 * exceeds the item size. This rounds the extra bytes up.
 */
#define ITEM_OVERHEAD 96
#define CONNECT_TIMEOUT_MS 1000
#define IO_TIMEOUT_MS 1000
#define RETRY_TIMEOUT_S 1 /* a failed server is tried again after this */
#define MGET_KEYS 500     /* keys per multi-get */
#define COMPACT_CHUNKS 64 /* compact only once this many chunks are live */

/*
 * A job record's format version, its own (the head and chunks have
 * MCINDEX_FORMAT_VERSION): 1 had no lifecycle fields, 2 added them. The
 * layouts are at encode_job. Changing one: bump JOB_FORMAT_VERSION, add
 * the new layout's sizes below, make encode_job write only the newest and
 * decode_job read every version up to it (the fields an older record lacks
 * get the values a job had before they existed), and add the old layout to
 * test_old_format in t_store_memcached.c. An older dsjobd then refuses the
 * store at its first record of the new version, naming the key.
 */
#define JOB_FORMAT_VERSION 2
#define JOB_HEADER_V1 (BODY + 8 + 8 + 8 + 4 + 1)           /* id, seq, when, prio, flag */
#define JOB_HEADER (JOB_HEADER_V1 + 1 + 4 + 8 + 8 + 4 + 4) /* v2: then the lifecycle */
#define JOB_FIELDS_V1 5                                    /* handle, func, unique, reducer, data */
#define JOB_FIELDS 6                                       /* v2: then result */
/* The function settings' format version (encode_funcs); the same rule applies. */
#define FUNCS_FORMAT_VERSION 1
#define FUNCS_HEADER (BODY + 4) /* P:funcs's bytes before its functions */
#define FUNC_ENTRY 16 /* a function's fixed bytes in P:funcs: three settings, name length */

/* A job key the open batch writes: a new job's record, or a stored job's new one. */
struct pending_write {
    uint64_t id; /* the job's id */
    char *rec;   /* its record, malloc()ed */
    size_t len;  /* bytes in rec */
    bool update; /* a rewrite of a stored job: no index entry, never deleted on failure */
};

/* A function's settings as set_func last gave them. */
struct mc_func {
    char *name;               /* malloc()ed, name_len bytes */
    size_t name_len;          /* its bytes */
    uint32_t retries;         /* struct store_func's */
    uint32_t backoff_base_ms; /* struct store_func's */
    uint32_t backoff_max_ms;  /* struct store_func's */
};

struct store {
    memcached_st *mc;             /* the client, connected on first use */
    char *servers;                /* cfg->servers, for messages */
    char *prefix;                 /* key prefix */
    size_t item_max;              /* memcached's item size (smallest of the servers) */
    size_t chunk_ids;             /* ids per chunk, so a chunk fits in an item */
    uint64_t first;               /* the head: the first live chunk */
    uint64_t next;                /* the head: the next chunk number */
    struct idset live;            /* ids the index holds, as of the last good head */
    uint64_t since_compact;       /* index entries written since the last compaction */
    bool live_short;              /* an id did not fit in live (no memory): never compact */
    struct pending_write *writes; /* the open batch's job keys, adds and updates */
    size_t nwrites, writes_cap;   /* how many, room */
    struct idset pending;         /* the ids in writes, each there once */
    struct mc_func *funcs;        /* every function's settings, as stored once flushed */
    size_t nfuncs, funcs_cap;     /* how many, room */
    size_t funcs_len;             /* bytes of their encoded P:funcs value */
    bool funcs_dirty;             /* funcs changed since P:funcs was last written */
    uint64_t *removes;            /* ids removed since the last good head */
    size_t nremoves, removes_cap; /* how many, room */
};

/* Test seam, declared again in t_store_memcached.c. */
int store_memcached_test_chunk_ids(struct store *st, size_t n);

/* ---- keys and messages ---- */

static size_t
key_head(const struct store *st, char *key)
{
    return (size_t)snprintf(key, MEMCACHED_MAX_KEY, "%s:head", st->prefix);
}

static size_t
key_chunk(const struct store *st, uint64_t n, char *key)
{
    return (size_t)snprintf(key, MEMCACHED_MAX_KEY, "%s:batch:%" PRIu64, st->prefix, n);
}

static size_t
key_job(const struct store *st, uint64_t id, char *key)
{
    return (size_t)snprintf(key, MEMCACHED_MAX_KEY, "%s:job:%" PRIu64, st->prefix, id);
}

static size_t
key_funcs(const struct store *st, char *key)
{
    return (size_t)snprintf(key, MEMCACHED_MAX_KEY, "%s:funcs", st->prefix);
}

/* server_of names the server that holds key, as host:port, into buf. */
static const char *
server_of(struct store *st, const char *key, size_t keylen, char *buf, size_t size)
{
    const memcached_instance_st *in;
    memcached_return_t rc;

    in = memcached_server_by_key(st->mc, key, keylen, &rc);
    if (in == NULL)
        return st->servers;
    snprintf(buf, size, "%s:%u", memcached_server_name(in), (unsigned)memcached_server_port(in));
    return buf;
}

/* server_failed names the server of the last failure, for ops that touch several. */
static const char *
server_failed(struct store *st, char *buf, size_t size)
{
    const memcached_instance_st *in = memcached_server_get_last_disconnect(st->mc);

    if (in == NULL)
        return st->servers;
    snprintf(buf, size, "%s:%u", memcached_server_name(in), (unsigned)memcached_server_port(in));
    return buf;
}

/* reason is libmemcached's word for rc, in lower case, with the errno behind it if any. */
static const char *
reason(struct store *st, memcached_return_t rc, char *buf, size_t size)
{
    int errnum = memcached_last_error_errno(st->mc);
    size_t i;

    if (errnum != 0 && rc != MEMCACHED_E2BIG && rc != MEMCACHED_NOTSTORED)
        snprintf(buf, size, "%s (%s)", memcached_strerror(st->mc, rc), strerror(errnum));
    else
        snprintf(buf, size, "%s", memcached_strerror(st->mc, rc));
    for (i = 0; buf[i] != '\0'; i++)
        buf[i] = (char)tolower((unsigned char)buf[i]);
    return buf;
}

/* fail_on says what failed on the server holding key, and returns DSJOB_ERR_STORE. */
static int
fail_on(struct store *st, char *err, const char *what, const char *key, size_t keylen,
        memcached_return_t rc)
{
    char server[300], why[300];

    return store_say(err, DSJOB_ERR_STORE, "cannot %s memcached server '%s': %s", what,
                     server_of(st, key, keylen, server, sizeof(server)),
                     reason(st, rc, why, sizeof(why)));
}

/* ---- records ---- */

static size_t
job_len(const struct store_job *sj)
{
    return JOB_HEADER + JOB_FIELDS * 4 + sj->handle_len + sj->func_len + sj->unique_len +
           sj->reducer_len + sj->data_len + sj->result_len;
}

/* fields_fit says whether every byte field's length fits the record's 4 bytes. */
static bool
fields_fit(const struct store_job *sj)
{
    return sj->handle_len <= UINT32_MAX && sj->func_len <= UINT32_MAX &&
           sj->unique_len <= UINT32_MAX && sj->reducer_len <= UINT32_MAX &&
           sj->data_len <= UINT32_MAX && sj->result_len <= UINT32_MAX;
}

static unsigned char *
put_field(unsigned char *p, const void *bytes, size_t len)
{
    mcindex_put_u32(p, (uint32_t)len);
    if (len > 0)
        memcpy(p + 4, bytes, len);
    return p + 4 + len;
}

/*
 * encode_job lays a job out as version 2: "dsj" and the version (1 byte),
 * id, seq, when (8 bytes each), prio (4), unique_is_data (1), state (1),
 * attempts (4), first_fail, last_fail (8 each), numerator, denominator (4
 * each), then handle, func, unique, reducer, data and result, each as a
 * 4-byte length and its bytes. Version 1 stopped after unique_is_data and
 * after data: no lifecycle fields, no result. Integers are little-endian.
 * The head is "dsj", version, first, next; a chunk is "dsj", version, the
 * count of adds and of removes (4 bytes each), then their ids (8 bytes
 * each), adds first (mcindex.h).
 */
static void
encode_job(const struct store_job *sj, unsigned char *p)
{
    memcpy(p, MCINDEX_MAGIC, MAGIC_LEN);
    p[MAGIC_LEN] = JOB_FORMAT_VERSION;
    mcindex_put_u64(p + BODY, sj->id);
    mcindex_put_u64(p + BODY + 8, sj->seq);
    mcindex_put_u64(p + BODY + 16, (uint64_t)sj->when);
    mcindex_put_u32(p + BODY + 24, (uint32_t)sj->prio);
    p[BODY + 28] = sj->unique_is_data ? 1 : 0;
    p[JOB_HEADER_V1] = (unsigned char)sj->state;
    mcindex_put_u32(p + JOB_HEADER_V1 + 1, sj->attempts);
    mcindex_put_u64(p + JOB_HEADER_V1 + 5, (uint64_t)sj->first_fail);
    mcindex_put_u64(p + JOB_HEADER_V1 + 13, (uint64_t)sj->last_fail);
    mcindex_put_u32(p + JOB_HEADER_V1 + 21, sj->numerator);
    mcindex_put_u32(p + JOB_HEADER_V1 + 25, sj->denominator);
    p += JOB_HEADER;
    p = put_field(p, sj->handle, sj->handle_len);
    p = put_field(p, sj->func, sj->func_len);
    p = put_field(p, sj->unique, sj->unique_len);
    p = put_field(p, sj->reducer, sj->reducer_len);
    p = put_field(p, sj->data, sj->data_len);
    put_field(p, sj->result, sj->result_len);
}

/*
 * decode_job is encode_job backwards, for every version up to this one's;
 * sj points into rec. A version 1 record is a live job that never failed.
 * -1 if rec is not a record, -2 if newer.
 */
static int
decode_job(const unsigned char *rec, size_t len, struct store_job *sj)
{
    const void *field[JOB_FIELDS] = {"", "", "", "", "", ""};
    size_t flen[JOB_FIELDS] = {0}, off, nfields, i;
    int version;

    if (len < BODY || memcmp(rec, MCINDEX_MAGIC, MAGIC_LEN) != 0)
        return -1;
    version = rec[MAGIC_LEN];
    if (version > JOB_FORMAT_VERSION)
        return -2;
    if (version < 1)
        return -1;
    off = version == 1 ? JOB_HEADER_V1 : JOB_HEADER;
    nfields = version == 1 ? JOB_FIELDS_V1 : JOB_FIELDS;
    if (len < off)
        return -1;
    for (i = 0; i < nfields; i++) {
        if (len - off < 4)
            return -1;
        flen[i] = mcindex_get_u32(rec + off);
        off += 4;
        if (len - off < flen[i])
            return -1;
        field[i] = flen[i] > 0 ? (const void *)(rec + off) : "";
        off += flen[i];
    }
    if (off != len)
        return -1;
    memset(sj, 0, sizeof(*sj));
    sj->id = mcindex_get_u64(rec + BODY);
    sj->seq = mcindex_get_u64(rec + BODY + 8);
    sj->when = (int64_t)mcindex_get_u64(rec + BODY + 16);
    sj->prio = (int)(int32_t)mcindex_get_u32(rec + BODY + 24);
    sj->unique_is_data = rec[BODY + 28] != 0;
    sj->state = STORE_LIVE;
    if (version >= 2) {
        sj->state = rec[JOB_HEADER_V1];
        sj->attempts = mcindex_get_u32(rec + JOB_HEADER_V1 + 1);
        sj->first_fail = (int64_t)mcindex_get_u64(rec + JOB_HEADER_V1 + 5);
        sj->last_fail = (int64_t)mcindex_get_u64(rec + JOB_HEADER_V1 + 13);
        sj->numerator = mcindex_get_u32(rec + JOB_HEADER_V1 + 21);
        sj->denominator = mcindex_get_u32(rec + JOB_HEADER_V1 + 25);
    }
    sj->handle = field[0], sj->handle_len = flen[0];
    sj->func = field[1], sj->func_len = flen[1];
    sj->unique = field[2], sj->unique_len = flen[2];
    sj->reducer = field[3], sj->reducer_len = flen[3];
    sj->data = field[4], sj->data_len = flen[4];
    sj->result = field[5], sj->result_len = flen[5];
    return 0;
}

/*
 * The function settings, P:funcs: "dsj", FUNCS_FORMAT_VERSION (1 byte),
 * the count of functions (4 bytes), then per function retries,
 * backoff_base_ms, backoff_max_ms and the name's length (4 bytes each),
 * and the name's bytes. One value for all functions, so that one set
 * replaces them all at once: a crash leaves the old settings or the new,
 * never some of each. Changing it: as for a job record (JOB_FORMAT_VERSION).
 */
static void
encode_funcs(const struct store *st, unsigned char *p)
{
    size_t i;

    memcpy(p, MCINDEX_MAGIC, MAGIC_LEN);
    p[MAGIC_LEN] = FUNCS_FORMAT_VERSION;
    mcindex_put_u32(p + BODY, (uint32_t)st->nfuncs);
    p += FUNCS_HEADER;
    for (i = 0; i < st->nfuncs; i++) {
        const struct mc_func *f = &st->funcs[i];

        mcindex_put_u32(p, f->retries);
        mcindex_put_u32(p + 4, f->backoff_base_ms);
        mcindex_put_u32(p + 8, f->backoff_max_ms);
        p = put_field(p + 12, f->name, f->name_len);
    }
}

/* func_put sets (or, all zero, forgets) name's settings in st->funcs: 0, or -1 out of memory. */
static int
func_put(struct store *st, const struct store_func *sf)
{
    bool forget = sf->retries == 0 && sf->backoff_base_ms == 0 && sf->backoff_max_ms == 0;
    struct mc_func *f = NULL, *grown;
    size_t i, cap;

    for (i = 0; i < st->nfuncs; i++)
        if (st->funcs[i].name_len == sf->name_len &&
            memcmp(st->funcs[i].name, sf->name, sf->name_len) == 0)
            f = &st->funcs[i];
    if (f == NULL && forget)
        return 0;
    if (f != NULL && forget) {
        st->funcs_len -= FUNC_ENTRY + f->name_len;
        free(f->name);
        *f = st->funcs[--st->nfuncs]; /* order does not matter */
        return 0;
    }
    if (f == NULL) {
        if (st->nfuncs == st->funcs_cap) {
            cap = st->funcs_cap ? st->funcs_cap * 2 : 8;
            grown = realloc(st->funcs, cap * sizeof(*grown));
            if (grown == NULL)
                return -1;
            st->funcs = grown;
            st->funcs_cap = cap;
        }
        f = &st->funcs[st->nfuncs];
        f->name = malloc(sf->name_len + 1);
        if (f->name == NULL)
            return -1;
        if (sf->name_len > 0)
            memcpy(f->name, sf->name, sf->name_len);
        f->name_len = sf->name_len;
        st->nfuncs++;
        st->funcs_len += FUNC_ENTRY + f->name_len;
    }
    f->retries = sf->retries;
    f->backoff_base_ms = sf->backoff_base_ms;
    f->backoff_max_ms = sf->backoff_max_ms;
    return 0;
}

/*
 * decode_funcs fills st->funcs from a P:funcs value: 0; -1 if it is not
 * one, -2 if it is newer, -3 if out of memory.
 */
static int
decode_funcs(struct store *st, const unsigned char *v, size_t len)
{
    struct store_func sf;
    size_t off = FUNCS_HEADER;
    uint32_t n, i;

    if (len < BODY || memcmp(v, MCINDEX_MAGIC, MAGIC_LEN) != 0)
        return -1;
    if (v[MAGIC_LEN] > FUNCS_FORMAT_VERSION)
        return -2;
    if (v[MAGIC_LEN] < 1 || len < off)
        return -1;
    n = mcindex_get_u32(v + BODY);
    for (i = 0; i < n; i++) {
        if (len - off < FUNC_ENTRY)
            return -1;
        memset(&sf, 0, sizeof(sf));
        sf.retries = mcindex_get_u32(v + off);
        sf.backoff_base_ms = mcindex_get_u32(v + off + 4);
        sf.backoff_max_ms = mcindex_get_u32(v + off + 8);
        sf.name_len = mcindex_get_u32(v + off + 12);
        off += FUNC_ENTRY;
        if (len - off < sf.name_len)
            return -1;
        sf.name = (const char *)v + off;
        off += sf.name_len;
        if (func_put(st, &sf) != 0)
            return -3;
    }
    return off == len ? 0 : -1;
}

/* ---- the head and the chunks ---- */

/* read_head reads the head into st->first and st->next; no head is an empty store. */
static int
read_head(struct store *st, char *err)
{
    char key[MEMCACHED_MAX_KEY], server[300];
    memcached_return_t rc;
    size_t keylen = key_head(st, key), len;
    uint32_t flags;
    unsigned char *v;
    int ret = DSJOB_OK;

    v = (unsigned char *)memcached_get(st->mc, key, keylen, &len, &flags, &rc);
    if (rc == MEMCACHED_NOTFOUND) {
        st->first = st->next = 1;
        return DSJOB_OK;
    }
    if (rc != MEMCACHED_SUCCESS)
        return fail_on(st, err, "read the index from", key, keylen, rc);
    server_of(st, key, keylen, server, sizeof(server));
    switch (mcindex_head_decode(v, len, &st->first, &st->next)) {
    case 0: break;
    case -2:
        ret =
            store_say(err, DSJOB_ERR_STORE,
                      "cannot open memcached store: key '%s' on server '%s' has format version %u, "
                      "newer than this dsjobd's %d",
                      key, server, v[MAGIC_LEN], FORMAT_VERSION);
        break;
    default:
        ret = store_say(err, DSJOB_ERR_STORE,
                        "cannot open memcached store: key '%s' on server '%s' is not a dsjob index",
                        key, server);
    }
    free(v);
    return ret;
}

/* write_head sets the head to first, next: the step that makes a batch visible. */
static int
write_head(struct store *st, uint64_t first, uint64_t next, char *err)
{
    unsigned char v[MCINDEX_HEAD_LEN];
    char key[MEMCACHED_MAX_KEY];
    size_t keylen = key_head(st, key);
    memcached_return_t rc;

    mcindex_head_encode(v, first, next);
    rc = memcached_set(st->mc, key, keylen, (const char *)v, sizeof(v), 0, 0);
    if (rc != MEMCACHED_SUCCESS)
        return fail_on(st, err, "write the index to", key, keylen, rc);
    return DSJOB_OK;
}

/*
 * write_chunks writes the index entries adds (nadd ids) then removes (nrem
 * ids) as chunks numbered from st->next, as many as it takes for each to
 * fit in an item, and says how many in *count. Adds all come before
 * removes, so replaying the chunks in order applies a batch's adds first.
 */
static int
write_chunks(struct store *st, const uint64_t *adds, size_t nadd, const uint64_t *removes,
             size_t nrem, uint64_t *count, char *err)
{
    char key[MEMCACHED_MAX_KEY];
    size_t n = mcindex_chunks(nadd, nrem, st->chunk_ids), k, len, keylen;
    memcached_return_t rc;
    unsigned char *buf;

    buf = malloc(MCINDEX_CHUNK_LEN(st->chunk_ids));
    if (buf == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "cannot write to memcached store: out of memory");
    for (k = 0; k < n; k++) {
        len = mcindex_chunk_encode(buf, adds, nadd, removes, nrem, st->chunk_ids, k);
        keylen = key_chunk(st, st->next + k, key);
        rc = memcached_set(st->mc, key, keylen, (const char *)buf, len, 0, 0);
        if (rc != MEMCACHED_SUCCESS) {
            free(buf);
            return fail_on(st, err, "write the index to", key, keylen, rc);
        }
    }
    free(buf);
    *count = n;
    return DSJOB_OK;
}

/* apply_chunk replays one chunk into st->live: its adds, then its removes. */
static int
apply_chunk(struct store *st, const unsigned char *v, size_t len, const char *key, char *err)
{
    char server[300];

    switch (mcindex_chunk_apply(v, len, &st->live)) {
    case 0: return DSJOB_OK;
    case -3: return store_say(err, DSJOB_ERR_NOMEM, "cannot open memcached store: out of memory");
    case -2:
        return store_say(
            err, DSJOB_ERR_STORE,
            "cannot open memcached store: key '%s' on server '%s' has format version %u, "
            "newer than this dsjobd's %d",
            key, server_of(st, key, strlen(key), server, sizeof(server)), v[MAGIC_LEN],
            FORMAT_VERSION);
    default:
        return store_say(
            err, DSJOB_ERR_STORE,
            "cannot open memcached store: key '%s' on server '%s' is not a dsjob index chunk", key,
            server_of(st, key, strlen(key), server, sizeof(server)));
    }
}

/* mget_start asks for n keys (made by mk from nums) in one round trip. */
static memcached_return_t
mget_start(struct store *st, const uint64_t *nums, size_t n,
           size_t (*mk)(const struct store *, uint64_t, char *), char (*keys)[MEMCACHED_MAX_KEY],
           const char **kp, size_t *kl)
{
    size_t i;

    for (i = 0; i < n; i++) {
        kl[i] = mk(st, nums[i], keys[i]);
        kp[i] = keys[i];
    }
    return memcached_mget(st->mc, kp, kl, n);
}

/* Scratch for multi-gets. */
struct mget_buf {
    char (*keys)[MEMCACHED_MAX_KEY];
    const char **kp;
    size_t *kl;
    uint64_t *nums;
};

static int
mget_buf_init(struct mget_buf *b)
{
    b->keys = malloc(MGET_KEYS * sizeof(*b->keys));
    b->kp = malloc(MGET_KEYS * sizeof(*b->kp));
    b->kl = malloc(MGET_KEYS * sizeof(*b->kl));
    b->nums = malloc(MGET_KEYS * sizeof(*b->nums));
    return b->keys && b->kp && b->kl && b->nums ? 0 : -1;
}

static void
mget_buf_release(struct mget_buf *b)
{
    free(b->keys), free(b->kp), free(b->kl), free(b->nums);
}

/* mget_fail reports a failed multi-get, naming the server that failed. */
static int
mget_fail(struct store *st, char *err, const char *what, memcached_return_t rc)
{
    char server[300], why[300];

    return store_say(err, DSJOB_ERR_STORE, "cannot %s memcached server '%s': %s", what,
                     server_failed(st, server, sizeof(server)), reason(st, rc, why, sizeof(why)));
}

/*
 * load_index rebuilds st->live from the chunks the head names, MGET_KEYS
 * at a time. The replies of one multi-get come in any order, so they are
 * kept by number and applied in order. A missing chunk (evicted, or lost
 * with a server) is skipped: its adds are lost, and jobs it removed may
 * come back, which at-least-once allows.
 */
static int
load_index(struct store *st, char *err)
{
    memcached_result_st result, *res;
    memcached_return_t rc;
    struct mget_buf b;
    unsigned char **vals = NULL;
    size_t *lens = NULL, n, i, k;
    uint64_t at;
    int ret = DSJOB_OK;

    vals = calloc(MGET_KEYS, sizeof(*vals));
    lens = calloc(MGET_KEYS, sizeof(*lens));
    if (mget_buf_init(&b) != 0 || vals == NULL || lens == NULL ||
        memcached_result_create(st->mc, &result) == NULL) {
        ret = store_say(err, DSJOB_ERR_NOMEM, "cannot open memcached store: out of memory");
        goto free_bufs;
    }
    for (at = st->first; at < st->next && ret == DSJOB_OK; at += n) {
        n = st->next - at < MGET_KEYS ? (size_t)(st->next - at) : MGET_KEYS;
        for (i = 0; i < n; i++)
            b.nums[i] = at + i;
        rc = mget_start(st, b.nums, n, key_chunk, b.keys, b.kp, b.kl);
        if (rc != MEMCACHED_SUCCESS) {
            ret = mget_fail(st, err, "read the index from", rc);
            break;
        }
        while ((res = memcached_fetch_result(st->mc, &result, &rc)) != NULL) {
            const char *key = memcached_result_key_value(res);
            size_t keylen = memcached_result_key_length(res);
            for (k = 0; k < n; k++) {
                if (vals[k] == NULL && b.kl[k] == keylen && memcmp(b.kp[k], key, keylen) == 0)
                    break;
            }
            if (k == n)
                continue; /* not asked for */
            lens[k] = memcached_result_length(res);
            vals[k] = malloc(lens[k] + 1);
            if (vals[k] == NULL) {
                ret = store_say(err, DSJOB_ERR_NOMEM, "cannot open memcached store: out of memory");
                continue; /* drain the replies */
            }
            memcpy(vals[k], memcached_result_value(res), lens[k]);
        }
        if (ret == DSJOB_OK && rc != MEMCACHED_END && rc != MEMCACHED_NOTFOUND &&
            rc != MEMCACHED_SUCCESS)
            ret = mget_fail(st, err, "read the index from", rc);
        for (k = 0; k < n; k++) {
            if (ret == DSJOB_OK && vals[k] != NULL)
                ret = apply_chunk(st, vals[k], lens[k], b.keys[k], err);
            free(vals[k]);
            vals[k] = NULL;
        }
    }
    memcached_result_free(&result);
free_bufs:
    mget_buf_release(&b);
    free(vals);
    free(lens);
    return ret;
}

/* load_funcs reads P:funcs into st->funcs; no key is no settings. */
static int
load_funcs(struct store *st, char *err)
{
    char key[MEMCACHED_MAX_KEY], server[300];
    memcached_return_t rc;
    size_t keylen = key_funcs(st, key), len;
    uint32_t flags;
    unsigned char *v;
    int ret = DSJOB_OK;

    st->funcs_len = FUNCS_HEADER;
    v = (unsigned char *)memcached_get(st->mc, key, keylen, &len, &flags, &rc);
    if (rc == MEMCACHED_NOTFOUND)
        return DSJOB_OK;
    if (rc != MEMCACHED_SUCCESS)
        return fail_on(st, err, "read function settings from", key, keylen, rc);
    server_of(st, key, keylen, server, sizeof(server));
    switch (decode_funcs(st, v, len)) {
    case 0: break;
    case -3:
        ret = store_say(err, DSJOB_ERR_NOMEM, "cannot open memcached store: out of memory");
        break;
    case -2:
        ret =
            store_say(err, DSJOB_ERR_STORE,
                      "cannot open memcached store: key '%s' on server '%s' has format version %u, "
                      "newer than this dsjobd's %d",
                      key, server, v[MAGIC_LEN], FUNCS_FORMAT_VERSION);
        break;
    default:
        ret = store_say(err, DSJOB_ERR_STORE,
                        "cannot open memcached store: key '%s' on server '%s' is not a dsjob "
                        "function settings record",
                        key, server);
    }
    free(v);
    return ret;
}

/* write_funcs sets P:funcs to every function's settings, waiting for the reply. */
static int
write_funcs(struct store *st, char *err)
{
    char key[MEMCACHED_MAX_KEY];
    size_t keylen = key_funcs(st, key);
    memcached_return_t rc;
    unsigned char *v;

    v = malloc(st->funcs_len);
    if (v == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "cannot flush memcached store: out of memory");
    encode_funcs(st, v);
    rc = memcached_set(st->mc, key, keylen, (const char *)v, st->funcs_len, 0, 0);
    free(v);
    if (rc != MEMCACHED_SUCCESS)
        return fail_on(st, err, "write function settings to", key, keylen, rc);
    st->funcs_dirty = false;
    return DSJOB_OK;
}

/*
 * delete_quietly deletes keys without waiting for replies (noreply,
 * buffered): for garbage that nothing refers to any more, so a delete that
 * does not land only costs memory in memcached.
 */
static void
delete_quietly(struct store *st, size_t (*mk)(const struct store *, uint64_t, char *),
               const uint64_t *nums, size_t n, uint64_t from, uint64_t to)
{
    char key[MEMCACHED_MAX_KEY];
    size_t keylen, i;
    uint64_t k;

    memcached_behavior_set(st->mc, MEMCACHED_BEHAVIOR_NOREPLY, 1);
    memcached_behavior_set(st->mc, MEMCACHED_BEHAVIOR_BUFFER_REQUESTS, 1);
    for (i = 0; nums != NULL && i < n; i++) {
        keylen = mk(st, nums[i], key);
        (void)memcached_delete(st->mc, key, keylen, 0);
    }
    for (k = from; k < to; k++) {
        keylen = mk(st, k, key);
        (void)memcached_delete(st->mc, key, keylen, 0);
    }
    (void)memcached_flush_buffers(st->mc);
    memcached_behavior_set(st->mc, MEMCACHED_BEHAVIOR_BUFFER_REQUESTS, 0);
    memcached_behavior_set(st->mc, MEMCACHED_BEHAVIOR_NOREPLY, 0);
}

/*
 * compact rewrites the live ids as fresh chunks after the old ones, points
 * the head at them, and deletes the old chunks. Until the head is written
 * the old chunks are the index, so a failure (or a crash) anywhere leaves
 * a good one; it is best effort, and a failure only means it runs again.
 */
static void
compact(struct store *st)
{
    char err[STORE_ERRLEN];
    uint64_t *ids, count = 0, old_first = st->first, old_next = st->next;

    if (st->live_short)
        return;
    ids = idset_list(&st->live);
    if (ids == NULL)
        return;
    if (write_chunks(st, ids, idset_count(&st->live), NULL, 0, &count, err) == DSJOB_OK &&
        write_head(st, st->next, st->next + count, err) == DSJOB_OK) {
        st->first = st->next;
        st->next += count;
        st->since_compact = 0;
        delete_quietly(st, key_chunk, NULL, 0, old_first, old_next);
    }
    free(ids);
}

/* ---- open ---- */

static int
bad_servers(char *err, const char *servers, const char *why)
{
    return store_say(err, DSJOB_ERR_ARG,
                     "invalid --memcached-servers '%s': %s (want host:port,...)",
                     servers ? servers : "", why);
}

/*
 * add_servers parses "host:port,host:port" (a missing port is 11211,
 * "[v6]:port" brackets an IPv6 address) into the client's server list.
 */
static int
add_servers(memcached_st *mc, const char *servers, char *err)
{
    char host[256];
    const char *p = servers, *end, *colon, *h;
    size_t hlen;
    long port;
    char *stop;

    if (servers == NULL || servers[0] == '\0')
        return bad_servers(err, servers, "no servers given");
    for (;;) {
        while (*p == ' ')
            p++;
        end = strchr(p, ',');
        if (end == NULL)
            end = p + strlen(p);
        while (end > p && end[-1] == ' ')
            end--;
        h = p;
        if (*p == '[') {
            h = p + 1;
            colon = memchr(p, ']', (size_t)(end - p));
            if (colon == NULL)
                return bad_servers(err, servers, "unclosed '['");
            hlen = (size_t)(colon - h);
            colon++;
            if (colon != end && *colon != ':')
                return bad_servers(err, servers, "junk after ']'");
            if (colon == end)
                colon = NULL;
        } else {
            colon = memchr(p, ':', (size_t)(end - p));
            hlen = (size_t)((colon ? colon : end) - p);
        }
        if (hlen == 0)
            return bad_servers(err, servers, "empty host");
        if (hlen >= sizeof(host))
            return bad_servers(err, servers, "host name too long");
        memcpy(host, h, hlen);
        host[hlen] = '\0';
        if (strpbrk(host, " \t,:") != NULL && *p != '[')
            return bad_servers(err, servers, "bad host");
        port = MEMCACHED_DEFAULT_PORT;
        if (colon != NULL) {
            errno = 0;
            port = strtol(colon + 1, &stop, 10);
            if (colon + 1 == end || stop != end || errno != 0 || port < 1 || port > 65535)
                return bad_servers(err, servers, "bad port");
        }
        if (memcached_server_add(mc, host, (in_port_t)port) != MEMCACHED_SUCCESS)
            return bad_servers(err, servers, memcached_last_error_message(mc));
        while (*end == ' ')
            end++;
        if (*end == '\0')
            break;
        p = end + 1; /* past the comma */
        if (*p == '\0')
            return bad_servers(err, servers, "trailing ','");
    }
    return DSJOB_OK;
}

static int
check_prefix(const char *prefix, char *err)
{
    const char *p;

    if (strlen(prefix) > MAX_PREFIX)
        return store_say(err, DSJOB_ERR_ARG, "invalid --memcached-prefix: longer than %d bytes",
                         MAX_PREFIX);
    for (p = prefix; *p != '\0'; p++)
        if (*p <= ' ' || *p >= 0x7f)
            return store_say(
                err, DSJOB_ERR_ARG,
                "invalid --memcached-prefix '%s': memcached keys cannot hold spaces or "
                "control characters",
                prefix);
    return DSJOB_OK;
}

/* check_servers asks every server for its version, and names the first that does not answer. */
static int
check_servers(struct store *st, char *err)
{
    const memcached_instance_st *in;
    memcached_return_t rc;
    uint32_t i;
    char why[300];

    rc = memcached_version(st->mc);
    for (i = 0; i < memcached_server_count(st->mc); i++) {
        in = memcached_server_instance_by_position(st->mc, i);
        if (in == NULL || memcached_server_major_version(in) != UINT8_MAX)
            continue;
        if (rc == MEMCACHED_SUCCESS)
            rc = MEMCACHED_CONNECTION_FAILURE;
        return store_say(err, DSJOB_ERR_STORE,
                         "cannot open memcached store: server '%s:%u' does not answer: %s",
                         memcached_server_name(in), (unsigned)memcached_server_port(in),
                         reason(st,
                                memcached_server_error_return(in) != MEMCACHED_SUCCESS
                                    ? memcached_server_error_return(in)
                                    : rc,
                                why, sizeof(why)));
    }
    if (rc != MEMCACHED_SUCCESS)
        return store_say(err, DSJOB_ERR_STORE, "cannot open memcached store on '%s': %s",
                         st->servers, reason(st, rc, why, sizeof(why)));
    return DSJOB_OK;
}

static memcached_return_t
item_size_cb(const memcached_instance_st *in, const char *key, size_t keylen, const char *value,
             size_t valuelen, void *arg)
{
    struct store *st = arg;
    char num[32];
    unsigned long long v;

    (void)in;
    if (keylen == 13 && memcmp(key, "item_size_max", 13) == 0 && valuelen < sizeof(num)) {
        memcpy(num, value, valuelen);
        num[valuelen] = '\0';
        v = strtoull(num, NULL, 10);
        if (v > ITEM_OVERHEAD + MEMCACHED_MAX_KEY && (st->item_max == 0 || v < st->item_max))
            st->item_max = (size_t)v;
    }
    return MEMCACHED_SUCCESS;
}

/* learn_item_size reads item_size_max (memcached -I) from every server; 1 MiB if none say. */
static void
learn_item_size(struct store *st)
{
    st->item_max = 0;
    (void)memcached_stat_execute(st->mc, "settings", item_size_cb, st);
    if (st->item_max == 0)
        st->item_max = DEFAULT_ITEM_MAX;
    st->chunk_ids = (st->item_max - ITEM_OVERHEAD - MEMCACHED_MAX_KEY - MCINDEX_CHUNK_HEADER) / 8;
}

static void
free_store(struct store *st)
{
    size_t i;

    for (i = 0; i < st->nwrites; i++)
        free(st->writes[i].rec);
    free(st->writes);
    free(st->removes);
    idset_release(&st->live);
    idset_release(&st->pending);
    for (i = 0; i < st->nfuncs; i++)
        free(st->funcs[i].name);
    free(st->funcs);
    if (st->mc != NULL)
        memcached_free(st->mc);
    free(st->servers);
    free(st->prefix);
    free(st);
}

static int
mc_open(struct store **out, const struct store_config *cfg, char *err)
{
    const char *prefix = cfg->prefix && cfg->prefix[0] ? cfg->prefix : DEFAULT_PREFIX;
    struct store *st;
    int rc;

    rc = check_prefix(prefix, err);
    if (rc != DSJOB_OK)
        return rc;
    st = calloc(1, sizeof(*st));
    if (st == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "cannot open memcached store: out of memory");
    st->servers = strdup(cfg->servers ? cfg->servers : "");
    st->prefix = strdup(prefix);
    st->mc = memcached_create(NULL);
    if (st->servers == NULL || st->prefix == NULL || st->mc == NULL) {
        rc = store_say(err, DSJOB_ERR_NOMEM, "cannot open memcached store: out of memory");
        goto fail;
    }
    rc = add_servers(st->mc, cfg->servers, err);
    if (rc != DSJOB_OK)
        goto fail;
    memcached_behavior_set(st->mc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
    memcached_behavior_set(st->mc, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, CONNECT_TIMEOUT_MS);
    memcached_behavior_set(st->mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, IO_TIMEOUT_MS);
    memcached_behavior_set(st->mc, MEMCACHED_BEHAVIOR_RCV_TIMEOUT, IO_TIMEOUT_MS * 1000);
    memcached_behavior_set(st->mc, MEMCACHED_BEHAVIOR_SND_TIMEOUT, IO_TIMEOUT_MS * 1000);
    memcached_behavior_set(st->mc, MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, RETRY_TIMEOUT_S);
    memcached_behavior_set(st->mc, MEMCACHED_BEHAVIOR_KETAMA, 1);
    rc = check_servers(st, err);
    if (rc != DSJOB_OK)
        goto fail;
    learn_item_size(st);
    rc = read_head(st, err);
    if (rc == DSJOB_OK)
        rc = load_index(st, err);
    if (rc == DSJOB_OK)
        rc = load_funcs(st, err);
    if (rc != DSJOB_OK)
        goto fail;
    if (st->next - st->first > 1)
        compact(st);
    *out = st;
    return DSJOB_OK;
fail:
    free_store(st);
    return rc;
}

/* ---- the batch ---- */

/* pending_slot gives room for one more write in the batch, or NULL if out of memory. */
static struct pending_write *
pending_slot(struct store *st)
{
    struct pending_write *grown;
    size_t cap;

    if (st->nwrites == st->writes_cap) {
        cap = st->writes_cap ? st->writes_cap * 2 : 64;
        grown = realloc(st->writes, cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        st->writes = grown;
        st->writes_cap = cap;
    }
    return &st->writes[st->nwrites];
}

/*
 * add: encode the job now (the caller's pointers are borrowed) and keep it
 * for flush. A record memcached would refuse is refused here, so the rest
 * of the batch can still commit.
 */
static int
mc_add(struct store *st, const struct store_job *sj, char *err)
{
    char key[MEMCACHED_MAX_KEY], server[300];
    struct pending_write *pw;
    size_t len = job_len(sj), keylen;

    keylen = key_job(st, sj->id, key);
    if (len + keylen + ITEM_OVERHEAD > st->item_max || !fields_fit(sj))
        return store_say(
            err, DSJOB_ERR_STORE,
            "cannot add job %" PRIu64 " to memcached server '%s': its record of %zu bytes "
            "is larger than memcached's item size (%zu bytes, memcached -I)",
            sj->id, server_of(st, key, keylen, server, sizeof(server)), len, st->item_max);
    if (idset_has(&st->live, sj->id) || idset_has(&st->pending, sj->id))
        return store_say(err, DSJOB_ERR_STORE,
                         "cannot add job %" PRIu64 " to memcached store: that id is already stored",
                         sj->id);
    pw = pending_slot(st);
    if (pw == NULL || (pw->rec = malloc(len)) == NULL)
        goto nomem;
    if (idset_add(&st->pending, sj->id) != 0) {
        free(pw->rec);
        goto nomem;
    }
    encode_job(sj, (unsigned char *)pw->rec);
    pw->id = sj->id;
    pw->len = len;
    pw->update = false;
    st->nwrites++;
    return DSJOB_OK;
nomem:
    return store_say(err, DSJOB_ERR_NOMEM,
                     "cannot add job %" PRIu64 " to memcached store: out of memory", sj->id);
}

/*
 * update: encode the job's new record and keep it for flush, which writes
 * it with the adds. An id that is neither in the index nor added in this
 * batch is not stored: nothing is written (no stray key). A job written
 * twice in one batch is written once, with its last record, so that the
 * read-back of a flush never sees a key hold a record it did not expect.
 * A record too large for an item loses the tail of its result: it keeps
 * its first bytes, as --max-result-size does, and err says so (DSJOB_OK).
 */
static int
mc_update(struct store *st, const struct store_job *sj, char *err)
{
    char key[MEMCACHED_MAX_KEY], server[300];
    struct pending_write *pw = NULL;
    struct store_job cut;
    size_t keylen, len, room, fixed, i;
    char *rec;

    if (!idset_has(&st->pending, sj->id) && !idset_has(&st->live, sj->id) && !st->live_short)
        return DSJOB_OK;
    keylen = key_job(st, sj->id, key);
    room = st->item_max - ITEM_OVERHEAD - keylen;
    len = job_len(sj);
    fixed = len - sj->result_len;
    if (fixed > room)
        return store_say(err, DSJOB_ERR_STORE,
                         "cannot update job %" PRIu64 " in memcached server '%s': its record "
                         "of %zu bytes without a result is larger than memcached's item size "
                         "(%zu bytes, memcached -I)",
                         sj->id, server_of(st, key, keylen, server, sizeof(server)), fixed,
                         st->item_max);
    if (len > room) {
        cut = *sj;
        cut.result_len = room - fixed;
        store_say(err, DSJOB_OK,
                  "kept %zu of the %zu result bytes of job %" PRIu64 " in memcached server "
                  "'%s': its record must fit memcached's item size (%zu bytes, memcached -I); "
                  "a --max-result-size of %zu or less keeps them whole",
                  cut.result_len, sj->result_len, sj->id,
                  server_of(st, key, keylen, server, sizeof(server)), st->item_max, cut.result_len);
        sj = &cut;
        len = job_len(sj);
    }
    rec = malloc(len);
    if (rec == NULL)
        return store_say(err, DSJOB_ERR_NOMEM,
                         "cannot update job %" PRIu64 " in memcached store: out of memory", sj->id);
    if (idset_has(&st->pending, sj->id)) {
        /* Rare (a job that ends in the batch that added it): look from the newest. */
        for (i = st->nwrites; i-- > 0 && pw == NULL;)
            if (st->writes[i].id == sj->id)
                pw = &st->writes[i];
    }
    if (pw != NULL) {
        free(pw->rec); /* keeps its kind: an add stays an add */
    } else {
        pw = pending_slot(st);
        if (pw == NULL || idset_add(&st->pending, sj->id) != 0) {
            free(rec);
            return store_say(err, DSJOB_ERR_NOMEM,
                             "cannot update job %" PRIu64 " in memcached store: out of memory",
                             sj->id);
        }
        pw->id = sj->id;
        pw->update = true;
        st->nwrites++;
    }
    encode_job(sj, (unsigned char *)rec);
    pw->rec = rec;
    pw->len = len;
    return DSJOB_OK;
}

/* remove: kept until a head covers it; DSJOB_OK even if the last flush failed. */
static int
mc_remove(struct store *st, uint64_t id, char *err)
{
    if (store_ids_push(&st->removes, &st->nremoves, &st->removes_cap, id) < 0)
        return store_say(err, DSJOB_ERR_NOMEM,
                         "cannot remove job %" PRIu64 " from memcached store: out of memory", id);
    return DSJOB_OK;
}

/* func_name writes name's first 64 bytes into buf for a message, unprintable ones as \xNN. */
static const char *
func_name(const char *name, size_t len, char *buf, size_t size)
{
    size_t i, at = 0;

    for (i = 0; i < len && i < 64 && at + 5 < size; i++) {
        unsigned char c = (unsigned char)name[i];

        if (c > ' ' && c < 0x7f && c != '\\')
            buf[at++] = (char)c;
        else
            at += (size_t)snprintf(buf + at, size - at, "\\x%02x", c);
    }
    buf[at] = '\0';
    return buf;
}

/*
 * set_func: change the settings in memory; the next flush that works
 * writes P:funcs whole, so a failed flush loses nothing. Refused if all
 * the functions' settings would no longer fit in one item.
 */
static int
mc_set_func(struct store *st, const struct store_func *sf, char *err)
{
    bool forget = sf->retries == 0 && sf->backoff_base_ms == 0 && sf->backoff_max_ms == 0;
    char key[MEMCACHED_MAX_KEY], server[300], name[300];
    size_t keylen = key_funcs(st, key), len = st->funcs_len, i;

    for (i = 0; i < st->nfuncs; i++)
        if (st->funcs[i].name_len == sf->name_len &&
            memcmp(st->funcs[i].name, sf->name, sf->name_len) == 0)
            len -= FUNC_ENTRY + sf->name_len;
    if (!forget)
        len += FUNC_ENTRY + sf->name_len;
    if (sf->name_len > UINT32_MAX || len + keylen + ITEM_OVERHEAD > st->item_max)
        return store_say(err, DSJOB_ERR_STORE,
                         "cannot set function '%s' in memcached server '%s': the settings of "
                         "every function would take %zu bytes, more than memcached's item size "
                         "(%zu bytes, memcached -I)",
                         func_name(sf->name, sf->name_len, name, sizeof(name)),
                         server_of(st, key, keylen, server, sizeof(server)), len, st->item_max);
    if (func_put(st, sf) != 0)
        return store_say(err, DSJOB_ERR_NOMEM,
                         "cannot set function '%s' in memcached store: out of memory",
                         func_name(sf->name, sf->name_len, name, sizeof(name)));
    st->funcs_dirty = true;
    return DSJOB_OK;
}

/* replay_funcs: the settings read at open, as changed since. */
static int
mc_replay_funcs(struct store *st, store_func_fn *fn, void *arg, char *err)
{
    struct store_func sf;
    size_t i;

    (void)err;
    for (i = 0; i < st->nfuncs; i++) {
        memset(&sf, 0, sizeof(sf));
        sf.name = st->funcs[i].name;
        sf.name_len = st->funcs[i].name_len;
        sf.retries = st->funcs[i].retries;
        sf.backoff_base_ms = st->funcs[i].backoff_base_ms;
        sf.backoff_max_ms = st->funcs[i].backoff_max_ms;
        if (fn(&sf, arg) != 0)
            break;
    }
    return DSJOB_OK;
}

static void
drop_writes(struct store *st)
{
    size_t i;

    for (i = 0; i < st->nwrites; i++)
        free(st->writes[i].rec);
    st->nwrites = 0;
    idset_release(&st->pending);
}

/* job_failed says that job id's key was not written, and why, naming its server. */
static int
job_failed(struct store *st, char *err, uint64_t id, memcached_return_t rc)
{
    char key[MEMCACHED_MAX_KEY], what[64];
    size_t keylen = key_job(st, id, key);

    snprintf(what, sizeof(what), "write job %" PRIu64 " to", id);
    return fail_on(st, err, what, key, keylen, rc);
}

/*
 * verify_jobs reads back the keys of the batch's writes, MGET_KEYS at a
 * time, and lists in *redo (nwrites entries of room) those that do not hold the
 * very record written: with noreply nothing says that a set was refused
 * (memcached out of memory under -M) or never arrived.
 */
static int
verify_jobs(struct store *st, const uint64_t *ids, size_t *redo, size_t *nredo, char *err)
{
    memcached_result_st result, *res;
    memcached_return_t rc;
    struct mget_buf b;
    unsigned char *seen = NULL;
    size_t at, n, k, cur, keylen;
    int ret = DSJOB_OK;

    *nredo = 0;
    seen = malloc(MGET_KEYS);
    if (mget_buf_init(&b) != 0 || seen == NULL ||
        memcached_result_create(st->mc, &result) == NULL) {
        ret = store_say(err, DSJOB_ERR_NOMEM, "cannot flush memcached store: out of memory");
        goto free_bufs;
    }
    for (at = 0; at < st->nwrites && ret == DSJOB_OK; at += n) {
        n = st->nwrites - at < MGET_KEYS ? st->nwrites - at : MGET_KEYS;
        memset(seen, 0, n);
        rc = mget_start(st, ids + at, n, key_job, b.keys, b.kp, b.kl);
        if (rc != MEMCACHED_SUCCESS) {
            ret = mget_fail(st, err, "write jobs to", rc);
            break;
        }
        cur = 0;
        while ((res = memcached_fetch_result(st->mc, &result, &rc)) != NULL) {
            const char *key = memcached_result_key_value(res);
            const struct pending_write *pa;

            keylen = memcached_result_key_length(res);
            /* Replies come in the order asked, per server: look from the last one on. */
            for (k = 0; k < n; k++, cur = (cur + 1) % n)
                if (!seen[cur] && b.kl[cur] == keylen && memcmp(b.kp[cur], key, keylen) == 0)
                    break;
            if (k == n)
                continue; /* not asked for */
            pa = &st->writes[at + cur];
            seen[cur] = memcached_result_length(res) == pa->len &&
                        memcmp(memcached_result_value(res), pa->rec, pa->len) == 0;
        }
        if (rc != MEMCACHED_END && rc != MEMCACHED_NOTFOUND && rc != MEMCACHED_SUCCESS)
            ret = mget_fail(st, err, "write jobs to", rc);
        for (k = 0; k < n; k++)
            if (!seen[k])
                redo[(*nredo)++] = at + k;
    }
    memcached_result_free(&result);
free_bufs:
    mget_buf_release(&b);
    free(seen);
    return ret;
}

/*
 * write_jobs sets the key of every add and update of the batch, pipelined: the sets
 * go out with noreply, one after the other without waiting, and are then
 * read back by verify_jobs, a round trip per MGET_KEYS jobs. Each key that
 * does not hold its record then (in order; after an error, the rest were
 * not sent) is set again the old way, waiting for the reply, so that a
 * refusal fails the flush naming the job and the server's reason, as when
 * every set waited for its reply (a round trip a job: 10,000 jobs took 0.2
 * to 0.7 s of the writer thread). Noreply only, not
 * also BUFFER_REQUESTS: with libmemcached 1.1.4 buffered noreply sets of a
 * large batch lose runs of keys.
 */
static int
write_jobs(struct store *st, const uint64_t *ids, char *err)
{
    char key[MEMCACHED_MAX_KEY];
    memcached_return_t rc;
    size_t i, keylen, *redo, nredo = 0;
    int ret;

    redo = malloc((st->nwrites + 1) * sizeof(*redo));
    if (redo == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "cannot flush memcached store: out of memory");
    memcached_behavior_set(st->mc, MEMCACHED_BEHAVIOR_NOREPLY, 1);
    for (i = 0; i < st->nwrites; i++) {
        keylen = key_job(st, ids[i], key);
        rc = memcached_set(st->mc, key, keylen, st->writes[i].rec, st->writes[i].len, 0, 0);
        /*
         * memcached answers an error even to a noreply set, and libmemcached
         * reports it at a later set: which job failed, verify_jobs tells.
         */
        if (rc != MEMCACHED_SUCCESS)
            break;
    }
    memcached_behavior_set(st->mc, MEMCACHED_BEHAVIOR_NOREPLY, 0);
    ret = verify_jobs(st, ids, redo, &nredo, err);
    for (i = 0; i < nredo && ret == DSJOB_OK; i++) {
        const struct pending_write *pa = &st->writes[redo[i]];

        keylen = key_job(st, pa->id, key);
        rc = memcached_set(st->mc, key, keylen, pa->rec, pa->len, 0, 0);
        if (rc != MEMCACHED_SUCCESS)
            ret = job_failed(st, err, pa->id, rc);
    }
    free(redo);
    return ret;
}

/*
 * flush: the order of the writes is what makes a crash safe.
 *
 *   0. the function settings, if they changed: one set of P:funcs, which
 *      memcached applies whole; they do not depend on the jobs;
 *   1. every added or updated job's key (pipelined, then read back):
 *      nothing refers to an added one yet, so a crash here leaves stray
 *      keys and the old state; an updated one is already in the index, so
 *      its new record counts at once, as if its batch had committed (the
 *      server reports nothing of it before the commit, so nobody was told
 *      of the old one either);
 *   2. the chunk(s) at number next: still outside the head's range, so
 *      the old state is what a replay sees;
 *   3. the head, with next moved past the new chunks: one set, which
 *      memcached applies whole, so a replay sees the old state or the new.
 *
 * A batch of updates alone writes no chunk and no head. Any failure stops
 * the flush there: the batch's adds are refused (their keys are deleted,
 * best effort), its updates dropped (the server makes them again), the
 * removes stay pending, to go in the chunk of the next flush, and changed
 * settings stay to be written. A half-written chunk at next is harmless:
 * the next flush writes that number again before any head covers it. Only
 * after the head is written are the removed jobs' keys deleted, without
 * waiting for replies; a removed job updated in the same batch is deleted
 * after its update, on the same connection, so it does not come back.
 */
static int
mc_flush(struct store *st, char *err)
{
    uint64_t *ids = NULL, count = 0;
    size_t i, nnew = 0;
    int rc = DSJOB_OK;

    if (st->nwrites == 0 && st->nremoves == 0 && !st->funcs_dirty)
        return DSJOB_OK;
    if (st->funcs_dirty) {
        rc = write_funcs(st, err);
        if (rc != DSJOB_OK)
            goto refuse;
    }
    ids = malloc((st->nwrites + 1) * sizeof(*ids));
    if (ids == NULL) {
        rc = store_say(err, DSJOB_ERR_NOMEM, "cannot flush memcached store: out of memory");
        goto refuse;
    }
    for (i = 0; i < st->nwrites; i++)
        ids[i] = st->writes[i].id;
    rc = st->nwrites > 0 ? write_jobs(st, ids, err) : DSJOB_OK;
    /* From here on ids holds the adds only: they alone go in the index. */
    for (i = 0; i < st->nwrites; i++)
        if (!st->writes[i].update)
            ids[nnew++] = st->writes[i].id;
    if (rc != DSJOB_OK)
        goto refuse;
    if (nnew > 0 || st->nremoves > 0) {
        rc = write_chunks(st, ids, nnew, st->removes, st->nremoves, &count, err);
        if (rc == DSJOB_OK)
            rc = write_head(st, st->first, st->next + count, err);
        if (rc != DSJOB_OK)
            goto refuse;
    }
    st->next += count;
    st->since_compact += nnew + st->nremoves;
    for (i = 0; i < nnew; i++)
        if (idset_add(&st->live, ids[i]) != 0)
            st->live_short = true; /* a compaction would forget the job */
    for (i = 0; i < st->nremoves; i++)
        idset_del(&st->live, st->removes[i]);
    delete_quietly(st, key_job, st->removes, st->nremoves, 0, 0);
    st->nremoves = 0;
    drop_writes(st);
    free(ids);
    if (st->next - st->first >= COMPACT_CHUNKS && st->since_compact >= idset_count(&st->live))
        compact(st);
    return DSJOB_OK;
refuse:
    if (ids != NULL)
        delete_quietly(st, key_job, ids, nnew, 0, 0);
    free(ids);
    drop_writes(st);
    return rc;
}

/* ---- replay ---- */

/* A job record fetched for replay. */
struct fetched {
    uint64_t seq;       /* to sort by */
    uint64_t id;        /* to break ties, and to find missing ones */
    unsigned char *rec; /* the record, malloc()ed */
    size_t len;         /* bytes in rec */
};

static int
by_seq(const void *a, const void *b)
{
    const struct fetched *x = a, *y = b;

    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int
by_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* check_record decodes a fetched value, which must be the record of the id in its key. */
static int
check_record(struct store *st, const char *key, size_t keylen, struct fetched *f, char *err)
{
    char server[300], want[MEMCACHED_MAX_KEY];
    struct store_job sj;
    int rc;

    rc = decode_job(f->rec, f->len, &sj);
    server_of(st, key, keylen, server, sizeof(server));
    if (rc == -2)
        return store_say(
            err, DSJOB_ERR_STORE,
            "cannot read memcached store: key '%.*s' on server '%s' has format version "
            "%u, newer than this dsjobd's %d",
            (int)keylen, key, server, f->rec[MAGIC_LEN], JOB_FORMAT_VERSION);
    if (rc != 0 || key_job(st, sj.id, want) != keylen || memcmp(want, key, keylen) != 0)
        return store_say(
            err, DSJOB_ERR_STORE,
            "cannot read memcached store: key '%.*s' on server '%s' is not a dsjob job record",
            (int)keylen, key, server);
    f->seq = sj.seq;
    f->id = sj.id;
    return DSJOB_OK;
}

/*
 * fetch_jobs reads the records of ids (sorted) into *out, MGET_KEYS at a
 * time. A missing key (evicted, lost in a memcached restart) is skipped.
 */
static int
fetch_jobs(struct store *st, const uint64_t *ids, size_t nids, struct fetched **out, size_t *nout,
           char *err)
{
    memcached_result_st result, *res;
    memcached_return_t rc;
    struct fetched *fs, *f;
    struct mget_buf b;
    size_t n, at, nf = 0;
    int ret = DSJOB_OK;

    fs = malloc((nids + 1) * sizeof(*fs));
    if (mget_buf_init(&b) != 0 || fs == NULL || memcached_result_create(st->mc, &result) == NULL) {
        ret = store_say(err, DSJOB_ERR_NOMEM, "cannot read memcached store: out of memory");
        goto done;
    }
    for (at = 0; at < nids && ret == DSJOB_OK; at += n) {
        n = nids - at < MGET_KEYS ? nids - at : MGET_KEYS;
        rc = mget_start(st, ids + at, n, key_job, b.keys, b.kp, b.kl);
        if (rc != MEMCACHED_SUCCESS) {
            ret = mget_fail(st, err, "read jobs from", rc);
            break;
        }
        while ((res = memcached_fetch_result(st->mc, &result, &rc)) != NULL) {
            if (ret != DSJOB_OK || nf == nids)
                continue; /* drain the replies */
            f = &fs[nf];
            f->len = memcached_result_length(res);
            f->rec = malloc(f->len + 1);
            if (f->rec == NULL) {
                ret = store_say(err, DSJOB_ERR_NOMEM, "cannot read memcached store: out of memory");
                continue;
            }
            memcpy(f->rec, memcached_result_value(res), f->len);
            nf++;
            ret = check_record(st, memcached_result_key_value(res),
                               memcached_result_key_length(res), f, err);
        }
        if (ret == DSJOB_OK && rc != MEMCACHED_END && rc != MEMCACHED_NOTFOUND &&
            rc != MEMCACHED_SUCCESS)
            ret = mget_fail(st, err, "read jobs from", rc);
    }
    memcached_result_free(&result);
done:
    mget_buf_release(&b);
    if (ret != DSJOB_OK) {
        while (nf > 0)
            free(fs[--nf].rec);
        free(fs);
        return ret;
    }
    *out = fs;
    *nout = nf;
    return DSJOB_OK;
}

/* drop_missing takes ids whose key is gone out of the live set, so compaction forgets them. */
static void
drop_missing(struct store *st, const uint64_t *ids, size_t nids, const struct fetched *fs,
             size_t nf)
{
    uint64_t *found = malloc((nf + 1) * sizeof(*found));
    size_t i;

    if (found == NULL)
        return;
    for (i = 0; i < nf; i++)
        found[i] = fs[i].id;
    qsort(found, nf, sizeof(*found), by_u64);
    for (i = 0; i < nids; i++)
        if (bsearch(&ids[i], found, nf, sizeof(*found), by_u64) == NULL)
            idset_del(&st->live, ids[i]);
    free(found);
}

/*
 * replay: the live ids, less those removed since (pending), fetched and
 * sorted by seq in memory, since memcached has no order of its own.
 */
static int
mc_replay(struct store *st, store_replay_fn *fn, void *arg, char *err)
{
    struct fetched *fs = NULL;
    struct store_job sj;
    uint64_t *ids, *gone = NULL;
    size_t nids, n = 0, i, k;
    int rc;

    ids = idset_list(&st->live);
    if (st->nremoves > 0)
        gone = malloc(st->nremoves * sizeof(*gone));
    if (ids == NULL || (st->nremoves > 0 && gone == NULL)) {
        free(ids);
        return store_say(err, DSJOB_ERR_NOMEM, "cannot read memcached store: out of memory");
    }
    if (gone != NULL) {
        memcpy(gone, st->removes, st->nremoves * sizeof(*gone));
        qsort(gone, st->nremoves, sizeof(*gone), by_u64);
    }
    nids = idset_count(&st->live);
    for (i = k = 0; i < nids; i++)
        if (gone == NULL || bsearch(&ids[i], gone, st->nremoves, sizeof(*gone), by_u64) == NULL)
            ids[k++] = ids[i];
    nids = k;
    qsort(ids, nids, sizeof(*ids), by_u64);
    rc = fetch_jobs(st, ids, nids, &fs, &n, err);
    if (rc != DSJOB_OK)
        goto done;
    if (n < nids)
        drop_missing(st, ids, nids, fs, n);
    qsort(fs, n, sizeof(*fs), by_seq);
    for (i = 0; i < n; i++) {
        decode_job(fs[i].rec, fs[i].len, &sj); /* checked by fetch_jobs */
        if (fn(&sj, arg) != 0)
            break;
    }
    for (i = 0; i < n; i++)
        free(fs[i].rec);
done:
    free(fs);
    free(gone);
    free(ids);
    return rc;
}

static void
mc_close(struct store *st)
{
    char err[STORE_ERRLEN];

    if (st == NULL)
        return;
    (void)mc_flush(st, err); /* best effort: nobody is left to tell */
    free_store(st);
}

/*
 * store_memcached_test_chunk_ids caps the ids per index chunk at n (at
 * least 1), so that a test sees batches split over several chunks.
 * Returns the cap in force before. For tests only.
 */
int
store_memcached_test_chunk_ids(struct store *st, size_t n)
{
    size_t before = st->chunk_ids;

    st->chunk_ids = n > 0 ? n : 1;
    return before > INT_MAX ? INT_MAX : (int)before;
}

const struct store_ops store_memcached_ops = {
    .name = "memcached",
    .open = mc_open,
    .add = mc_add,
    .remove = mc_remove,
    .flush = mc_flush,
    .replay = mc_replay,
    .close = mc_close,
    .update = mc_update,
    .set_func = mc_set_func,
    .replay_funcs = mc_replay_funcs,
};
