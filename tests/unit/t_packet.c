/*
 * The packet codec: valid packets of every shape decode to the right
 * arguments, encode back to the same bytes, and every kind of bad input is
 * told apart (need more, malformed but framed, framing lost).
 */
#include "config.h"

#include <string.h>

#include "proto/packet.h"
#include "tap.h"

static size_t
mk(unsigned char *out, size_t cap, const char *magic, uint32_t type, const void *payload,
   size_t len)
{
    unsigned char hdr[PACKET_HEADER_SIZE];

    packet_encode_header(hdr, PACKET_REQ, type, (uint32_t)len);
    memcpy(hdr, magic, 4);
    memcpy(out, hdr, sizeof(hdr));
    if (len > 0 && PACKET_HEADER_SIZE + len <= cap)
        memcpy(out + PACKET_HEADER_SIZE, payload, len);
    return PACKET_HEADER_SIZE + len;
}

static void
test_table(void)
{
    uint32_t t;
    int named = 0;

    for (t = 0; t < PACKET_TYPE_COUNT; t++)
        if (packet_info(t) != NULL)
            named++;
    tap_is_int(named, 41, "41 packet types are defined (1-42 but 5)");
    tap_ok(packet_info(0) == NULL && packet_info(5) == NULL && packet_info(43) == NULL,
           "types 0, 5 and 43 are not");
    tap_is_str(packet_name(PACKET_SUBMIT_JOB_EPOCH), "SUBMIT_JOB_EPOCH",
               "names come from the table");
    tap_is_str(packet_name(99), "UNKNOWN", "an unknown type is named UNKNOWN");
    tap_is_int(packet_info(PACKET_SUBMIT_JOB)->nargs, 3, "SUBMIT_JOB takes 3 arguments");
    tap_is_int(packet_info(PACKET_SUBMIT_JOB_SCHED)->nargs, 8, "SUBMIT_JOB_SCHED takes 8");
    tap_is_int(packet_info(PACKET_STATUS_RES_UNIQUE)->nargs, 6, "STATUS_RES_UNIQUE takes 6");
}

static void
test_decode_valid(void)
{
    unsigned char buf[256];
    static const char payload[] = "reverse\0uniq\0da\0ta"; /* data holds a NUL */
    size_t n = mk(buf, sizeof(buf), "\0REQ", PACKET_SUBMIT_JOB, payload, sizeof(payload) - 1);
    struct packet p;
    const char *why;
    size_t need;
    size_t i;

    tap_is_int(packet_decode(buf, n, 1024, &p, &need, &why), PACKET_OK, "SUBMIT_JOB decodes");
    tap_is_int((long long)need, (long long)n, "need is the whole packet");
    tap_is_int(p.magic, PACKET_REQ, "magic REQ");
    tap_is_int(p.nargs, 3, "three arguments");
    tap_is_mem(p.arg[0], p.arg_len[0], "reverse", 7, "function");
    tap_is_mem(p.arg[1], p.arg_len[1], "uniq", 4, "unique");
    tap_is_mem(p.arg[2], p.arg_len[2], "da\0ta", 5, "data keeps its NUL");

    for (i = 0; i < n; i++)
        if (packet_decode(buf, i, 1024, &p, &need, &why) != PACKET_NEED_MORE)
            break;
    tap_is_int((long long)i, (long long)n, "every prefix needs more");
    packet_decode(buf, 5, 1024, &p, &need, &why);
    tap_is_int((long long)need, PACKET_HEADER_SIZE, "before the header, need the header");
    packet_decode(buf, 13, 1024, &p, &need, &why);
    tap_is_int((long long)need, (long long)n, "after the header, need the packet");

    n = mk(buf, sizeof(buf), "\0REQ", PACKET_GRAB_JOB, NULL, 0);
    tap_is_int(packet_decode(buf, n, 1024, &p, &need, &why), PACKET_OK, "empty GRAB_JOB");
    tap_is_int(p.nargs, 0, "no arguments");

    n = mk(buf, sizeof(buf), "\0REQ", PACKET_SUBMIT_JOB, "f\0\0", 3);
    tap_is_int(packet_decode(buf, n, 1024, &p, &need, &why), PACKET_OK, "empty unique and data");
    tap_ok(p.arg_len[1] == 0 && p.arg_len[2] == 0, "both empty");

    n = mk(buf, sizeof(buf), "\0RES", PACKET_JOB_CREATED, "H:x:1", 5);
    tap_is_int(packet_decode(buf, n, 1024, &p, &need, &why), PACKET_OK, "a response decodes");
    tap_is_int(p.magic, PACKET_RES, "magic RES");

    n = mk(buf, sizeof(buf), "\0REQ", 99, "abc", 3);
    tap_is_int(packet_decode(buf, n, 1024, &p, &need, &why), PACKET_OK,
               "an unknown type is framed (the caller answers it)");
    tap_is_int(p.type, 99, "its type is kept");
}

static void
test_decode_invalid(void)
{
    unsigned char buf[256];
    struct packet p;
    const char *why;
    size_t need, n;

    n = mk(buf, sizeof(buf), "\0REX", PACKET_ECHO_REQ, "x", 1);
    tap_is_int(packet_decode(buf, n, 1024, &p, &need, &why), PACKET_FATAL, "bad magic is fatal");
    tap_is_str(why, "bad magic", "and says so");
    tap_is_int(packet_decode((const unsigned char *)"status\n", 7, 1024, &p, &need, &why),
               PACKET_FATAL, "text is not a packet");

    n = mk(buf, sizeof(buf), "\0REQ", PACKET_ECHO_REQ, "x", 1);
    buf[8] = 0x7f; /* declared size 2 GiB */
    tap_is_int(packet_decode(buf, PACKET_HEADER_SIZE, 1024, &p, &need, &why), PACKET_FATAL,
               "a declared size over the limit is fatal at once");
    tap_is_str(why, "packet too large", "and says so");

    n = mk(buf, sizeof(buf), "\0REQ", PACKET_SUBMIT_JOB, "fonly", 5);
    tap_is_int(packet_decode(buf, n, 1024, &p, &need, &why), PACKET_BAD,
               "SUBMIT_JOB with one argument is bad");
    tap_is_str(why, "too few arguments", "too few arguments");
    tap_is_int((long long)need, (long long)n, "but framed: skip the packet");

    n = mk(buf, sizeof(buf), "\0REQ", PACKET_WORK_STATUS,
           "H:1\0"
           "5",
           5);
    tap_is_int(packet_decode(buf, n, 1024, &p, &need, &why), PACKET_BAD,
               "WORK_STATUS without a denominator is bad");
    n = mk(buf, sizeof(buf), "\0REQ", PACKET_WORK_COMPLETE, "H:x:1", 5);
    tap_is_int(packet_decode(buf, n, 1024, &p, &need, &why), PACKET_OK,
               "WORK_COMPLETE with only a handle is read as empty data (Perl's worker sends it)");
    tap_ok(p.nargs == 2 && p.arg_len[0] == 5 && p.arg_len[1] == 0, "handle, then empty data");
    n = mk(buf, sizeof(buf), "\0REQ", PACKET_WORK_COMPLETE, "", 0);
    tap_is_int(packet_decode(buf, n, 1024, &p, &need, &why), PACKET_OK,
               "an empty WORK_COMPLETE: empty handle (the server finds no such job)");
    n = mk(buf, sizeof(buf), "\0REQ", PACKET_SUBMIT_JOB_EPOCH, "f\0u\0", 4);
    tap_is_int(packet_decode(buf, n, 1024, &p, &need, &why), PACKET_BAD,
               "SUBMIT_JOB_EPOCH without data is bad");
}

static void
test_decode_header(void)
{
    unsigned char buf[64];
    struct packet_header h;
    size_t n;

    n = mk(buf, sizeof(buf), "\0REQ", PACKET_SUBMIT_JOB, "f\0u\0d", 5);
    tap_is_int(packet_decode_header(buf, n, 1024, &h), PACKET_HEADER_OK, "header: OK");
    tap_ok(h.magic == PACKET_REQ && h.type == PACKET_SUBMIT_JOB && h.size == 5,
           "header: magic, type and size read");
    tap_is_int(packet_decode_header(buf, PACKET_HEADER_SIZE - 1, 1024, &h), PACKET_HEADER_NEED_MORE,
               "header: 11 bytes need more");
    tap_is_int(packet_decode_header(buf, n, 4, &h), PACKET_HEADER_TOO_LARGE,
               "header: a size over max_size is TOO_LARGE");
    tap_ok(h.type == PACKET_SUBMIT_JOB && h.size == 5, "and its type and size are read");
    tap_is_int(packet_decode_header(buf, n, 5, &h), PACKET_HEADER_OK, "a size of max_size is OK");
    tap_is_int(packet_decode_header((const unsigned char *)"s", 1, 1024, &h),
               PACKET_HEADER_BAD_MAGIC, "header: a first byte other than NUL is BAD_MAGIC at once");
    n = mk(buf, sizeof(buf), "\0RXS", PACKET_ECHO_REQ, "x", 1);
    tap_is_int(packet_decode_header(buf, 4, 1024, &h), PACKET_HEADER_NEED_MORE,
               "header: a NUL then 3 bytes need more");
    tap_is_int(packet_decode_header(buf, n, 1024, &h), PACKET_HEADER_BAD_MAGIC,
               "header: \\0RXS is BAD_MAGIC");
}

static void
test_encode(void)
{
    unsigned char buf[64], small[8];
    const void *args[3] = {"H:a:1", "f", "d\0x"};
    size_t lens[3] = {5, 1, 3};
    struct packet p;
    const char *why;
    size_t need, n;

    n = packet_encode(buf, sizeof(buf), PACKET_RES, PACKET_JOB_ASSIGN, 3, args, lens);
    tap_is_int((long long)n, PACKET_HEADER_SIZE + 11, "encoded size: header + args + 2 NULs");
    tap_is_mem(buf, 4, "\0RES", 4, "RES magic");
    tap_is_mem(buf + 4, 8, "\0\0\0\x0b\0\0\0\x0b", 8, "type 11 and size 11, big-endian");
    tap_is_int(packet_decode(buf, n, 1024, &p, &need, &why), PACKET_OK, "round trip decodes");
    tap_is_mem(p.arg[2], p.arg_len[2], "d\0x", 3, "round trip keeps data");
    tap_is_int((long long)packet_encode(small, sizeof(small), PACKET_RES, PACKET_JOB_ASSIGN, 3,
                                        args, lens),
               (long long)n, "too small a buffer: the size is still returned");
    tap_is_int((long long)packet_encode(buf, sizeof(buf), PACKET_REQ, PACKET_NOOP, 0, NULL, NULL),
               PACKET_HEADER_SIZE, "no arguments: header only");
}

int
main(void)
{
    test_table();
    test_decode_valid();
    test_decode_invalid();
    test_decode_header();
    test_encode();
    return tap_done();
}
