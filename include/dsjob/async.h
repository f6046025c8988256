/*
 * libdsjobclient's non-blocking client: one connection to one job server
 * (dsjobd or gearmand) that an event loop the caller runs drives. The
 * caller watches one descriptor (dsjob_async_fd) for reading, and for
 * writing while dsjob_async_want_write says so, and calls dsjob_async_step
 * when it is ready; step reads and writes what the socket takes without
 * blocking and calls back as jobs progress. Any number of jobs may be in
 * flight on the connection: submits are pipelined, answers matched to jobs
 * by the order of JOB_CREATED and then by handle. Nothing here waits,
 * except dsjob_async_connect (see there). For libevent, epoll, select or
 * asyncio's add_reader/add_writer alike; examples/async-libevent.c drives
 * one from a libevent loop.
 *
 * Thread-safety: a handle belongs to one thread at a time; the callbacks
 * run in the thread that calls dsjob_async_step.
 *
 * Memory: strings and buffers passed in are borrowed for the call and
 * copied; what a callback gets is borrowed for the duration of the call.
 */
#ifndef DSJOB_ASYNC_H
#define DSJOB_ASYNC_H

#include <stddef.h>
#include <stdint.h>

#include <dsjob/client.h>
#include <dsjob/common.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dsjob_async;

/* Flags of dsjob_async_submit, beside DSJOB_TASK_BACKGROUND. */
enum dsjob_async_flags {
    DSJOB_ASYNC_NO_WRITE = 1 << 8, /* only queue: the next step writes it, with what follows */
};

/*
 * Callbacks, all optional (NULL). id is the job's number from
 * dsjob_async_submit; user the pointer given to dsjob_async_new. Bytes are
 * borrowed for the duration of the call. A foreground job ends with exactly
 * one of complete and fail; a background job ends with created (or fail).
 * fail's err is DSJOB_ERR_JOB_FAILED (WORK_FAIL), DSJOB_ERR_JOB_EXCEPTION
 * (WORK_EXCEPTION: text is the exception), DSJOB_ERR_SERVER (the server
 * refused the submit: text is "CODE: text"), or the connection's error
 * when the connection failed with the job in flight (text says why). A
 * callback may call dsjob_async_submit and dsjob_async_forget, not
 * dsjob_async_free or dsjob_async_step.
 */
struct dsjob_async_callbacks {
    void (*created)(struct dsjob_async *a, uint64_t id, const char *handle, void *user);
    void (*status)(struct dsjob_async *a, uint64_t id, unsigned numerator, unsigned denominator,
                   void *user);
    void (*data)(struct dsjob_async *a, uint64_t id, const void *data, size_t len, void *user);
    void (*warning)(struct dsjob_async *a, uint64_t id, const void *data, size_t len, void *user);
    void (*complete)(struct dsjob_async *a, uint64_t id, const void *result, size_t len,
                     void *user);
    void (*fail)(struct dsjob_async *a, uint64_t id, int err, const char *text, size_t len,
                 void *user);
};

/*
 * dsjob_async_new makes an unconnected handle for the server at addr
 * (borrowed; "host[:port]", "[v6][:port]" or a unix socket path, as
 * dsjob_client_add_server). cb is copied (NULL: none). Returns NULL when
 * out of memory or when addr does not parse.
 */
DSJOB_API struct dsjob_async *dsjob_async_new(const char *addr,
                                              const struct dsjob_async_callbacks *cb, void *user);

/*
 * dsjob_async_free closes the connection and frees a; the callbacks of
 * jobs still in flight are not called. NULL does nothing.
 */
DSJOB_API void dsjob_async_free(struct dsjob_async *a);

/*
 * dsjob_async_set_tls: TLS for the connection, as dsjob_client_set_tls.
 * Call it before dsjob_async_connect. Returns DSJOB_OK, DSJOB_ERR_ARG
 * (errmsg says which file, or that TLS was not built), DSJOB_ERR_NOMEM.
 */
DSJOB_API int dsjob_async_set_tls(struct dsjob_async *a, const char *ca_file, const char *cert_file,
                                  const char *key_file, unsigned flags);

/*
 * dsjob_async_connect connects to the server and queues the preamble
 * (OPTION_REQ exceptions). It is the one call that waits: for the name
 * lookup, the TCP connect and the TLS handshake, at most timeout_ms (0 or
 * negative: the system's limits); an event loop runs it before it watches
 * the descriptor (or in a thread: asyncio's run_in_executor). A connected
 * handle returns DSJOB_OK at once. After a connection failure it may be
 * called again to connect anew. Returns DSJOB_OK, DSJOB_ERR_SYS,
 * DSJOB_ERR_TIMEOUT, DSJOB_ERR_NOTFOUND, DSJOB_ERR_PROTO (TLS), with
 * errmsg saying why.
 */
DSJOB_API int dsjob_async_connect(struct dsjob_async *a, int timeout_ms);

/* dsjob_async_fd returns the descriptor to watch, or -1 when not connected. */
DSJOB_API int dsjob_async_fd(const struct dsjob_async *a);

/* dsjob_async_want_write tells whether queued bytes wait for the descriptor to be writable. */
DSJOB_API int dsjob_async_want_write(const struct dsjob_async *a);

/*
 * dsjob_async_submit queues a job (arguments as dsjob_client_submit; flags
 * DSJOB_TASK_BACKGROUND and DSJOB_ASYNC_NO_WRITE) and, without
 * DSJOB_ASYNC_NO_WRITE, writes what the socket takes now; the rest goes
 * out in dsjob_async_step (a caller that submits many at once passes
 * DSJOB_ASYNC_NO_WRITE and lets the next step write them in one go). *id (may be
 * NULL) receives the job's number, unique to a (never 0). Returns
 * DSJOB_OK, DSJOB_ERR_ARG (empty function, unique key over 64 bytes),
 * DSJOB_ERR_STATE (not connected), DSJOB_ERR_NOMEM, or the connection's
 * error (every job in flight, this one included, then gets fail).
 */
DSJOB_API int dsjob_async_submit(struct dsjob_async *a, const char *func, const char *unique,
                                 const void *data, size_t len, enum dsjob_priority prio,
                                 unsigned flags, uint64_t *id);

/*
 * dsjob_async_step reads what the descriptor has, calls back for every
 * whole packet, and writes what it takes, without blocking. Call it when
 * the descriptor is readable, or writable while dsjob_async_want_write.
 * Returns DSJOB_OK, DSJOB_ERR_STATE (not connected), or the connection's
 * error (DSJOB_ERR_CLOSED, DSJOB_ERR_SYS, DSJOB_ERR_PROTO, DSJOB_ERR_NOMEM):
 * the connection is then closed and every job in flight has got fail with
 * that error before step returns.
 */
DSJOB_API int dsjob_async_step(struct dsjob_async *a);

/*
 * dsjob_async_forget drops job id: no callback will name it again (a
 * foreground job's later packets are ignored; the server runs it anyway).
 * For a caller that stopped waiting (a cancelled task). Returns DSJOB_OK,
 * or DSJOB_ERR_NOTFOUND for a job not in flight.
 */
DSJOB_API int dsjob_async_forget(struct dsjob_async *a, uint64_t id);

/* dsjob_async_pending returns how many jobs are in flight. */
DSJOB_API size_t dsjob_async_pending(const struct dsjob_async *a);

/*
 * dsjob_async_errmsg returns the detail of the last failure: the
 * connection's error, or why an argument was refused. Borrowed: valid until
 * the next call on a. Never NULL.
 */
DSJOB_API const char *dsjob_async_errmsg(const struct dsjob_async *a);

#ifdef __cplusplus
}
#endif

#endif
