/*
 * Rendering of admin listings (see table.h). Cells are bytes as the server
 * sent them, so each format makes them safe its own way: the table and the
 * TSV escape backslash, tab, newline and other control bytes as \\, \t, \n
 * and \xHH, so that one row stays one line and the columns stay columns
 * (the table, for people, leaves out a cell's trailing newlines, and puts
 * each line of a last column of text on a line of its own, indented to
 * the column); JSON replaces bytes that are not UTF-8 with U+FFFD, since jansson only
 * takes valid UTF-8, and leaves the escaping to jansson.
 */
#include "config.h"
#include "table.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

void
table_init(struct table *t, const struct table_col *cols, size_t ncols)
{
    memset(t, 0, sizeof(*t));
    t->cols = cols;
    t->ncols = ncols;
}

void
table_release(struct table *t)
{
    size_t i;

    for (i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    memset(t, 0, sizeof(*t));
}

void
table_add(struct table *t, const char *const *cells, const size_t *lens)
{
    size_t i;

    if ((t->nrows + 1) * t->ncols > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16 * t->ncols;
        char **nc;

        while (cap < (t->nrows + 1) * t->ncols)
            cap *= 2;
        nc = realloc(t->cells, cap * sizeof(*nc));
        if (nc == NULL) {
            cli_err("out of memory");
            exit(CLI_FAILED);
        }
        t->cells = nc;
        t->cap = cap;
    }
    for (i = 0; i < t->ncols; i++) {
        char *s = cli_xmalloc(lens[i] + 1);

        memcpy(s, cells[i], lens[i]);
        s[lens[i]] = '\0';
        t->cells[t->nrows * t->ncols + i] = s;
    }
    t->nrows++;
}

static const char *
cell(const struct table *t, size_t row, size_t col)
{
    return t->cells[row * t->ncols + col];
}

/*
 * The escaped form of s for the table and TSV (malloc'd). For the table
 * (trim), trailing newlines are left out, and with lines, a newline stays
 * one (print_text indents what follows it).
 */
static char *
escape(const char *s, bool trim, bool lines)
{
    size_t n = strlen(s), k = 0;
    char *e = cli_xmalloc(4 * n + 1);
    const char *end = s + n;

    while (trim && end > s && (end[-1] == '\n' || end[-1] == '\r'))
        end--;
    for (; s < end; s++) {
        unsigned char ch = (unsigned char)*s;

        if (lines && ch == '\n') {
            e[k++] = '\n';
            continue;
        }
        if (ch == '\\') {
            e[k++] = '\\';
            e[k++] = '\\';
        } else if (ch == '\t') {
            e[k++] = '\\';
            e[k++] = 't';
        } else if (ch == '\n') {
            e[k++] = '\\';
            e[k++] = 'n';
        } else if (ch < 0x20 || ch == 0x7f) {
            k += (size_t)sprintf(e + k, "\\x%02x", ch);
        } else {
            e[k++] = (char)ch;
        }
    }
    e[k] = '\0';
    return e;
}

/* The length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t
utf8_seq(const unsigned char *s, size_t n)
{
    size_t len, i;
    unsigned cp;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        len = 2;
        cp = s[0] & 0x1f;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        len = 3;
        cp = s[0] & 0x0f;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        len = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    /* Overlong forms, surrogates and code points above U+10FFFF are not UTF-8. */
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* A JSON string of s, invalid UTF-8 bytes replaced by U+FFFD. */
static json_t *
json_str(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), i = 0, k = 0;
    char *v = cli_xmalloc(3 * n + 1);
    json_t *j;

    while (i < n) {
        size_t len = utf8_seq(p + i, n - i);

        if (len == 0) {
            memcpy(v + k, "\xef\xbf\xbd", 3);
            k += 3;
            i++;
        } else {
            memcpy(v + k, p + i, len);
            k += len;
            i += len;
        }
    }
    j = json_stringn(v, k);
    free(v);
    return j;
}

static json_t *
json_cell(const char *s, enum table_kind kind)
{
    if (kind == TABLE_NUM) {
        char *end;
        long long v = strtoll(s, &end, 10);

        double d;

        if (*s != '\0' && *end == '\0')
            return json_integer((json_int_t)v);
        d = strtod(s, &end); /* stats: seconds with decimals */
        if (*s != '\0' && *end == '\0')
            return json_real(d);
        return json_str(s);
    }
    if (kind == TABLE_LIST) {
        json_t *a = json_array();
        const char *p = s;

        while (a != NULL && *p != '\0') {
            size_t w = strcspn(p, " ");

            if (w > 0) {
                char *word = cli_xmalloc(w + 1);

                memcpy(word, p, w);
                word[w] = '\0';
                json_array_append_new(a, json_str(word));
                free(word);
            }
            p += w;
            if (*p == ' ')
                p++;
        }
        return a;
    }
    return json_str(s);
}

static int
print_json(const struct table *t, FILE *out)
{
    json_t *arr = json_array();
    size_t r, c;
    int rc;

    if (arr == NULL)
        return -1;
    for (r = 0; r < t->nrows; r++) {
        json_t *o = json_object();

        for (c = 0; o != NULL && c < t->ncols; c++)
            json_object_set_new(o, t->cols[c].key, json_cell(cell(t, r, c), t->cols[c].kind));
        json_array_append_new(arr, o);
    }
    rc = json_dumpf(arr, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(arr);
    if (rc == 0 && fputc('\n', out) == EOF)
        rc = -1;
    return rc;
}

/* Writes e; a line after a newline in it starts under column c (widths of those before it). */
static void
print_lines(const char *e, const size_t *width, size_t c, FILE *out)
{
    size_t indent = 0, i;
    const char *nl;

    for (i = 0; i < c; i++)
        indent += width[i] + 2;
    while ((nl = strchr(e, '\n')) != NULL) {
        fwrite(e, 1, (size_t)(nl + 1 - e), out);
        for (i = 0; i < indent; i++)
            fputc(' ', out);
        e = nl + 1;
    }
    fputs(e, out);
}

static int
print_text(const struct table *t, bool header, size_t first, FILE *out)
{
    size_t nc = t->ncols - first, r, c;
    size_t *width = calloc(nc ? nc : 1, sizeof(*width));
    char **esc = cli_xmalloc((t->nrows * nc + 1) * sizeof(*esc));

    if (width == NULL) {
        cli_err("out of memory");
        exit(CLI_FAILED);
    }
    for (c = 0; c < nc && header; c++)
        width[c] = strlen(t->cols[first + c].key);
    for (r = 0; r < t->nrows; r++) {
        for (c = 0; c < nc; c++) {
            bool lines = header && c + 1 == nc && t->cols[first + c].kind == TABLE_TEXT;
            char *e = escape(cell(t, r, first + c), header, lines);

            esc[r * nc + c] = e;
            if (header && strlen(e) > width[c])
                width[c] = strlen(e);
        }
    }
    if (header) {
        for (c = 0; c < nc; c++) {
            const char *k = t->cols[first + c].key;
            size_t i, w = c + 1 < nc || t->cols[first + c].kind == TABLE_NUM ? width[c] : 0;
            bool right = t->cols[first + c].kind == TABLE_NUM;

            if (c > 0)
                fputs("  ", out);
            for (i = strlen(k); right && i < w; i++)
                fputc(' ', out);
            for (i = 0; k[i] != '\0'; i++)
                fputc(toupper((unsigned char)k[i]), out);
            for (i = strlen(k); !right && i < w; i++)
                fputc(' ', out);
        }
        fputc('\n', out);
    }
    for (r = 0; r < t->nrows; r++) {
        for (c = 0; c < nc; c++) {
            const char *e = esc[r * nc + c];
            bool right = t->cols[first + c].kind == TABLE_NUM;
            size_t i, w = !header ? 0 : c + 1 < nc || right ? width[c] : 0;

            if (c > 0)
                fputs(header ? "  " : "\t", out);
            for (i = strlen(e); right && i < w; i++)
                fputc(' ', out);
            print_lines(e, width, c, out);
            for (i = strlen(e); !right && i < w; i++)
                fputc(' ', out);
        }
        fputc('\n', out);
    }
    for (r = 0; r < t->nrows * nc; r++)
        free(esc[r]);
    free(esc);
    free(width);
    return ferror(out) ? -1 : 0;
}

int
table_print_records(const struct table *t, const char *const *nums, FILE *out)
{
    json_t *arr = json_array(), *o = NULL;
    size_t r;
    int rc;

    if (arr == NULL)
        return -1;
    for (r = 0; r < t->nrows; r++) {
        enum table_kind kind = TABLE_STR;
        size_t i;

        if (o == NULL || strcmp(cell(t, r, 0), cell(t, r - 1, 0)) != 0) {
            o = json_object();
            json_object_set_new(o, t->cols[0].key, json_str(cell(t, r, 0)));
            json_array_append_new(arr, o);
        }
        for (i = 0; nums[i] != NULL; i++)
            if (strcmp(nums[i], cell(t, r, 1)) == 0)
                kind = TABLE_NUM;
        json_object_set_new(o, cell(t, r, 1), json_cell(cell(t, r, 2), kind));
    }
    rc = json_dumpf(arr, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(arr);
    if (rc == 0 && fputc('\n', out) == EOF)
        rc = -1;
    if (fflush(out) != 0)
        rc = -1;
    return rc;
}

int
table_print(const struct table *t, enum cli_format fmt, size_t first, FILE *out)
{
    int rc;

    if (fmt == CLI_FORMAT_JSON)
        rc = print_json(t, out);
    else
        rc = print_text(t, fmt == CLI_FORMAT_TABLE, first, out);
    if (fflush(out) != 0)
        rc = -1;
    return rc;
}
