/*
 * libdsjobclient: submit jobs to Gearman job servers (dsjobd, gearmand) and
 * follow them. A struct dsjob_client holds a list of servers and one lazy
 * connection to each; blocking calls submit a job and wait for its result,
 * or submit it in the background and return its handle. A struct
 * dsjob_taskset pipelines many jobs over the same servers and drives them
 * all from one poll() loop, calling back as they progress.
 *
 * Server choice: a job with a non-empty unique key goes to the server that a
 * consistent hash of the key picks (a ring of 160 points per server, FNV-1a,
 * so coalescing works across clients and few keys move when a server is
 * added); a job without one goes to the servers in turn. When a connection
 * fails the job is submitted to the next server: delivery is at least once,
 * and a foreground job whose server dies after accepting it may run twice.
 *
 * Thread-safety: a handle (client or task set) belongs to one thread at a
 * time; different handles may be used from different threads. There is no
 * global state apart from dsjob_set_alloc_funcs().
 *
 * Memory: strings and buffers passed in are borrowed for the duration of
 * the call and copied if kept; buffers handed out are either borrowed from
 * the handle (valid as stated) or "caller frees with dsjob_free()".
 */
#ifndef DSJOB_CLIENT_H
#define DSJOB_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <dsjob/common.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dsjob_client;
struct dsjob_taskset;
struct dsjob_task;

/*
 * The size of a handle buffer for dsjob_client_submit_bg and
 * dsjob_client_submit_epoch: it holds any handle they return, its NUL
 * included (dsjobd's handles are at most 200 bytes, gearmand's shorter).
 */
#define DSJOB_HANDLE_MAX 256

/* The priority of a job. */
enum dsjob_priority {
    DSJOB_PRIO_NORMAL = 0,
    DSJOB_PRIO_HIGH,
    DSJOB_PRIO_LOW,
};

/* What GET_STATUS / GET_STATUS_UNIQUE said about a job. */
struct dsjob_status {
    int known;            /* 1 if a server knows the job (queued or running) */
    int running;          /* 1 if a worker holds it */
    unsigned numerator;   /* the last WORK_STATUS numerator, 0 if none */
    unsigned denominator; /* the last WORK_STATUS denominator, 0 if none */
    unsigned waiting;     /* foreground clients attached (by unique only; 0 by handle) */
};

/*
 * Progress callbacks of a blocking foreground submit, all optional (NULL).
 * data and warning bytes are borrowed for the duration of the call. user is
 * the pointer given to dsjob_client_set_callbacks.
 */
struct dsjob_client_callbacks {
    void (*status)(unsigned numerator, unsigned denominator, void *user);
    void (*data)(const void *data, size_t len, void *user);
    void (*warning)(const void *data, size_t len, void *user);
};

/* dsjob_client_new returns a client with no servers, or NULL when out of memory. */
DSJOB_API struct dsjob_client *dsjob_client_new(void);

/* dsjob_client_free closes every connection and frees c; NULL does nothing. */
DSJOB_API void dsjob_client_free(struct dsjob_client *c);

/*
 * dsjob_client_add_server adds a server: "host:port" (a name, an IPv4
 * address or "[v6]:port") or the path of a unix socket (starting with '/').
 * Without a port ("host", "[v6]" or a bare IPv6 address such as "::1") the
 * port is 4730, as with the gearman tools. addr is borrowed. Nothing is
 * connected until a call needs the server. Returns DSJOB_OK, DSJOB_ERR_ARG
 * (unparsable address, or a port that is not 1 to 65535), DSJOB_ERR_NOMEM.
 */
DSJOB_API int dsjob_client_add_server(struct dsjob_client *c, const char *addr);

/*
 * dsjob_client_set_tls makes c connect to its TCP servers with TLS (1.2 at
 * least; a unix socket stays plain), for this and later servers, and task
 * sets made afterwards. The server's certificate must be signed by a CA in
 * ca_file (PEM; NULL: the system's CAs) and name the host or address the
 * server was added as, unless flags (enum dsjob_tls_flags) say
 * DSJOB_TLS_NO_VERIFY_NAME (check the chain only) or DSJOB_TLS_NO_VERIFY
 * (check nothing: for tests only). cert_file and key_file (PEM; NULL and
 * NULL: none; key_file NULL: the key is in cert_file) are the client's own
 * certificate, for a server that asks for one (dsjobd --ssl-verify-client).
 * The files are read now (borrowed); connections already open are closed,
 * and the next call connects again. A call again replaces the settings.
 * Returns DSJOB_OK, DSJOB_ERR_ARG (a file cannot be loaded, or the
 * library was built without TLS: errmsg says which), DSJOB_ERR_NOMEM.
 * A failed handshake later is DSJOB_ERR_PROTO from the call that
 * connected, with OpenSSL's reason in errmsg.
 */
DSJOB_API int dsjob_client_set_tls(struct dsjob_client *c, const char *ca_file,
                                   const char *cert_file, const char *key_file, unsigned flags);

/*
 * dsjob_client_set_timeout sets the connect timeout and the I/O timeout in
 * milliseconds (0 or negative: wait for ever). The I/O timeout bounds every
 * wait for the server: to accept bytes, or to send the next packet, so a
 * foreground job that reports nothing for io_ms times out. Defaults: 5000
 * and 0 (no limit). A task set created afterwards inherits them.
 */
DSJOB_API void dsjob_client_set_timeout(struct dsjob_client *c, int connect_ms, int io_ms);

/*
 * dsjob_client_set_expire_in gives the jobs c submits from now on (by any
 * call, tasksets made later too) a deadline: a job no worker has started
 * ms milliseconds after its submit is not run; dsjobd puts it in its
 * function's dead set as "expired" (with --max-dead), or drops it, and a
 * foreground submitter gets WORK_FAIL. 0 takes the deadline away again.
 * The library sends OPTION_REQ "expire-in=SECONDS" on each connection; a
 * server without it (gearmand) answers ERROR, which the library ignores,
 * so there the jobs have no deadline. DSJOB_OK, or DSJOB_ERR_ARG if ms is
 * negative.
 */
DSJOB_API int dsjob_client_set_expire_in(struct dsjob_client *c, int64_t ms);

/* What a job submitted after others does if one of them fails for good. */
enum dsjob_after_fail {
    DSJOB_AFTER_FAIL = 0, /* it fails too ("parent H failed"): the default */
    DSJOB_AFTER_CANCEL,   /* it is cancelled: nothing kept */
    DSJOB_AFTER_RUN,      /* that job counts as done: it runs anyway */
};

/*
 * dsjob_client_set_after makes the next blocking submit of c (one call of
 * dsjob_client_submit, _submit_bg or _submit_epoch) wait, on dsjobd, until
 * the n jobs whose handles are in handles (borrowed; copied) have
 * succeeded (an entry "unique:FUNCTION:UNIQUE", with %25, %2C and, in
 * FUNCTION, %3A for '%', ',' and ':', names the job of that unique key):
 * it is held until then, and policy says what it does if one of them
 * fails for good. A parent that succeeded before counts as done
 * if the server still knows its outcome (dsjobd --keep-results); an
 * unknown handle refuses the submit (DSJOB_ERR_SERVER, "DEPENDENCY" in
 * errmsg). With several servers the submit goes to the first that knows
 * the handles. n 0 clears it; the submit clears it too, whatever its
 * outcome. The library sends OPTION_REQ "after=H1,H2,..." and
 * "after-fail=POLICY" and waits for their answers before the submit; a
 * server without them (gearmand) answers ERROR and the job is not
 * submitted. Not used by task sets nor the async API. DSJOB_OK,
 * DSJOB_ERR_ARG (an empty handle, or one with a comma; a bad policy),
 * DSJOB_ERR_NOMEM.
 */
DSJOB_API int dsjob_client_set_after(struct dsjob_client *c, const char *const *handles, size_t n,
                                     enum dsjob_after_fail policy);

/*
 * dsjob_client_set_callbacks sets the progress callbacks of later blocking
 * submits (cb is copied; NULL removes them) and the user pointer they get.
 */
DSJOB_API void dsjob_client_set_callbacks(struct dsjob_client *c,
                                          const struct dsjob_client_callbacks *cb, void *user);

/*
 * dsjob_client_errmsg returns the detail of the last failed call on c: the
 * server's ERROR text, a job's exception text, or a system error. Borrowed:
 * valid until the next call on c. Never NULL ("" after a success).
 */
DSJOB_API const char *dsjob_client_errmsg(const struct dsjob_client *c);

/*
 * dsjob_client_submit runs a foreground job and waits for its end. func is
 * the function name, unique the unique key (NULL or "" for none; "-" makes
 * the server coalesce on the payload), data/len the payload (borrowed).
 * On DSJOB_OK, *result (caller frees with dsjob_free(); NUL-terminated for
 * convenience, the terminator not counted) and *result_len hold the
 * WORK_COMPLETE bytes; result may be NULL to discard them. Returns
 * DSJOB_ERR_JOB_FAILED on WORK_FAIL, DSJOB_ERR_JOB_EXCEPTION on
 * WORK_EXCEPTION (its text in errmsg), DSJOB_ERR_SERVER when the server
 * answered ERROR (text in errmsg; also when it refused the job and closed
 * while the job was being sent, as dsjobd's PACKET_TOO_LARGE), DSJOB_ERR_TIMEOUT
 * (errmsg tells a server that did not answer from a job that did not end
 * in time), DSJOB_ERR_ARG (also for a job whose arguments do not fit the
 * 4 GiB - 1 bytes a packet can declare: nothing is sent), and the last
 * connection error when no server could be used (errmsg quotes an ERROR
 * the server sent just before it closed, such as TLS_REQUIRED). Progress
 * packets go to the callbacks of dsjob_client_set_callbacks.
 */
DSJOB_API int dsjob_client_submit(struct dsjob_client *c, const char *func, const char *unique,
                                  const void *data, size_t len, enum dsjob_priority prio,
                                  void **result, size_t *result_len);

/*
 * dsjob_client_submit_bg submits a background job and returns once a
 * server has accepted it. The handle is written NUL-terminated into
 * handle_buf (borrowed), which must have room for DSJOB_HANDLE_MAX bytes
 * (handle_cap); handle_buf NULL discards the handle. A handle_cap below
 * DSJOB_HANDLE_MAX is DSJOB_ERR_ARG before anything is sent: no job was
 * submitted. Returns as dsjob_client_submit for errors, and
 * DSJOB_ERR_PROTO when the server answered with a handle that does not
 * fit DSJOB_HANDLE_MAX (the job was submitted then, and is not sent to
 * another server; errmsg says so).
 */
DSJOB_API int dsjob_client_submit_bg(struct dsjob_client *c, const char *func, const char *unique,
                                     const void *data, size_t len, enum dsjob_priority prio,
                                     char *handle_buf, size_t handle_cap);

/*
 * dsjob_client_submit_epoch submits a background job that the server runs
 * at the given time (seconds since the epoch; SUBMIT_JOB_EPOCH). Arguments
 * and results as dsjob_client_submit_bg.
 */
DSJOB_API int dsjob_client_submit_epoch(struct dsjob_client *c, const char *func,
                                        const char *unique, const void *data, size_t len,
                                        int64_t epoch, char *handle_buf, size_t handle_cap);

/*
 * dsjob_client_status asks about a job by handle (borrowed). A handle does
 * not name its server, so every server is asked in turn until one knows the
 * job. Fills *st (known = 0 when none does). Returns DSJOB_OK, or the
 * connection error when no server answered at all.
 */
DSJOB_API int dsjob_client_status(struct dsjob_client *c, const char *handle,
                                  struct dsjob_status *st);

/*
 * dsjob_client_status_unique asks about a job by unique key (borrowed;
 * GET_STATUS_UNIQUE): the server the key hashes to first, then the others.
 * Fills *st, waiting included. Returns as dsjob_client_status.
 */
DSJOB_API int dsjob_client_status_unique(struct dsjob_client *c, const char *unique,
                                         struct dsjob_status *st);

/*
 * dsjob_client_echo sends data (borrowed) to every server and checks that
 * each echoes it back. Returns DSJOB_OK, DSJOB_ERR_PROTO when an answer
 * differs, or the first server's error (errmsg names the server).
 */
DSJOB_API int dsjob_client_echo(struct dsjob_client *c, const void *data, size_t len);

/*
 * dsjob_client_limit sets or reads flow control of the function func
 * (borrowed) on dsjobd (see FLOW CONTROL in dsjobd(8)), over the admin
 * protocol on a connection of its own to each server. With settings
 * (borrowed), a line of words as the admin command "limit" takes them
 * ("concurrency 4 rate 100/s burst 20", "key-concurrency 2", "sequence
 * hold", "off"), every server applies and stores them; the caller must be
 * an --admin-allow peer of each. With settings NULL, *out gets the first server's listing
 * line for func (tab-separated: function, settings, running, queued,
 * tokens, keys, held, started; "" if the function is unknown there),
 * which the caller frees with dsjob_free; out may be NULL. Returns
 * DSJOB_OK, DSJOB_ERR_ARG (no server, a name or settings with control
 * bytes), DSJOB_ERR_SERVER (a server refused: errmsg has its words), or
 * the first connection error. Not thread-safe on one client.
 */
DSJOB_API int dsjob_client_limit(struct dsjob_client *c, const char *func, const char *settings,
                                 char **out);

/*
 * dsjob_client_pause and dsjob_client_resume: dsjob_client_limit with
 * "paused" and "resumed": no job of func starts on any server (queued
 * jobs stay, submits are taken), or they start again.
 */
DSJOB_API int dsjob_client_pause(struct dsjob_client *c, const char *func);
DSJOB_API int dsjob_client_resume(struct dsjob_client *c, const char *func);

/*
 * Periodic schedules on dsjobd (see SCHEDULES in dsjobd(8)), over the
 * admin protocol on a connection of its own to each server; changes need
 * an --admin-allow peer of each. dsjob_client_schedule_add makes (or
 * replaces) the schedule name: each tick of cron (five fields, or six with
 * seconds first) submits one background job of func with payload (text,
 * or NULL for none); options (NULL for none) is a line of the admin
 * command's words ("tz=Europe/Berlin priority=high missed=once"). All
 * borrowed. dsjob_client_schedule does verb ("pause", "resume" or "rm")
 * to the schedule name. dsjob_client_schedule_list puts the first server's
 * listing in *out (one tab-separated line a schedule: name, cron, zone,
 * function, priority, missed, active or paused, next run, last run, last
 * outcome, fires; "" if none), which the caller frees with dsjob_free.
 * Return DSJOB_OK, DSJOB_ERR_ARG (no server, a name with blanks or control
 * bytes, a payload with both quote characters, an unknown verb),
 * DSJOB_ERR_SERVER (a server refused: errmsg has its words, such as a
 * cron expression that does not parse), or the first connection error.
 * Not thread-safe on one client.
 */
DSJOB_API int dsjob_client_schedule_add(struct dsjob_client *c, const char *name, const char *cron,
                                        const char *func, const char *payload, const char *options);
DSJOB_API int dsjob_client_schedule(struct dsjob_client *c, const char *verb, const char *name);
DSJOB_API int dsjob_client_schedule_list(struct dsjob_client *c, char **out);

/*
 * Batches (dsjobd; see BATCHES in dsjobd(8)): a group of background jobs
 * whose ends the server counts; once the batch is closed and every job
 * ended it submits the on_complete job, and if every one succeeded the
 * on_success job, each once, with the batch's summary (JSON) as payload.
 * A batch lives on one server: these calls use the first server added,
 * and the jobs must go there too (a client of one server). id is 1 to 64
 * bytes of A-Z a-z 0-9 _ . : - (borrowed, as the function names).
 *
 * dsjob_client_batch_open opens batch id; on_complete and on_success are
 * the callbacks' functions, each NULL or "" for none.
 * dsjob_client_batch_close closes it: it takes no more jobs (a batch
 * closed with none fires at once). dsjob_client_batch_status puts the
 * server's status line in *out ("OK id=ID total=N pending=N done=N
 * failed=N dead=N closed=yes|no ... fired-complete=yes|no
 * fired-success=yes|no"), which the caller frees with dsjob_free.
 * Each returns DSJOB_OK, DSJOB_ERR_ARG (no server, a bad id or name),
 * DSJOB_ERR_SERVER (the server refused: errmsg has its words, such as
 * UNKNOWN_BATCH, BATCH_EXISTS, or a store that keeps no batches), or a
 * connection error.
 */
DSJOB_API int dsjob_client_batch_open(struct dsjob_client *c, const char *id,
                                      const char *on_complete, const char *on_success);
DSJOB_API int dsjob_client_batch_close(struct dsjob_client *c, const char *id);
DSJOB_API int dsjob_client_batch_status(struct dsjob_client *c, const char *id, char **out);

/*
 * dsjob_client_set_batch makes the background jobs c submits from now on
 * (new jobs; one whose unique key joins a live job does not join) members
 * of batch id; NULL or "" stops that. Sent as OPTION_REQ "batch=ID" on
 * each connection (a server without batches ignores it). A submit to a
 * batch that is unknown or closed fails with DSJOB_ERR_SERVER
 * (UNKNOWN_BATCH, BATCH_CLOSED). DSJOB_OK or DSJOB_ERR_ARG (a bad id).
 */
DSJOB_API int dsjob_client_set_batch(struct dsjob_client *c, const char *id);

/*
 * Callbacks of a task set, all optional (NULL). t is the task (borrowed,
 * valid until dsjob_taskset_free), user the pointer given to
 * dsjob_taskset_add. Bytes are borrowed for the duration of the call.
 * Exactly one of complete, fail and exception ends a foreground task; a
 * background task ends with created. A task that no server would take
 * ends with fail, and dsjob_task_error() tells why.
 */
struct dsjob_task_callbacks {
    void (*created)(struct dsjob_task *t, const char *handle, void *user);
    void (*status)(struct dsjob_task *t, unsigned numerator, unsigned denominator, void *user);
    void (*data)(struct dsjob_task *t, const void *data, size_t len, void *user);
    void (*warning)(struct dsjob_task *t, const void *data, size_t len, void *user);
    void (*complete)(struct dsjob_task *t, const void *result, size_t len, void *user);
    void (*fail)(struct dsjob_task *t, void *user);
    void (*exception)(struct dsjob_task *t, const char *text, size_t len, void *user);
};

/* Flags of dsjob_taskset_add. */
enum dsjob_task_flags {
    DSJOB_TASK_BACKGROUND = 1 << 0, /* done once the server has accepted it */
};

/*
 * dsjob_taskset_new makes an empty task set that sends to c's servers
 * (c is borrowed and must outlive the set; the set has connections of its
 * own, so c may be used between runs). cb is copied (NULL: no callbacks).
 * Returns NULL when out of memory or when c has no server.
 */
DSJOB_API struct dsjob_taskset *dsjob_taskset_new(struct dsjob_client *c,
                                                  const struct dsjob_task_callbacks *cb);

/* dsjob_taskset_free closes the set's connections and frees every task; NULL does nothing. */
DSJOB_API void dsjob_taskset_free(struct dsjob_taskset *ts);

/*
 * dsjob_taskset_add queues one job (arguments as dsjob_client_submit, all
 * copied; flags from enum dsjob_task_flags). The submit is only encoded
 * here; dsjob_taskset_run sends it. user is given back to the callbacks.
 * *task (may be NULL) receives the task, owned by the set. Returns
 * DSJOB_OK, DSJOB_ERR_ARG, DSJOB_ERR_NOMEM.
 */
DSJOB_API int dsjob_taskset_add(struct dsjob_taskset *ts, const char *func, const char *unique,
                                const void *data, size_t len, enum dsjob_priority prio,
                                unsigned flags, void *user, struct dsjob_task **task);

/*
 * dsjob_taskset_run sends every queued submit and processes answers from
 * all servers in one poll() loop until every task has ended or timeout_ms
 * passed (0 or negative: no limit). Tasks whose connection fails are
 * submitted again to the next server (at least once). Returns DSJOB_OK
 * when every task completed, DSJOB_ERR_JOB_FAILED when all ended but some
 * did not complete (see dsjob_taskset_failed), DSJOB_ERR_TIMEOUT with
 * tasks still running (run may be called again), DSJOB_ERR_NOMEM.
 */
DSJOB_API int dsjob_taskset_run(struct dsjob_taskset *ts, int timeout_ms);

/* dsjob_taskset_count returns the number of tasks added. */
DSJOB_API size_t dsjob_taskset_count(const struct dsjob_taskset *ts);

/* dsjob_taskset_nfailed returns how many tasks have ended without completing. */
DSJOB_API size_t dsjob_taskset_nfailed(const struct dsjob_taskset *ts);

/*
 * dsjob_taskset_failed returns the i-th task (0 <= i < nfailed, in the
 * order they ended) that ended with fail, exception or an error; NULL
 * when i is out of range. Borrowed from the set.
 */
DSJOB_API struct dsjob_task *dsjob_taskset_failed(const struct dsjob_taskset *ts, size_t i);

/* dsjob_task_user returns the pointer given to dsjob_taskset_add. */
DSJOB_API void *dsjob_task_user(const struct dsjob_task *t);

/* dsjob_task_handle returns the job handle, "" before JOB_CREATED. Borrowed from the set. */
DSJOB_API const char *dsjob_task_handle(const struct dsjob_task *t);

/* dsjob_task_unique returns the unique key given ("" for none). Borrowed from the set. */
DSJOB_API const char *dsjob_task_unique(const struct dsjob_task *t);

/*
 * dsjob_task_done tells whether the task has ended (completed, failed,
 * raised an exception, or, in the background, been accepted).
 */
DSJOB_API int dsjob_task_done(const struct dsjob_task *t);

/*
 * dsjob_task_error returns DSJOB_OK for a task that completed (or is still
 * running), DSJOB_ERR_JOB_FAILED, DSJOB_ERR_JOB_EXCEPTION, DSJOB_ERR_SERVER
 * (the server refused it), or the connection error that made every server
 * unusable for it.
 */
DSJOB_API int dsjob_task_error(const struct dsjob_task *t);

/*
 * dsjob_task_errmsg returns the exception text, the server's ERROR text or
 * the connection error, "" if none. Borrowed from the set.
 */
DSJOB_API const char *dsjob_task_errmsg(const struct dsjob_task *t);

/*
 * dsjob_task_result returns the WORK_COMPLETE bytes of a completed task and
 * their length in *len (may be NULL), or NULL. Borrowed from the set.
 */
DSJOB_API const void *dsjob_task_result(const struct dsjob_task *t, size_t *len);

#ifdef __cplusplus
}
#endif

#endif
