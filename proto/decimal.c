/*
 * Decimal scanning. Both readings share one loop, which stops at the first
 * byte that is not a digit and notices a value over the caller's maximum
 * as soon as it passes it, so that no input, however long, can overflow.
 */
#include "config.h"
#include "decimal.h"

#include <stdbool.h>

/* Scan the leading digits of s: returns how many, with their value (saturated at max) in *v. */
static size_t
scan(const unsigned char *s, size_t len, uint64_t max, uint64_t *v, bool *over)
{
    size_t i;

    *v = 0;
    *over = false;
    for (i = 0; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        unsigned d = (unsigned)(s[i] - '0');

        if (*over)
            continue;
        if (d > max || *v > (max - d) / 10) {
            *over = true;
            *v = max;
        } else {
            *v = *v * 10 + d;
        }
    }
    return i;
}

int
decimal_parse(const void *s, size_t len, uint64_t max, uint64_t *out)
{
    uint64_t v;
    bool over;

    if (len == 0 || scan(s, len, max, &v, &over) != len || over)
        return -1;
    *out = v;
    return 0;
}

uint64_t
decimal_atoi(const void *s, size_t len, uint64_t max)
{
    uint64_t v;
    bool over;

    scan(s, len, max, &v, &over);
    return v;
}
