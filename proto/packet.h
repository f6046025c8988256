/*
 * The Gearman binary packet codec: a pure function from bytes to packets and
 * back, shared by the server and the client and worker libraries. It does no
 * I/O and never allocates: a decoded packet points into the caller's bytes.
 */
#ifndef DSJOB_PROTO_PACKET_H
#define DSJOB_PROTO_PACKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PACKET_HEADER_SIZE 12
#define PACKET_MAX_ARGS 8

/* Packet types, numbered as on the wire. */
enum packet_type {
    PACKET_CAN_DO = 1,
    PACKET_CANT_DO = 2,
    PACKET_RESET_ABILITIES = 3,
    PACKET_PRE_SLEEP = 4,
    PACKET_UNUSED_5 = 5,
    PACKET_NOOP = 6,
    PACKET_SUBMIT_JOB = 7,
    PACKET_JOB_CREATED = 8,
    PACKET_GRAB_JOB = 9,
    PACKET_NO_JOB = 10,
    PACKET_JOB_ASSIGN = 11,
    PACKET_WORK_STATUS = 12,
    PACKET_WORK_COMPLETE = 13,
    PACKET_WORK_FAIL = 14,
    PACKET_GET_STATUS = 15,
    PACKET_ECHO_REQ = 16,
    PACKET_ECHO_RES = 17,
    PACKET_SUBMIT_JOB_BG = 18,
    PACKET_ERROR = 19,
    PACKET_STATUS_RES = 20,
    PACKET_SUBMIT_JOB_HIGH = 21,
    PACKET_SET_CLIENT_ID = 22,
    PACKET_CAN_DO_TIMEOUT = 23,
    PACKET_ALL_YOURS = 24,
    PACKET_WORK_EXCEPTION = 25,
    PACKET_OPTION_REQ = 26,
    PACKET_OPTION_RES = 27,
    PACKET_WORK_DATA = 28,
    PACKET_WORK_WARNING = 29,
    PACKET_GRAB_JOB_UNIQ = 30,
    PACKET_JOB_ASSIGN_UNIQ = 31,
    PACKET_SUBMIT_JOB_HIGH_BG = 32,
    PACKET_SUBMIT_JOB_LOW = 33,
    PACKET_SUBMIT_JOB_LOW_BG = 34,
    PACKET_SUBMIT_JOB_SCHED = 35,
    PACKET_SUBMIT_JOB_EPOCH = 36,
    PACKET_SUBMIT_REDUCE_JOB = 37,
    PACKET_SUBMIT_REDUCE_JOB_BACKGROUND = 38,
    PACKET_GRAB_JOB_ALL = 39,
    PACKET_JOB_ASSIGN_ALL = 40,
    PACKET_GET_STATUS_UNIQUE = 41,
    PACKET_STATUS_RES_UNIQUE = 42,
    PACKET_TYPE_COUNT /* one past the last type */
};

/* Static facts about one packet type. */
struct packet_info {
    const char *name;   /* "SUBMIT_JOB", as the protocol names it */
    unsigned nargs;     /* arguments; the last one runs to the end of the payload */
    unsigned min_nargs; /* arguments that must be present; missing later ones are empty */
};

/* Magic of a packet: requests come from clients and workers, responses from the server. */
enum packet_magic {
    PACKET_REQ,
    PACKET_RES,
};

/* A decoded packet. Every pointer is borrowed from the decoded bytes. */
struct packet {
    enum packet_magic magic;                   /* REQ or RES */
    uint32_t type;                             /* enum packet_type, or any other value read */
    uint32_t size;                             /* payload bytes */
    const unsigned char *payload;              /* the payload itself */
    unsigned nargs;                            /* arguments split out (packet_info nargs) */
    const unsigned char *arg[PACKET_MAX_ARGS]; /* each argument's first byte */
    size_t arg_len[PACKET_MAX_ARGS];           /* each argument's length */
};

/* The fixed fields of a packet, as packet_decode_header reads them. */
struct packet_header {
    enum packet_magic magic; /* REQ or RES */
    uint32_t type;           /* enum packet_type, or any other value read */
    uint32_t size;           /* declared payload bytes */
};

/* What packet_decode_header found. */
enum packet_header_status {
    PACKET_HEADER_NEED_MORE, /* fewer than PACKET_HEADER_SIZE bytes, none wrong so far */
    PACKET_HEADER_OK,        /* a header declaring at most max_size payload bytes */
    PACKET_HEADER_BAD_MAGIC, /* not "\0REQ" or "\0RES": the framing is lost */
    PACKET_HEADER_TOO_LARGE, /* it declares more than max_size payload bytes */
};

/* What packet_decode found. */
enum packet_status {
    PACKET_NEED_MORE, /* not a whole packet yet: *need says how many bytes, if known */
    PACKET_OK,        /* a whole, well-formed packet of *need bytes */
    PACKET_BAD,       /* a whole packet of *need bytes that is malformed: framing holds */
    PACKET_FATAL,     /* the bytes are not a packet at all: framing is lost */
};

/*
 * packet_info returns the facts of a packet type, or NULL for a type the
 * protocol does not define.
 */
const struct packet_info *packet_info(uint32_t type);

/* packet_name returns the type's name, or "UNKNOWN" (never NULL). */
const char *packet_name(uint32_t type);

/*
 * packet_decode_header reads the header at the start of the len bytes at
 * buf (borrowed). A first byte other than NUL is BAD_MAGIC at once, before
 * the whole header is there. On OK and TOO_LARGE, *h holds the header's
 * fields; otherwise *h is unspecified.
 */
enum packet_header_status packet_decode_header(const unsigned char *buf, size_t len,
                                               size_t max_size, struct packet_header *h);

/*
 * packet_decode reads one packet from the len bytes at buf (borrowed; p
 * points into them). max_size bounds the declared payload size. On
 * NEED_MORE, *need is the total size of the packet if the header has been
 * read, else PACKET_HEADER_SIZE. On OK and BAD, *need is the packet's size,
 * which the caller consumes. On BAD and FATAL, *why says what is wrong
 * (a static string); a caller that must tell a bad magic from a packet
 * over max_size asks packet_decode_header, whose status says which. A
 * packet of a type this codec does not know is OK with nargs 0: whether to
 * answer it is the caller's business.
 */
enum packet_status packet_decode(const unsigned char *buf, size_t len, size_t max_size,
                                 struct packet *p, size_t *need, const char **why);

/* packet_encode_header writes the 12-byte header of a packet into out. */
void packet_encode_header(unsigned char out[PACKET_HEADER_SIZE], enum packet_magic magic,
                          uint32_t type, uint32_t size);

/* packet_args_size returns the payload size of nargs arguments joined by NULs. */
size_t packet_args_size(unsigned nargs, const size_t *lens);

/*
 * packet_encode writes a whole packet (header, then the nargs arguments
 * joined by single NULs) into out, if cap allows. Returns the packet's size
 * in bytes whether or not it fit: a result above cap means nothing was
 * written. args are borrowed.
 */
size_t packet_encode(unsigned char *out, size_t cap, enum packet_magic magic, uint32_t type,
                     unsigned nargs, const void *const *args, const size_t *lens);

#endif
