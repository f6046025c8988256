/*
 * Decimal numbers in protocol arguments and admin words: byte strings with
 * a length, not NUL-terminated. One scanner, read two ways: strictly, for
 * values a request is refused over (a timeout, an epoch time, a maxqueue
 * limit), and as gearmand's atoi reads them, for values it passes on
 * whatever they hold (WORK_STATUS numbers). Pure: no I/O, no allocation.
 */
#ifndef DSJOB_PROTO_DECIMAL_H
#define DSJOB_PROTO_DECIMAL_H

#include <stddef.h>
#include <stdint.h>

/*
 * decimal_parse reads the len bytes at s (borrowed) as an unsigned decimal
 * number of at most max. They must all be ASCII digits, at least one: no
 * sign, no space, nothing after. Returns 0 with *out set, or -1 (empty, a
 * byte other than a digit, or a value over max) with *out unchanged.
 */
int decimal_parse(const void *s, size_t len, uint64_t max, uint64_t *out);

/*
 * decimal_atoi reads the digits the len bytes at s (borrowed) start with,
 * as atoi reads a non-negative number: no leading digit gives 0, the first
 * other byte ends the number, and a value over max gives max.
 */
uint64_t decimal_atoi(const void *s, size_t len, uint64_t max);

#endif
