/*
 * The memcached store's index values without a memcached: the format
 * mark, the head both ways, how a batch is cut into chunks (adds before
 * removes, at most per ids a chunk, one chunk even when empty), replaying
 * chunks into an id set, and values that are not ours or are newer.
 */
#include "config.h"

#include <string.h>

#include "server/mcindex.h"
#include "tap.h"

static void
test_magic(void)
{
    unsigned char v[8];

    mcindex_put_magic(v);
    tap_is_int(mcindex_check_magic(v, MCINDEX_BODY), 0, "magic: ours");
    v[MCINDEX_MAGIC_LEN] = MCINDEX_FORMAT_VERSION + 1;
    tap_is_int(mcindex_check_magic(v, MCINDEX_BODY), -2, "magic: a newer version");
    v[MCINDEX_MAGIC_LEN] = 0;
    tap_is_int(mcindex_check_magic(v, MCINDEX_BODY), -1, "magic: an older, unknown version");
    tap_is_int(mcindex_check_magic((const unsigned char *)"dsj", 3), -1, "magic: too short");
    tap_is_int(mcindex_check_magic((const unsigned char *)"hello", 5), -1, "magic: not ours");
}

static void
test_head(void)
{
    unsigned char v[MCINDEX_HEAD_LEN + 1];
    uint64_t first = 0, next = 0;

    mcindex_head_encode(v, 7, 0x0102030405060708ULL);
    tap_is_int(mcindex_head_decode(v, MCINDEX_HEAD_LEN, &first, &next), 0, "head: decodes");
    tap_ok(first == 7 && next == 0x0102030405060708ULL, "head: first and next come back");
    tap_ok(v[MCINDEX_BODY] == 7 && v[MCINDEX_BODY + 8] == 0x08, "head: little-endian");
    first = next = 99;
    tap_is_int(mcindex_head_decode(v, MCINDEX_HEAD_LEN + 1, &first, &next), -1,
               "head: a wrong length is not a head");
    tap_ok(first == 99 && next == 99, "head: and leaves first and next alone");
    mcindex_head_encode(v, 9, 8);
    tap_is_int(mcindex_head_decode(v, MCINDEX_HEAD_LEN, &first, &next), -1,
               "head: first past next is not a head");
    v[MCINDEX_MAGIC_LEN] = MCINDEX_FORMAT_VERSION + 1;
    tap_is_int(mcindex_head_decode(v, MCINDEX_HEAD_LEN, &first, &next), -2,
               "head: a newer format says so");
}

static void
test_chunks(void)
{
    static const uint64_t adds[] = {1, 2, 3, 4, 5}, removes[] = {6, 7};
    unsigned char buf[MCINDEX_CHUNK_LEN(3)];
    struct idset live = {0};
    size_t k, len, want_add[] = {3, 2, 0}, want_rem[] = {0, 1, 1};
    bool layout = true, all = true;
    uint64_t id;

    tap_is_int((long long)mcindex_chunks(0, 0, 3), 1, "chunks: nothing still takes one");
    tap_is_int((long long)mcindex_chunks(10, 0, 3), 4, "chunks: 10 ids at 3 a chunk are 4");
    tap_is_int((long long)mcindex_chunks(3, 3, 3), 2, "chunks: 6 ids at 3 a chunk are 2");
    tap_is_int((long long)mcindex_chunks(5, 2, 3), 3, "chunks: 7 ids at 3 a chunk are 3");
    idset_add(&live, 6);
    idset_add(&live, 7);
    for (k = 0; k < 3; k++) {
        len = mcindex_chunk_encode(buf, adds, 5, removes, 2, 3, k);
        layout = layout && len == MCINDEX_CHUNK_LEN(want_add[k] + want_rem[k]) &&
                 mcindex_get_u32(buf + MCINDEX_BODY) == want_add[k] &&
                 mcindex_get_u32(buf + MCINDEX_BODY + 4) == want_rem[k];
        all = all && mcindex_chunk_apply(buf, len, &live) == 0;
    }
    tap_ok(layout, "chunks: adds fill the first chunks, removes follow, 3 ids at most");
    len = mcindex_chunk_encode(buf, adds, 5, removes, 2, 3, 1);
    tap_ok(mcindex_get_u64(buf + MCINDEX_CHUNK_HEADER) == 4 &&
               mcindex_get_u64(buf + MCINDEX_CHUNK_HEADER + 16) == 6,
           "chunks: the middle chunk holds adds 4, 5 and remove 6");
    tap_ok(all, "chunks: each applies");
    for (id = 1, all = true; id <= 5; id++)
        all = all && idset_has(&live, id);
    tap_ok(all && !idset_has(&live, 6) && !idset_has(&live, 7) && idset_count(&live) == 5,
           "chunks: replayed in order they give the adds less the removes");
    len = mcindex_chunk_encode(buf, NULL, 0, NULL, 0, 3, 0);
    tap_ok(len == MCINDEX_CHUNK_HEADER && mcindex_chunk_apply(buf, len, &live) == 0 &&
               idset_count(&live) == 5,
           "chunks: an empty chunk applies and changes nothing");
    idset_release(&live);
}

static void
test_bad_chunks(void)
{
    static const uint64_t adds[] = {11, 12};
    unsigned char buf[MCINDEX_CHUNK_LEN(2) + 8];
    struct idset live = {0};
    size_t len = mcindex_chunk_encode(buf, adds, 2, NULL, 0, 2, 0);

    tap_is_int(mcindex_chunk_apply(buf, len - 8, &live), -1, "bad chunk: fewer ids than it says");
    memset(buf + len, 0, 8);
    tap_is_int(mcindex_chunk_apply(buf, len + 8, &live), -1, "bad chunk: more ids than it says");
    tap_is_int(mcindex_chunk_apply(buf, len - 3, &live), -1, "bad chunk: a torn id");
    tap_is_int(mcindex_chunk_apply(buf, MCINDEX_CHUNK_HEADER - 1, &live), -1,
               "bad chunk: shorter than its header");
    buf[MCINDEX_MAGIC_LEN] = MCINDEX_FORMAT_VERSION + 1;
    tap_is_int(mcindex_chunk_apply(buf, len, &live), -2, "bad chunk: a newer format says so");
    buf[0] = 'x';
    tap_is_int(mcindex_chunk_apply(buf, len, &live), -1, "bad chunk: not ours");
    tap_is_int((long long)idset_count(&live), 0, "bad chunk: a refused chunk adds nothing");
    idset_release(&live);
}

int
main(void)
{
    test_magic();
    test_head();
    test_chunks();
    test_bad_chunks();
    return tap_done();
}
