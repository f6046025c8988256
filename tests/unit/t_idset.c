/*
 * The id set against a plain reference (a bitmap): random adds and
 * deletes over a small range, so that probe runs collide and the
 * backward-shift delete is exercised, plus id 0, ids near UINT64_MAX,
 * growth far past the first table, listing, and release.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "server/idset.h"
#include "tap.h"

#define RANGE 4096 /* ids 0..RANGE-1 in the random part */

static bool
same_as(const struct idset *s, const bool *ref, size_t *bad)
{
    size_t i, n = 0;

    *bad = RANGE;
    for (i = 0; i < RANGE; i++) {
        n += ref[i];
        if (idset_has(s, i) != ref[i]) {
            *bad = i;
            return false;
        }
    }
    return idset_count(s) == n;
}

static void
test_basics(void)
{
    struct idset s = {0};
    uint64_t *ids;

    tap_ok(!idset_has(&s, 1) && !idset_has(&s, 0), "empty: has nothing, not even 0");
    tap_is_int((long long)idset_count(&s), 0, "empty: counts 0");
    idset_del(&s, 5); /* not an error on an empty set */
    tap_is_int(idset_add(&s, 0), 0, "add 0");
    tap_is_int(idset_add(&s, UINT64_MAX), 0, "add UINT64_MAX");
    tap_is_int(idset_add(&s, 42), 0, "add 42");
    tap_is_int(idset_add(&s, 42), 0, "add 42 again");
    tap_is_int((long long)idset_count(&s), 3, "a duplicate counts once");
    tap_ok(idset_has(&s, 0) && idset_has(&s, UINT64_MAX) && idset_has(&s, 42) && !idset_has(&s, 43),
           "has what was added and nothing else");
    ids = idset_list(&s);
    tap_ok(ids != NULL, "list");
    if (ids != NULL) {
        bool z = false, m = false, f = false;

        for (int i = 0; i < 3; i++)
            z |= ids[i] == 0, m |= ids[i] == UINT64_MAX, f |= ids[i] == 42;
        tap_ok(z && m && f, "list gives each id once");
        free(ids);
    }
    idset_del(&s, 0);
    idset_del(&s, 42);
    idset_del(&s, 42);
    tap_ok(!idset_has(&s, 0) && !idset_has(&s, 42) && idset_has(&s, UINT64_MAX),
           "delete takes out exactly what it names");
    tap_is_int((long long)idset_count(&s), 1, "one left");
    idset_release(&s);
    tap_ok(s.slots == NULL && idset_count(&s) == 0 && !idset_has(&s, UINT64_MAX),
           "release leaves an empty set");
}

static void
test_random(void)
{
    static bool ref[RANGE];
    struct idset s = {0};
    uint32_t x = 12345;
    size_t round, i, bad;
    bool ok = true;

    for (round = 0; round < 20 && ok; round++) {
        for (i = 0; i < 5000; i++) {
            uint64_t id;

            x ^= x << 13, x ^= x >> 17, x ^= x << 5; /* xorshift32 */
            id = x % RANGE;
            /* more adds early, more deletes late: the table grows, then thins out */
            if ((x >> 16) % 20 < (round < 10 ? 14u : 6u)) {
                if (idset_add(&s, id) != 0)
                    tap_bail("out of memory");
                ref[id] = true;
            } else {
                idset_del(&s, id);
                ref[id] = false;
            }
        }
        ok = same_as(&s, ref, &bad);
    }
    if (!tap_ok(ok, "100,000 random adds and deletes agree with a bitmap"))
        tap_diag("first difference at id %zu, round %zu", bad, round);
    for (i = 0; i < RANGE; i++)
        idset_del(&s, i);
    tap_is_int((long long)idset_count(&s), 0, "deleting every id empties it");
    idset_release(&s);
}

static void
test_growth(void)
{
    enum { N = 200000 };
    struct idset s = {0};
    uint64_t i, *ids;
    size_t missing = 0;

    for (i = 1; i <= N; i++)
        if (idset_add(&s, i * 0x9e3779b97f4a7c15ULL) != 0)
            tap_bail("out of memory");
    tap_is_int((long long)idset_count(&s), N, "growth: %d ids", N);
    for (i = 1; i <= N; i++)
        missing += !idset_has(&s, i * 0x9e3779b97f4a7c15ULL);
    tap_is_int((long long)missing, 0, "growth: every one is found after the table grew");
    tap_ok(s.cap >= N && (s.cap & (s.cap - 1)) == 0, "growth: the table is a power of two >= N");
    ids = idset_list(&s);
    if (ids != NULL) {
        size_t k, found = 0;
        struct idset again = {0};

        for (k = 0; k < N; k++)
            if (idset_add(&again, ids[k]) == 0)
                found++;
        tap_ok(found == N && idset_count(&again) == N, "growth: list gives N distinct ids");
        idset_release(&again);
        free(ids);
    } else {
        tap_ok(false, "growth: list");
    }
    idset_release(&s);
}

int
main(void)
{
    test_basics();
    test_random();
    test_growth();
    return tap_done();
}
