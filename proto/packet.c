/*
 * Gearman packet codec. A packet is a 12-byte header (magic "\0REQ" or
 * "\0RES", type and payload size as big-endian 32-bit words) and a payload
 * of NUL-separated arguments, the last of which is opaque and may hold NULs.
 * Decoding is done on a contiguous buffer in one pass: the caller peeks the
 * header first, learns the full size from *need, and comes back when it has
 * that many bytes. Validation that needs no server state (magic, size,
 * argument count) lives here so that every peer rejects the same packets.
 */
#include "config.h"
#include "packet.h"

#include <string.h>

static const struct packet_info packet_table[PACKET_TYPE_COUNT] = {
    [PACKET_CAN_DO] = {"CAN_DO", 1},
    [PACKET_CANT_DO] = {"CANT_DO", 1},
    [PACKET_RESET_ABILITIES] = {"RESET_ABILITIES", 0},
    [PACKET_PRE_SLEEP] = {"PRE_SLEEP", 0},
    [PACKET_NOOP] = {"NOOP", 0},
    [PACKET_SUBMIT_JOB] = {"SUBMIT_JOB", 3},
    [PACKET_JOB_CREATED] = {"JOB_CREATED", 1},
    [PACKET_GRAB_JOB] = {"GRAB_JOB", 0},
    [PACKET_NO_JOB] = {"NO_JOB", 0},
    [PACKET_JOB_ASSIGN] = {"JOB_ASSIGN", 3},
    [PACKET_WORK_STATUS] = {"WORK_STATUS", 3},
    /*
     * A result packet whose data is empty may arrive without the NUL before
     * it: Perl's Gearman::Worker sends WORK_COMPLETE that way for a job
     * that returned "" or "0". Read the missing data as empty.
     */
    [PACKET_WORK_COMPLETE] = {"WORK_COMPLETE", 2, 1},
    [PACKET_WORK_FAIL] = {"WORK_FAIL", 1},
    [PACKET_GET_STATUS] = {"GET_STATUS", 1},
    [PACKET_ECHO_REQ] = {"ECHO_REQ", 1},
    [PACKET_ECHO_RES] = {"ECHO_RES", 1},
    [PACKET_SUBMIT_JOB_BG] = {"SUBMIT_JOB_BG", 3},
    [PACKET_ERROR] = {"ERROR", 2},
    [PACKET_STATUS_RES] = {"STATUS_RES", 5},
    [PACKET_SUBMIT_JOB_HIGH] = {"SUBMIT_JOB_HIGH", 3},
    [PACKET_SET_CLIENT_ID] = {"SET_CLIENT_ID", 1},
    [PACKET_CAN_DO_TIMEOUT] = {"CAN_DO_TIMEOUT", 2},
    [PACKET_ALL_YOURS] = {"ALL_YOURS", 0},
    [PACKET_WORK_EXCEPTION] = {"WORK_EXCEPTION", 2, 1},
    [PACKET_OPTION_REQ] = {"OPTION_REQ", 1},
    [PACKET_OPTION_RES] = {"OPTION_RES", 1},
    [PACKET_WORK_DATA] = {"WORK_DATA", 2, 1},
    [PACKET_WORK_WARNING] = {"WORK_WARNING", 2, 1},
    [PACKET_GRAB_JOB_UNIQ] = {"GRAB_JOB_UNIQ", 0},
    [PACKET_JOB_ASSIGN_UNIQ] = {"JOB_ASSIGN_UNIQ", 4},
    [PACKET_SUBMIT_JOB_HIGH_BG] = {"SUBMIT_JOB_HIGH_BG", 3},
    [PACKET_SUBMIT_JOB_LOW] = {"SUBMIT_JOB_LOW", 3},
    [PACKET_SUBMIT_JOB_LOW_BG] = {"SUBMIT_JOB_LOW_BG", 3},
    [PACKET_SUBMIT_JOB_SCHED] = {"SUBMIT_JOB_SCHED", 8},
    [PACKET_SUBMIT_JOB_EPOCH] = {"SUBMIT_JOB_EPOCH", 4},
    [PACKET_SUBMIT_REDUCE_JOB] = {"SUBMIT_REDUCE_JOB", 5},
    [PACKET_SUBMIT_REDUCE_JOB_BACKGROUND] = {"SUBMIT_REDUCE_JOB_BACKGROUND", 5},
    [PACKET_GRAB_JOB_ALL] = {"GRAB_JOB_ALL", 0},
    [PACKET_JOB_ASSIGN_ALL] = {"JOB_ASSIGN_ALL", 5},
    [PACKET_GET_STATUS_UNIQUE] = {"GET_STATUS_UNIQUE", 1},
    [PACKET_STATUS_RES_UNIQUE] = {"STATUS_RES_UNIQUE", 6},
};

_Static_assert(PACKET_TYPE_COUNT == 43, "packet_table must cover every type");

const struct packet_info *
packet_info(uint32_t type)
{
    if (type >= PACKET_TYPE_COUNT || packet_table[type].name == NULL)
        return NULL;
    return &packet_table[type];
}

const char *
packet_name(uint32_t type)
{
    const struct packet_info *info = packet_info(type);

    return info ? info->name : "UNKNOWN";
}

static uint32_t
get_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void
put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/*
 * Split the payload into info->nargs arguments: all but the last end at a
 * NUL, the last runs to the end. Returns false if there are too few NULs,
 * unless the ones missing are past info->min_nargs (then they are empty).
 */
static bool
split_args(struct packet *p, const struct packet_info *info)
{
    const unsigned char *at = p->payload;
    const unsigned char *end = p->payload + p->size;
    unsigned nargs = info->nargs;
    unsigned i;

    p->nargs = nargs;
    for (i = 0; i + 1 < nargs; i++) {
        const unsigned char *nul = at < end ? memchr(at, '\0', (size_t)(end - at)) : NULL;

        if (nul == NULL && info->min_nargs > 0 && i + 1 >= info->min_nargs) {
            /* The rest is the last present argument, and the missing ones are empty. */
            p->arg[i] = at;
            p->arg_len[i] = (size_t)(end - at);
            for (i++; i < nargs; i++) {
                p->arg[i] = end;
                p->arg_len[i] = 0;
            }
            return true;
        }
        if (nul == NULL)
            return false;
        p->arg[i] = at;
        p->arg_len[i] = (size_t)(nul - at);
        at = nul + 1;
    }
    if (nargs > 0) {
        p->arg[nargs - 1] = at;
        p->arg_len[nargs - 1] = (size_t)(end - at);
    }
    return true;
}

enum packet_header_status
packet_decode_header(const unsigned char *buf, size_t len, size_t max_size, struct packet_header *h)
{
    /* A wrong magic byte is fatal as soon as it is seen: no use waiting. */
    if (len > 0 && buf[0] != '\0')
        return PACKET_HEADER_BAD_MAGIC;
    if (len < PACKET_HEADER_SIZE)
        return PACKET_HEADER_NEED_MORE;
    if (memcmp(buf, "\0REQ", 4) == 0)
        h->magic = PACKET_REQ;
    else if (memcmp(buf, "\0RES", 4) == 0)
        h->magic = PACKET_RES;
    else
        return PACKET_HEADER_BAD_MAGIC;
    h->type = get_be32(buf + 4);
    h->size = get_be32(buf + 8);
    return h->size > max_size ? PACKET_HEADER_TOO_LARGE : PACKET_HEADER_OK;
}

enum packet_status
packet_decode(const unsigned char *buf, size_t len, size_t max_size, struct packet *p, size_t *need,
              const char **why)
{
    const struct packet_info *info;
    struct packet_header h;
    enum packet_header_status st;

    *need = PACKET_HEADER_SIZE;
    *why = NULL;
    st = packet_decode_header(buf, len, max_size, &h);
    if (st == PACKET_HEADER_NEED_MORE)
        return PACKET_NEED_MORE;
    if (st == PACKET_HEADER_BAD_MAGIC) {
        *why = "bad magic";
        return PACKET_FATAL;
    }
    p->magic = h.magic;
    p->type = h.type;
    p->size = h.size;
    if (st == PACKET_HEADER_TOO_LARGE) {
        *why = "packet too large";
        return PACKET_FATAL;
    }
    *need = PACKET_HEADER_SIZE + (size_t)p->size;
    if (len < *need)
        return PACKET_NEED_MORE;
    p->payload = buf + PACKET_HEADER_SIZE;
    p->nargs = 0;
    info = packet_info(p->type);
    if (info == NULL)
        return PACKET_OK;
    if (!split_args(p, info)) {
        *why = "too few arguments";
        return PACKET_BAD;
    }
    return PACKET_OK;
}

void
packet_encode_header(unsigned char out[PACKET_HEADER_SIZE], enum packet_magic magic, uint32_t type,
                     uint32_t size)
{
    memcpy(out, magic == PACKET_REQ ? "\0REQ" : "\0RES", 4);
    put_be32(out + 4, type);
    put_be32(out + 8, size);
}

size_t
packet_args_size(unsigned nargs, const size_t *lens)
{
    size_t size = nargs > 0 ? nargs - 1 : 0;
    unsigned i;

    for (i = 0; i < nargs; i++)
        size += lens[i];
    return size;
}

size_t
packet_encode(unsigned char *out, size_t cap, enum packet_magic magic, uint32_t type,
              unsigned nargs, const void *const *args, const size_t *lens)
{
    size_t size = packet_args_size(nargs, lens);
    size_t total = PACKET_HEADER_SIZE + size;
    unsigned char *at;
    unsigned i;

    if (total > cap || size > UINT32_MAX)
        return total;
    packet_encode_header(out, magic, type, (uint32_t)size);
    at = out + PACKET_HEADER_SIZE;
    for (i = 0; i < nargs; i++) {
        if (lens[i] > 0)
            memcpy(at, args[i], lens[i]);
        at += lens[i];
        if (i + 1 < nargs)
            *at++ = '\0';
    }
    return total;
}
