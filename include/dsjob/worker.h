/*
 * libdsjobworker: do jobs for Gearman job servers (dsjobd, gearmand). A
 * struct dsjob_worker holds a list of servers and the functions it can do,
 * each with a callback. It connects to every server, announces the
 * functions (CAN_DO, or CAN_DO_TIMEOUT when a timeout is set), asks for
 * jobs with GRAB_JOB_UNIQ, and when there is none sends PRE_SLEEP and
 * waits in poll() for the server's NOOP. A server that goes away is
 * reconnected with exponential backoff (100 ms doubling to 10 s) and the
 * functions are announced again. dsjob_worker_work runs one job in the
 * calling thread; dsjob_worker_run runs jobs until stopped, N at once with
 * dsjob_worker_set_concurrency (N threads, each with its own connections).
 *
 * Thread-safety: a worker belongs to one thread, except dsjob_worker_stop,
 * which may be called from any thread or from a signal handler. With a
 * concurrency above 1, the callbacks of dsjob_worker_run run in several
 * threads at once (see dsjob_worker_set_concurrency). There is no global
 * state apart from dsjob_set_alloc_funcs().
 *
 * Memory: strings and buffers passed in are borrowed for the duration of
 * the call and copied if kept; what a struct dsjob_job returns is borrowed
 * from the job and valid until the callback returns.
 */
#ifndef DSJOB_WORKER_H
#define DSJOB_WORKER_H

#include <stddef.h>

#include <dsjob/common.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dsjob_worker;
struct dsjob_job;

/* How a job callback ends its job. */
enum dsjob_work_result {
    DSJOB_WORK_COMPLETE = 0, /* WORK_COMPLETE with the bytes of dsjob_job_set_result */
    DSJOB_WORK_FAIL,         /* WORK_FAIL */
    DSJOB_WORK_EXCEPTION,    /* WORK_EXCEPTION with the text of dsjob_job_set_result */
    DSJOB_WORK_GIVE_BACK,    /* not run: hand it back to the server and back off */
};

/*
 * A job callback: runs the job and returns an enum dsjob_work_result. job
 * is borrowed until it returns; user is the pointer given to
 * dsjob_worker_register. Any other value than the four results is taken
 * as DSJOB_WORK_FAIL. DSJOB_WORK_GIVE_BACK is for a job the worker could not
 * even start (its command is missing, say): the worker closes that
 * server's connection, which makes the server queue the job again (as for
 * a worker that died; it counts against the server's --job-retries), and
 * connects again after a pause that doubles with each give-back in a row,
 * from 1 s to 10 s, and starts again at the first job that ends otherwise.
 */
typedef int (*dsjob_worker_fn)(struct dsjob_job *job, void *user);

/* dsjob_worker_new returns a worker with no servers and no functions, or NULL (out of memory). */
DSJOB_API struct dsjob_worker *dsjob_worker_new(void);

/*
 * dsjob_worker_free closes every connection (a server requeues any job it
 * had assigned and that was not run) and frees w; NULL does nothing.
 */
DSJOB_API void dsjob_worker_free(struct dsjob_worker *w);

/*
 * dsjob_worker_add_server adds a server, "host[:port]", "[v6][:port]" or a
 * unix socket path (borrowed), as dsjob_client_add_server: no port means
 * 4730. Returns DSJOB_OK, DSJOB_ERR_ARG, DSJOB_ERR_NOMEM.
 */
DSJOB_API int dsjob_worker_add_server(struct dsjob_worker *w, const char *addr);

/*
 * dsjob_worker_set_tls makes w connect to its TCP servers with TLS (1.2 at
 * least; a unix socket stays plain), as dsjob_client_set_tls does for a
 * client: the server's certificate is checked against ca_file (PEM; NULL:
 * the system's CAs) and against the server's name or address unless flags
 * (enum dsjob_tls_flags) say DSJOB_TLS_NO_VERIFY_NAME or
 * DSJOB_TLS_NO_VERIFY; cert_file and key_file (NULL: none; key_file NULL:
 * in cert_file) are the worker's own certificate. Every thread of
 * dsjob_worker_run uses the same settings. Files are read now (borrowed);
 * open connections are closed and made again with TLS. Call it before
 * run, not during. Returns DSJOB_OK, DSJOB_ERR_ARG (a file cannot be
 * loaded, or no TLS was built: errmsg says which), DSJOB_ERR_NOMEM. A
 * handshake that fails later is a connection failure like any other: the
 * worker tries again with backoff, and dsjob_worker_errmsg says why.
 */
DSJOB_API int dsjob_worker_set_tls(struct dsjob_worker *w, const char *ca_file,
                                   const char *cert_file, const char *key_file, unsigned flags);

/*
 * dsjob_worker_set_timeout sets the connect and I/O timeouts in
 * milliseconds (0 or negative: none). The I/O timeout bounds sending a
 * report or a result. Defaults: 5000 and 30000.
 */
DSJOB_API void dsjob_worker_set_timeout(struct dsjob_worker *w, int connect_ms, int io_ms);

/*
 * dsjob_worker_set_id sets the id shown by the server's "workers" command
 * (SET_CLIENT_ID; id borrowed, copied). Returns DSJOB_OK, DSJOB_ERR_ARG,
 * DSJOB_ERR_NOMEM.
 */
DSJOB_API int dsjob_worker_set_id(struct dsjob_worker *w, const char *id);

/*
 * dsjob_worker_register adds a function (name borrowed, copied) with its
 * callback and user pointer. timeout_ms > 0 announces it with
 * CAN_DO_TIMEOUT: the server takes the job back when it runs longer
 * (gearmand 1.1.20 counts milliseconds and raises values below 1000 to
 * 1000). Connected servers are told at once. Returns DSJOB_OK,
 * DSJOB_ERR_ARG (empty name, NULL callback, already registered),
 * DSJOB_ERR_NOMEM.
 */
DSJOB_API int dsjob_worker_register(struct dsjob_worker *w, const char *name, dsjob_worker_fn fn,
                                    void *user, int timeout_ms);

/*
 * dsjob_worker_set_concurrency sets how many jobs dsjob_worker_run does at
 * once (default 1). With n > 1, run starts n - 1 threads and works in the
 * calling thread too; each thread has its own connection to every server
 * and announces the same functions and id on it, so a server sees n
 * workers. The callbacks are the same, so they then run concurrently, in
 * any of the n threads: whatever they share through user must be
 * thread-safe, and they must not call dsjob_worker_ functions on w (except
 * dsjob_worker_stop). dsjob_worker_work is not affected: it always runs
 * one job, in the calling thread, on the worker's own connections. Call
 * it before run, not during. Returns DSJOB_OK, or DSJOB_ERR_ARG for n < 1.
 */
DSJOB_API int dsjob_worker_set_concurrency(struct dsjob_worker *w, int n);

/*
 * dsjob_worker_work waits for one job from any server, runs its callback
 * and sends the result, in the calling thread, whatever the concurrency.
 * timeout_ms bounds the wait for a job (0 or negative: none). Returns
 * DSJOB_OK after a job ran (even if it failed), DSJOB_ERR_TIMEOUT when no
 * job came, DSJOB_ERR_STATE when dsjob_worker_stop was called (or no
 * function or server is set), DSJOB_ERR_NOMEM. A server that cannot be
 * reached is no error: the worker keeps trying it with backoff
 * (dsjob_worker_errmsg says why).
 */
DSJOB_API int dsjob_worker_work(struct dsjob_worker *w, int timeout_ms);

/*
 * dsjob_worker_run runs jobs until dsjob_worker_stop, one at a time in the
 * calling thread, or with a concurrency of n in n threads (the calling one
 * and n - 1 that it starts with every signal blocked and joins before it
 * returns). Returns DSJOB_OK once stopped, or the first error other than a
 * timeout (DSJOB_ERR_NOMEM, DSJOB_ERR_SYS, DSJOB_ERR_STATE without a
 * server or function). An error in one thread ends the others as a stop
 * does (each finishes its running job), but only for this call: run may
 * be called again. dsjob_worker_errmsg then says what failed. Each job's
 * result and the request for the next job go to the server in one write.
 */
DSJOB_API int dsjob_worker_run(struct dsjob_worker *w);

/*
 * dsjob_worker_stop asks the worker to stop: every running job finishes
 * and its result is sent, no more jobs are grabbed, and work/run close
 * their connections (a server requeues any job assigned and not run) and
 * return, run once all its threads have ended. Async-signal-safe
 * (it sets a flag and writes one byte to a pipe); may be called from any
 * thread, a callback included. Stays in effect until dsjob_worker_free.
 */
DSJOB_API void dsjob_worker_stop(struct dsjob_worker *w);

/*
 * dsjob_worker_errmsg returns the detail of the last failure (a connect
 * error, a server's ERROR); after dsjob_worker_run with a concurrency
 * above 1, that of the thread whose error run returned. Borrowed: valid
 * until the next call on w.
 */
DSJOB_API const char *dsjob_worker_errmsg(const struct dsjob_worker *w);

/* dsjob_job_function returns the job's function name (borrowed from the job). */
DSJOB_API const char *dsjob_job_function(const struct dsjob_job *job);

/* dsjob_job_handle returns the job's handle (borrowed from the job). */
DSJOB_API const char *dsjob_job_handle(const struct dsjob_job *job);

/* dsjob_job_unique returns the job's unique key, "" for none (borrowed from the job). */
DSJOB_API const char *dsjob_job_unique(const struct dsjob_job *job);

/*
 * dsjob_job_payload returns the job's data (borrowed from the job; a NUL
 * follows it, not counted) and its length in *len (may be NULL).
 */
DSJOB_API const void *dsjob_job_payload(const struct dsjob_job *job, size_t *len);

/*
 * dsjob_job_status sends WORK_STATUS numerator/denominator now. Returns
 * DSJOB_OK, or the connection error (the result cannot be delivered then
 * either: the server requeues the job).
 */
DSJOB_API int dsjob_job_status(struct dsjob_job *job, unsigned numerator, unsigned denominator);

/* dsjob_job_data sends a WORK_DATA chunk (borrowed) now. Returns as dsjob_job_status. */
DSJOB_API int dsjob_job_data(struct dsjob_job *job, const void *data, size_t len);

/* dsjob_job_warning sends a WORK_WARNING (borrowed) now. Returns as dsjob_job_status. */
DSJOB_API int dsjob_job_warning(struct dsjob_job *job, const void *data, size_t len);

/*
 * dsjob_job_set_result sets the bytes (borrowed, copied) that go with
 * DSJOB_WORK_COMPLETE, or the text of DSJOB_WORK_EXCEPTION; a later call
 * replaces them. Returns DSJOB_OK or DSJOB_ERR_NOMEM.
 */
DSJOB_API int dsjob_job_set_result(struct dsjob_job *job, const void *data, size_t len);

#ifdef __cplusplus
}
#endif

#endif
