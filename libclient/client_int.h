/*
 * Internals of libdsjobclient shared by the blocking client (client.c) and
 * the task set (taskset.c): the client structure, the consistent-hash ring
 * that picks a server for a unique key, and the per-connection preamble.
 */
#ifndef DSJOB_LIBCLIENT_CLIENT_INT_H
#define DSJOB_LIBCLIENT_CLIENT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dsjob/client.h>

#include "link/link.h"

#define CLIENT_ERR_LEN 512
#define RING_POINTS 160      /* points per server on the hash ring */
#define CLIENT_MAX_UNIQUE 64 /* longest unique key gearmand accepts */

struct ring_point {
    uint32_t hash; /* position on the ring */
    size_t server; /* index into dsjob_client.links */
};

struct dsjob_client {
    struct link *links;               /* one per server, in the order added (owned) */
    size_t nlinks;                    /* servers added */
    size_t cap;                       /* allocated links */
    struct ring_point *ring;          /* sorted by hash, RING_POINTS per server (owned) */
    size_t rr;                        /* next server for a job without a unique key */
    int connect_ms;                   /* connect timeout, <= 0: none */
    int io_ms;                        /* I/O timeout, <= 0: none */
    struct dsjob_client_callbacks cb; /* progress callbacks of blocking submits */
    void *cb_user;                    /* their user pointer */
    char errmsg[CLIENT_ERR_LEN];      /* detail of the last failure */
    struct ssl_ctx_st *tls;           /* TLS context of dsjob_client_set_tls (owned), or NULL */
    unsigned tls_flags;               /* its DSJOB_TLS_* flags */
    bool expire_set;                  /* dsjob_client_set_expire_in was called */
    int64_t expire_ms;                /* its value */
    char *after;                      /* "after=H1,H2,..." for the next submit (owned), or NULL */
    size_t after_len;                 /* bytes of after */
    enum dsjob_after_fail after_fail; /* with it: "after-fail=" */
    bool batch_set;                   /* dsjob_client_set_batch was called */
    char batch[72];                   /* its id, "" for none */
};

/*
 * client_pick returns the index of the first server to try for a job:
 * by consistent hash for a non-empty unique, else the next in turn.
 */
size_t client_pick(struct dsjob_client *c, const char *unique);

/*
 * client_prepare_hello queues the per-connection preamble (OPTION_REQ
 * "exceptions") on l unless it is queued already; call it before queueing
 * anything, so that it goes first on every new connection.
 */
int client_prepare_hello(struct link *l);

/*
 * client_hello_answer tells whether p answers the preamble (OPTION_RES, or
 * an ERROR from a server without the option) and consumes that answer.
 */
bool client_hello_answer(struct link *l, const struct packet *p);

/*
 * client_hash hashes len bytes (borrowed): FNV-1a, then murmur3's finaliser
 * so that close keys spread. The hash ring and the task set's table of
 * running tasks use it.
 */
uint32_t client_hash(const void *data, size_t len);

/*
 * client_dup copies len bytes (borrowed) into a new dsjob_malloc buffer
 * with a NUL after them, not counted; caller frees with dsjob_free. NULL
 * when out of memory.
 */
void *client_dup(const void *src, size_t len);

/*
 * client_arg_uint reads an unsigned decimal packet argument (borrowed) as
 * gearmand's atoi does: no leading digit gives 0 (WORK_STATUS numbers are
 * passed on whatever they hold).
 */
unsigned client_arg_uint(const unsigned char *p, size_t len);

/* client_submit_type maps (background?, priority) to the SUBMIT packet type. */
uint32_t client_submit_type(bool background, enum dsjob_priority prio);

/*
 * client_job_fits tells whether a submit of func, unique (may be NULL) and
 * len payload bytes fits the 4 GiB - 1 bytes a packet can declare.
 */
bool client_job_fits(const char *func, const char *unique, size_t len);

/* client_failover tells whether an error means "try the next server". */
bool client_failover(int err);

#endif
