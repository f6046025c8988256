/*
 * The example dataset: a synthetic, deterministic table, and the JSON spec
 * that names one shard of it. Row g (0 <= g < rows) of a dataset is
 * "g<TAB>value<TAB>label\n", where value and label come from the seed and g
 * alone (a few steps of the MINSTD generator, exact in a double, so that
 * examples/scripts/produce.sh computes the same rows with awk). Shard i of
 * n holds the rows g with g % n == i, in increasing order: the union of the
 * shards is the same table whatever n is. A shard's summary is its count
 * and the Adler-32 of its rows' bytes in order (zlib's adler32, which PHP's
 * hash("adler32") and Perl's Compress::Zlib::adler32 compute too).
 */
#ifndef EXAMPLES_DATASET_H
#define EXAMPLES_DATASET_H

#include <stddef.h>
#include <stdint.h>

#define DATASET_NAME_MAX 32        /* bytes of a dataset name, [A-Za-z0-9._-] */
#define DATASET_ROW_MAX 64         /* bytes of one row, its newline included */
#define DATASET_ROWS_MAX 100000000 /* rows of a dataset at most */
#define DATASET_SHARDS_MAX 65536   /* shards of a dataset at most */
#define DATASET_SEED_MAX 2147483646
#define DATASET_ROWS_DEFAULT 1000
#define DATASET_SPEC_MAX 256    /* bytes of a formatted spec, NUL included */
#define DATASET_SUMMARY_MAX 256 /* bytes of a formatted summary, NUL included */
#define DATASET_ERR_MAX 160     /* bytes of an error text, NUL included */

/* One shard of one dataset: what a dataset.shard job's payload says. */
struct dataset_spec {
    char name[DATASET_NAME_MAX + 1]; /* "dataset" */
    uint32_t shard;                  /* "shard": 0 <= shard < shards */
    uint32_t shards;                 /* "shards": 1 to DATASET_SHARDS_MAX */
    uint32_t seed;                   /* "seed": 0 to DATASET_SEED_MAX */
    uint32_t rows;                   /* "rows": rows of the whole dataset (default 1000) */
};

/* What a producer says about a shard it made: its WORK_COMPLETE payload. */
struct dataset_summary {
    char name[DATASET_NAME_MAX + 1]; /* the dataset */
    uint32_t shard;                  /* the shard */
    uint32_t shards;                 /* of that many */
    uint64_t count;                  /* rows produced */
    uint32_t adler32;                /* Adler-32 of the rows' bytes, in order */
};

/*
 * dataset_spec_parse reads a JSON spec such as {"dataset":"demo","shard":3,
 * "shards":8,"seed":42,"rows":2000} (rows optional; other keys refused, so
 * that a typo is not ignored). Returns 0, or -1 with why in err
 * (DATASET_ERR_MAX bytes).
 */
int dataset_spec_parse(struct dataset_spec *spec, const void *json, size_t len, char *err);

/* dataset_spec_format writes spec as one line of JSON (no newline) into buf. */
void dataset_spec_format(const struct dataset_spec *spec, char *buf, size_t cap);

/* dataset_name_ok tells whether name is a valid dataset name. */
int dataset_name_ok(const char *name);

/* dataset_shard_count returns how many rows shard spec->shard holds. */
uint64_t dataset_shard_count(const struct dataset_spec *spec);

/*
 * dataset_row writes the k-th row of the shard (row k * shards + shard of
 * the table; k < dataset_shard_count) into buf (DATASET_ROW_MAX bytes) and
 * returns its length, newline included.
 */
size_t dataset_row(const struct dataset_spec *spec, uint64_t k, char *buf);

/* dataset_row_id reads the row number g at the start of a row; -1 if there is none. */
int64_t dataset_row_id(const char *row, size_t len);

/* Adler-32 as zlib computes it: start from DATASET_ADLER_INIT. */
#define DATASET_ADLER_INIT 1u
uint32_t dataset_adler32(uint32_t adler, const void *data, size_t len);

/* dataset_expect fills *sum with what a correct producer reports for spec. */
void dataset_expect(const struct dataset_spec *spec, struct dataset_summary *sum);

/*
 * dataset_summary_format writes sum as one line of JSON, newline included:
 * {"dataset":"demo","shard":3,"shards":8,"count":250,"adler32":"1a2b3c4d"}
 */
void dataset_summary_format(const struct dataset_summary *sum, char *buf, size_t cap);

/* dataset_summary_parse reads what dataset_summary_format wrote. 0, or -1 with why in err. */
int dataset_summary_parse(struct dataset_summary *sum, const void *json, size_t len, char *err);

#endif
