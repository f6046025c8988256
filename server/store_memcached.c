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
 *   P:batch:<n>   an index chunk: the ids one flush added, then the ids it
 *                 removed. Replaying chunks first..next-1 in order (adds,
 *                 then removes, chunk by chunk) gives the live ids.
 *   P:head        the range of live chunks: first and next.
 *
 * The index values are encoded by mcindex.c, and the live ids are kept in
 * an idset (idset.c); this file does the memcached I/O and the records.
 *
 * A flush writes its job keys, then its chunk(s) at number next, then the
 * head with next moved past them, so it costs O(batch), never O(queue).
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
#define JOB_HEADER (BODY + 8 + 8 + 8 + 4 + 1)
#define JOB_FIELDS 5 /* handle, func, unique, reducer, data */

/* An add of the open batch: the encoded record, written by flush. */
struct pending_add {
    uint64_t id; /* the job's id */
    char *rec;   /* its record, malloc()ed */
    size_t len;  /* bytes in rec */
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
    struct pending_add *adds;     /* the open batch's adds */
    size_t nadds, adds_cap;       /* how many, room */
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
           sj->reducer_len + sj->data_len;
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
 * encode_job lays a job out as: "dsj" and the version (1 byte), id, seq,
 * when (8 bytes each), prio (4), unique_is_data (1), then handle, func,
 * unique, reducer and data, each as a 4-byte length and its bytes.
 * Integers are little-endian. The head is "dsj", version, first, next; a
 * chunk is "dsj", version, the count of adds and of removes (4 bytes
 * each), then their ids (8 bytes each), adds first.
 */
static void
encode_job(const struct store_job *sj, unsigned char *p)
{
    mcindex_put_magic(p);
    mcindex_put_u64(p + BODY, sj->id);
    mcindex_put_u64(p + BODY + 8, sj->seq);
    mcindex_put_u64(p + BODY + 16, (uint64_t)sj->when);
    mcindex_put_u32(p + BODY + 24, (uint32_t)sj->prio);
    p[BODY + 28] = sj->unique_is_data ? 1 : 0;
    p += JOB_HEADER;
    p = put_field(p, sj->handle, sj->handle_len);
    p = put_field(p, sj->func, sj->func_len);
    p = put_field(p, sj->unique, sj->unique_len);
    p = put_field(p, sj->reducer, sj->reducer_len);
    put_field(p, sj->data, sj->data_len);
}

/* decode_job is encode_job backwards; sj points into rec. -1 if rec is not
 * a record, -2 if newer. */
static int
decode_job(const unsigned char *rec, size_t len, struct store_job *sj)
{
    const void *field[JOB_FIELDS];
    size_t flen[JOB_FIELDS], off = JOB_HEADER, i;

    int rc = mcindex_check_magic(rec, len);

    if (rc != 0)
        return rc;
    if (len < JOB_HEADER)
        return -1;
    for (i = 0; i < JOB_FIELDS; i++) {
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
    sj->handle = field[0], sj->handle_len = flen[0];
    sj->func = field[1], sj->func_len = flen[1];
    sj->unique = field[2], sj->unique_len = flen[2];
    sj->reducer = field[3], sj->reducer_len = flen[3];
    sj->data = field[4], sj->data_len = flen[4];
    return 0;
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

    for (i = 0; i < st->nadds; i++)
        free(st->adds[i].rec);
    free(st->adds);
    free(st->removes);
    idset_release(&st->live);
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

/*
 * add: encode the job now (the caller's pointers are borrowed) and keep it
 * for flush. A record memcached would refuse is refused here, so the rest
 * of the batch can still commit.
 */
static int
mc_add(struct store *st, const struct store_job *sj, char *err)
{
    char key[MEMCACHED_MAX_KEY], server[300];
    struct pending_add *grown, *pa;
    size_t len = job_len(sj), keylen, cap;

    keylen = key_job(st, sj->id, key);
    if (len + keylen + ITEM_OVERHEAD > st->item_max || sj->handle_len > UINT32_MAX ||
        sj->func_len > UINT32_MAX || sj->unique_len > UINT32_MAX || sj->reducer_len > UINT32_MAX ||
        sj->data_len > UINT32_MAX)
        return store_say(
            err, DSJOB_ERR_STORE,
            "cannot add job %" PRIu64 " to memcached server '%s': its record of %zu bytes "
            "is larger than memcached's item size (%zu bytes, memcached -I)",
            sj->id, server_of(st, key, keylen, server, sizeof(server)), len, st->item_max);
    if (idset_has(&st->live, sj->id))
        return store_say(err, DSJOB_ERR_STORE,
                         "cannot add job %" PRIu64 " to memcached store: that id is already stored",
                         sj->id);
    if (st->nadds == st->adds_cap) {
        cap = st->adds_cap ? st->adds_cap * 2 : 64;
        grown = realloc(st->adds, cap * sizeof(*grown));
        if (grown == NULL)
            goto nomem;
        st->adds = grown;
        st->adds_cap = cap;
    }
    pa = &st->adds[st->nadds];
    pa->rec = malloc(len);
    if (pa->rec == NULL)
        goto nomem;
    encode_job(sj, (unsigned char *)pa->rec);
    pa->id = sj->id;
    pa->len = len;
    st->nadds++;
    return DSJOB_OK;
nomem:
    return store_say(err, DSJOB_ERR_NOMEM,
                     "cannot add job %" PRIu64 " to memcached store: out of memory", sj->id);
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

static void
drop_adds(struct store *st)
{
    size_t i;

    for (i = 0; i < st->nadds; i++)
        free(st->adds[i].rec);
    st->nadds = 0;
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
 * verify_jobs reads back the keys of the batch's adds, MGET_KEYS at a time,
 * and lists in *redo (nadds entries of room) those that do not hold the
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
    for (at = 0; at < st->nadds && ret == DSJOB_OK; at += n) {
        n = st->nadds - at < MGET_KEYS ? st->nadds - at : MGET_KEYS;
        memset(seen, 0, n);
        rc = mget_start(st, ids + at, n, key_job, b.keys, b.kp, b.kl);
        if (rc != MEMCACHED_SUCCESS) {
            ret = mget_fail(st, err, "write jobs to", rc);
            break;
        }
        cur = 0;
        while ((res = memcached_fetch_result(st->mc, &result, &rc)) != NULL) {
            const char *key = memcached_result_key_value(res);
            const struct pending_add *pa;

            keylen = memcached_result_key_length(res);
            /* Replies come in the order asked, per server: look from the last one on. */
            for (k = 0; k < n; k++, cur = (cur + 1) % n)
                if (!seen[cur] && b.kl[cur] == keylen && memcmp(b.kp[cur], key, keylen) == 0)
                    break;
            if (k == n)
                continue; /* not asked for */
            pa = &st->adds[at + cur];
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
 * write_jobs sets the key of every add of the batch, pipelined: the sets
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

    redo = malloc((st->nadds + 1) * sizeof(*redo));
    if (redo == NULL)
        return store_say(err, DSJOB_ERR_NOMEM, "cannot flush memcached store: out of memory");
    memcached_behavior_set(st->mc, MEMCACHED_BEHAVIOR_NOREPLY, 1);
    for (i = 0; i < st->nadds; i++) {
        keylen = key_job(st, ids[i], key);
        rc = memcached_set(st->mc, key, keylen, st->adds[i].rec, st->adds[i].len, 0, 0);
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
        const struct pending_add *pa = &st->adds[redo[i]];

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
 *   1. every added job's key (pipelined, then read back): nothing refers
 *      to them yet, so a crash here leaves stray keys and the old state;
 *   2. the chunk(s) at number next: still outside the head's range, so
 *      the old state is what a replay sees;
 *   3. the head, with next moved past the new chunks: one set, which
 *      memcached applies whole, so a replay sees the old state or the new.
 *
 * Any failure stops the flush there: the batch's adds are refused (their
 * keys are deleted, best effort) and the removes stay pending, to go in
 * the chunk of the next flush. A half-written chunk at next is harmless:
 * the next flush writes that number again before any head covers it.
 * Only after the head is written are the removed jobs' keys deleted,
 * without waiting for replies.
 */
static int
mc_flush(struct store *st, char *err)
{
    uint64_t *ids = NULL, count = 0;
    size_t i;
    int rc = DSJOB_OK;

    if (st->nadds == 0 && st->nremoves == 0)
        return DSJOB_OK;
    ids = malloc((st->nadds + 1) * sizeof(*ids));
    if (ids == NULL) {
        rc = store_say(err, DSJOB_ERR_NOMEM, "cannot flush memcached store: out of memory");
        goto refuse;
    }
    for (i = 0; i < st->nadds; i++)
        ids[i] = st->adds[i].id;
    rc = write_jobs(st, ids, err);
    if (rc != DSJOB_OK)
        goto refuse;
    rc = write_chunks(st, ids, st->nadds, st->removes, st->nremoves, &count, err);
    if (rc == DSJOB_OK)
        rc = write_head(st, st->first, st->next + count, err);
    if (rc != DSJOB_OK)
        goto refuse;
    st->next += count;
    st->since_compact += st->nadds + st->nremoves;
    for (i = 0; i < st->nadds; i++)
        if (idset_add(&st->live, ids[i]) != 0)
            st->live_short = true; /* a compaction would forget the job */
    for (i = 0; i < st->nremoves; i++)
        idset_del(&st->live, st->removes[i]);
    delete_quietly(st, key_job, st->removes, st->nremoves, 0, 0);
    st->nremoves = 0;
    drop_adds(st);
    free(ids);
    if (st->next - st->first >= COMPACT_CHUNKS && st->since_compact >= idset_count(&st->live))
        compact(st);
    return DSJOB_OK;
refuse:
    if (ids != NULL)
        delete_quietly(st, key_job, ids, st->nadds, 0, 0);
    free(ids);
    drop_adds(st);
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
            (int)keylen, key, server, f->rec[MAGIC_LEN], FORMAT_VERSION);
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
    .version = STORE_OPS_VERSION,
    .name = "memcached",
    .open = mc_open,
    .add = mc_add,
    .remove = mc_remove,
    .flush = mc_flush,
    .replay = mc_replay,
    .close = mc_close,
};
