/*
 * Fuzz the packet decoder: decode a stream of packets from arbitrary bytes
 * as the server's framing loop does (peek, then need, then decode), and
 * check that every packet it accepts re-encodes to the same bytes and that
 * no argument points outside the input.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "proto/packet.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t at = 0;

    while (at < size) {
        struct packet p;
        const char *why;
        size_t need;
        enum packet_status st = packet_decode(data + at, size - at, 1 << 20, &p, &need, &why);
        unsigned i;

        if (st == PACKET_NEED_MORE) {
            if (need <= size - at)
                abort(); /* claimed to need bytes it had */
            break;
        }
        if (st == PACKET_FATAL) {
            if (why == NULL)
                abort();
            break;
        }
        if (need < PACKET_HEADER_SIZE || need > size - at)
            abort();
        if (st == PACKET_OK && packet_info(p.type) != NULL) {
            const void *args[PACKET_MAX_ARGS];
            unsigned char *out = malloc(need);
            size_t n;

            for (i = 0; i < p.nargs; i++) {
                if (p.arg[i] < data + at || p.arg[i] + p.arg_len[i] > data + at + need)
                    abort();
                args[i] = p.arg[i];
            }
            if (p.nargs == 0) {
                /* a type without arguments: its payload, if any, is ignored */
            } else if (packet_args_size(p.nargs, p.arg_len) == p.size) {
                n = packet_encode(out, need, p.magic, p.type, p.nargs, args, p.arg_len);
                if (n != need || memcmp(out, data + at, need) != 0)
                    abort(); /* decode and encode disagree */
            } else if (packet_info(p.type)->min_nargs == 0 ||
                       packet_args_size(p.nargs, p.arg_len) > p.size + p.nargs) {
                abort(); /* only a tolerated packet may lack trailing arguments */
            }
            free(out);
        }
        at += need;
    }
    return 0;
}
