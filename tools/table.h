/*
 * Rows of an admin listing and their three renderings: an aligned table
 * under a header for people, tab-separated values without a header for
 * scripts, and a JSON array of objects written with jansson.
 */
#ifndef DSJOB_TOOLS_TABLE_H
#define DSJOB_TOOLS_TABLE_H

#include <stddef.h>
#include <stdio.h>

#include "dsjob.h"

/* What a column holds, which decides its JSON type and alignment. */
enum table_kind {
    TABLE_STR = 0, /* a string, left-aligned */
    TABLE_NUM,     /* a decimal number, right-aligned; a JSON integer */
    TABLE_LIST,    /* words separated by single spaces; a JSON array of strings */
    TABLE_TEXT,    /* a string that may hold lines (an error's text): in the table, a last
                      column shows each line on a line of its own, under the column */
};

/* A column: its JSON key (the header is the key in upper case) and kind. */
struct table_col {
    const char *key;      /* e.g. "function" (borrowed, static) */
    enum table_kind kind; /* how to render it */
};

/* A listing being collected. */
struct table {
    const struct table_col *cols; /* the columns (borrowed, static) */
    size_t ncols;                 /* entries in cols */
    char **cells;                 /* nrows * ncols strings (owned) */
    size_t nrows;                 /* complete rows */
    size_t cap;                   /* room in cells, in strings */
};

/* table_init starts an empty table with the given columns (borrowed). */
void table_init(struct table *t, const struct table_col *cols, size_t ncols);

/* table_release frees every cell. */
void table_release(struct table *t);

/*
 * table_add appends a row of ncols strings (borrowed, copied); lens gives
 * their lengths (cells need not be NUL-terminated).
 */
void table_add(struct table *t, const char *const *cells, const size_t *lens);

/*
 * table_print writes the table to out in the given format. Columns before
 * first are left out (the server column when there is only one server),
 * except in JSON, which always has every key. In the table (for people),
 * a cell's trailing newlines are left out, and so is the escaping of the
 * newlines of a TABLE_TEXT last column; TSV and JSON have every byte.
 * Returns 0, or -1 when writing or encoding failed.
 */
int table_print(const struct table *t, enum cli_format fmt, size_t first, FILE *out);

/*
 * table_print_records writes a table of three columns (server, name,
 * value), each server's rows together, as a JSON array of one object per
 * server: its "server" key, then each name as a key of its value, an
 * integer for the names in nums (NULL-terminated). Returns 0, or -1 when
 * writing or encoding failed.
 */
int table_print_records(const struct table *t, const char *const *nums, FILE *out);

#endif
