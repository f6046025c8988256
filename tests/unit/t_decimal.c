/*
 * The decimal scanner: the strict reading refuses everything but a plain
 * run of digits within the maximum (empty, signs, spaces, trailing bytes,
 * overflow at any length), and the atoi reading takes the leading digits
 * and saturates.
 */
#include "config.h"

#include <string.h>

#include "proto/decimal.h"
#include "tap.h"

/* decimal_parse of a C string; -1, or 0 with *v. */
static int
parse(const char *s, uint64_t max, uint64_t *v)
{
    *v = 12345; /* must stay put on failure */
    return decimal_parse(s, strlen(s), max, v);
}

static void
test_strict(void)
{
    uint64_t v;

    tap_ok(parse("0", 10, &v) == 0 && v == 0, "\"0\" is 0");
    tap_ok(parse("1500", UINT32_MAX, &v) == 0 && v == 1500, "\"1500\" is 1500");
    tap_ok(parse("007", 10, &v) == 0 && v == 7, "leading zeros are digits");
    tap_ok(parse("", 10, &v) < 0 && v == 12345, "empty: refused, *out unchanged");
    tap_ok(parse("-1", UINT32_MAX, &v) < 0, "a minus sign: refused");
    tap_ok(parse("+1", UINT32_MAX, &v) < 0, "a plus sign: refused");
    tap_ok(parse(" 1", UINT32_MAX, &v) < 0, "a leading space: refused");
    tap_ok(parse("1 ", UINT32_MAX, &v) < 0, "a trailing space: refused");
    tap_ok(parse("12x", UINT32_MAX, &v) < 0 && v == 12345, "trailing bytes: refused");
    tap_ok(decimal_parse("12\0"
                         "3",
                         4, UINT32_MAX, &v) < 0,
           "a NUL inside: refused");
    tap_ok(decimal_parse("123", 2, UINT32_MAX, &v) == 0 && v == 12,
           "only len bytes are read (no NUL needed)");
    tap_ok(parse("4294967295", UINT32_MAX, &v) == 0 && v == UINT32_MAX,
           "the max value itself is taken");
    tap_ok(parse("4294967296", UINT32_MAX, &v) < 0, "max + 1: refused");
    tap_ok(parse("9223372036854775807", INT64_MAX, &v) == 0 && v == (uint64_t)INT64_MAX,
           "INT64_MAX with that max");
    tap_ok(parse("18446744073709551615", UINT64_MAX, &v) == 0 && v == UINT64_MAX,
           "UINT64_MAX with that max");
    tap_ok(parse("18446744073709551616", UINT64_MAX, &v) < 0, "past UINT64_MAX: refused");
    tap_ok(parse("99999999999999999999999999999999", UINT64_MAX, &v) < 0,
           "32 digits: refused, no wrap-around");
    tap_ok(parse("5", 0, &v) < 0 && parse("0", 0, &v) == 0, "with max 0 only 0 is taken");
    tap_ok(parse("10", 9, &v) < 0 && parse("9", 9, &v) == 0, "max 9: 9 yes, 10 no");
}

static void
test_atoi(void)
{
    tap_is_int((long long)decimal_atoi("37", 2, UINT32_MAX), 37, "atoi: \"37\" is 37");
    tap_is_int((long long)decimal_atoi("abc", 3, UINT32_MAX), 0, "atoi: \"abc\" is 0 (gearmand)");
    tap_is_int((long long)decimal_atoi("1/2", 3, UINT32_MAX), 1, "atoi: \"1/2\" is 1 (gearmand)");
    tap_is_int((long long)decimal_atoi("", 0, UINT32_MAX), 0, "atoi: empty is 0");
    tap_is_int((long long)decimal_atoi("-5", 2, UINT32_MAX), 0, "atoi: a sign stops it: 0");
    tap_is_int((long long)decimal_atoi("99999999999", 11, UINT32_MAX), UINT32_MAX,
               "atoi: over the max saturates at it");
    tap_is_int((long long)decimal_atoi("4294967295", 10, UINT32_MAX), UINT32_MAX,
               "atoi: the max value itself");
}

int
main(void)
{
    test_strict();
    test_atoi();
    return tap_done();
}
