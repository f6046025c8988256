/*
 * The example dataset (see dataset.h): parsing and writing the spec and the
 * summary, the rows, and their checksum. The spec comes from the network,
 * so it is parsed with jansson, which the dsjob command line already needs:
 * a real parser refuses every malformed payload with a line and column for
 * the producer's WORK_EXCEPTION, where a hand-written scanner for five keys
 * would be as long as this file and would be the part a reader has to trust.
 */
#define _POSIX_C_SOURCE 200809L

#include "dataset.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define MINSTD_M 2147483647u /* 2^31 - 1 */
#define MINSTD_A 48271u
#define ROW_STRIDE 2654435u /* spreads consecutive rows over the generator's cycle */
#define MIX_MUL 7919u
#define ADLER_MOD 65521u

static const char *const labels[8] = {"alpha", "bravo",   "charlie", "delta",
                                      "echo",  "foxtrot", "golf",    "hotel"};

int
dataset_name_ok(const char *name)
{
    size_t n = strlen(name), i;

    if (n == 0 || n > DATASET_NAME_MAX)
        return 0;
    for (i = 0; i < n; i++) {
        char c = name[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Reads key as an integer from lo to hi into *out; absent is -1 unless dflt >= 0. */
static int
get_uint(json_t *obj, const char *key, long long lo, long long hi, long long dflt, uint32_t *out,
         char *err)
{
    json_t *v = json_object_get(obj, key);
    long long x;

    if (v == NULL) {
        if (dflt < 0) {
            snprintf(err, DATASET_ERR_MAX, "no \"%s\"", key);
            return -1;
        }
        *out = (uint32_t)dflt;
        return 0;
    }
    if (!json_is_integer(v)) {
        snprintf(err, DATASET_ERR_MAX, "\"%s\" is not an integer", key);
        return -1;
    }
    x = json_integer_value(v);
    if (x < lo || x > hi) {
        snprintf(err, DATASET_ERR_MAX, "\"%s\" is %lld, not from %lld to %lld", key, x, lo, hi);
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}

/* Refuses any key but the allowed ones (NULL-terminated). */
static int
only_keys(json_t *obj, const char *const *allowed, char *err)
{
    const char *key;
    json_t *v;

    json_object_foreach(obj, key, v)
    {
        const char *const *a;

        for (a = allowed; *a != NULL && strcmp(*a, key) != 0; a++)
            ;
        if (*a == NULL) {
            snprintf(err, DATASET_ERR_MAX, "unknown key \"%.40s\"", key);
            return -1;
        }
    }
    return 0;
}

/* Parses JSON text into an object; NULL with why in err. The caller json_decref()s it. */
static json_t *
load_object(const void *json, size_t len, char *err)
{
    json_error_t jerr;
    json_t *obj = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);

    if (obj == NULL) {
        snprintf(err, DATASET_ERR_MAX, "not JSON: %.80s at line %d column %d", jerr.text, jerr.line,
                 jerr.column);
        return NULL;
    }
    if (!json_is_object(obj)) {
        snprintf(err, DATASET_ERR_MAX, "not a JSON object");
        json_decref(obj);
        return NULL;
    }
    return obj;
}

static int
get_name(json_t *obj, char *name, char *err)
{
    const char *s = json_string_value(json_object_get(obj, "dataset"));

    if (s == NULL || !dataset_name_ok(s)) {
        snprintf(err, DATASET_ERR_MAX, "\"dataset\" must be 1 to %d bytes of A-Z a-z 0-9 . _ -",
                 DATASET_NAME_MAX);
        return -1;
    }
    memcpy(name, s, strlen(s) + 1);
    return 0;
}

int
dataset_spec_parse(struct dataset_spec *spec, const void *json, size_t len, char *err)
{
    static const char *const keys[] = {"dataset", "shard", "shards", "seed", "rows", NULL};
    json_t *obj = load_object(json, len, err);
    int rc = -1;

    if (obj == NULL)
        return -1;
    memset(spec, 0, sizeof(*spec));
    if (only_keys(obj, keys, err) < 0 || get_name(obj, spec->name, err) < 0 ||
        get_uint(obj, "shards", 1, DATASET_SHARDS_MAX, -1, &spec->shards, err) < 0 ||
        get_uint(obj, "shard", 0, (long long)spec->shards - 1, -1, &spec->shard, err) < 0 ||
        get_uint(obj, "seed", 0, DATASET_SEED_MAX, -1, &spec->seed, err) < 0 ||
        get_uint(obj, "rows", 0, DATASET_ROWS_MAX, DATASET_ROWS_DEFAULT, &spec->rows, err) < 0)
        goto out;
    rc = 0;
out:
    json_decref(obj);
    return rc;
}

void
dataset_spec_format(const struct dataset_spec *spec, char *buf, size_t cap)
{
    snprintf(buf, cap,
             "{\"dataset\":\"%s\",\"shard\":%" PRIu32 ",\"shards\":%" PRIu32 ",\"seed\":%" PRIu32
             ",\"rows\":%" PRIu32 "}",
             spec->name, spec->shard, spec->shards, spec->seed, spec->rows);
}

uint64_t
dataset_shard_count(const struct dataset_spec *spec)
{
    if (spec->shard >= spec->rows)
        return 0;
    return (spec->rows - spec->shard + spec->shards - 1) / spec->shards;
}

size_t
dataset_row(const struct dataset_spec *spec, uint64_t k, char *buf)
{
    uint64_t g = k * spec->shards + spec->shard;
    uint64_t x = (spec->seed + (g + 1) * ROW_STRIDE) % MINSTD_M;
    int n;

    /* MINSTD steps, and one that multiplies the halves of x to undo the
     * linearity in g; every product stays below 2^53, so that awk, which
     * computes in doubles, gets the same numbers (examples/scripts/produce.sh). */
    x = x * MINSTD_A % MINSTD_M;
    x = (x + (x >> 16) * (x & 0xffff) * MIX_MUL) % MINSTD_M;
    x = x * MINSTD_A % MINSTD_M;
    x = x * MINSTD_A % MINSTD_M;
    n = snprintf(buf, DATASET_ROW_MAX, "%" PRIu64 "\t%" PRIu64 "\t%s\n", g, x % 1000000,
                 labels[(x / 1000000) % 8]);
    return (size_t)n;
}

int64_t
dataset_row_id(const char *row, size_t len)
{
    int64_t g = 0;
    size_t i;

    for (i = 0; i < len && row[i] >= '0' && row[i] <= '9' && i < 12; i++)
        g = g * 10 + (row[i] - '0');
    if (i == 0 || i == len || row[i] != '\t')
        return -1;
    return g;
}

uint32_t
dataset_adler32(uint32_t adler, const void *data, size_t len)
{
    const unsigned char *p = data;
    uint32_t a = adler & 0xffff, b = adler >> 16;
    size_t i;

    for (i = 0; i < len; i++) {
        a = (a + p[i]) % ADLER_MOD;
        b = (b + a) % ADLER_MOD;
    }
    return (b << 16) | a;
}

void
dataset_expect(const struct dataset_spec *spec, struct dataset_summary *sum)
{
    uint64_t k, n = dataset_shard_count(spec);
    char row[DATASET_ROW_MAX];

    memset(sum, 0, sizeof(*sum));
    memcpy(sum->name, spec->name, sizeof(sum->name));
    sum->shard = spec->shard;
    sum->shards = spec->shards;
    sum->count = n;
    sum->adler32 = DATASET_ADLER_INIT;
    for (k = 0; k < n; k++)
        sum->adler32 = dataset_adler32(sum->adler32, row, dataset_row(spec, k, row));
}

void
dataset_summary_format(const struct dataset_summary *sum, char *buf, size_t cap)
{
    snprintf(buf, cap,
             "{\"dataset\":\"%s\",\"shard\":%" PRIu32 ",\"shards\":%" PRIu32 ",\"count\":%" PRIu64
             ",\"adler32\":\"%08" PRIx32 "\"}\n",
             sum->name, sum->shard, sum->shards, sum->count, sum->adler32);
}

int
dataset_summary_parse(struct dataset_summary *sum, const void *json, size_t len, char *err)
{
    json_t *obj = load_object(json, len, err), *count;
    const char *adler;
    unsigned long a;
    char *end;
    int rc = -1;

    if (obj == NULL)
        return -1;
    memset(sum, 0, sizeof(*sum));
    if (get_name(obj, sum->name, err) < 0 ||
        get_uint(obj, "shards", 1, DATASET_SHARDS_MAX, -1, &sum->shards, err) < 0 ||
        get_uint(obj, "shard", 0, DATASET_SHARDS_MAX - 1, -1, &sum->shard, err) < 0)
        goto out;
    count = json_object_get(obj, "count");
    adler = json_string_value(json_object_get(obj, "adler32"));
    if (!json_is_integer(count) || json_integer_value(count) < 0 || adler == NULL ||
        strlen(adler) != 8) {
        snprintf(err, DATASET_ERR_MAX, "no \"count\" or no 8-digit \"adler32\"");
        goto out;
    }
    a = strtoul(adler, &end, 16);
    if (*end != '\0') {
        snprintf(err, DATASET_ERR_MAX, "\"adler32\" is not hexadecimal");
        goto out;
    }
    sum->count = (uint64_t)json_integer_value(count);
    sum->adler32 = (uint32_t)a;
    rc = 0;
out:
    json_decref(obj);
    return rc;
}
