/*
 * libdsjobserver: a Gearman-protocol job server as a library. A program or a
 * test makes a config, creates a server from it, binds it (port 0 picks a
 * free port), reads back its address, and runs it: in a thread of its own
 * (dsjob_server_start + dsjob_server_join), in the calling thread
 * (dsjob_server_run), or on an event_base the caller runs
 * (dsjob_server_attach). dsjobd is a thin main on this API.
 *
 * Thread-safety: dsjob_server_stop and dsjob_server_reopen_log may be called
 * from any thread and from a signal handler; every other call belongs to the
 * thread that created the server, and no call may race dsjob_server_free.
 */
#ifndef DSJOB_SERVER_H
#define DSJOB_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dsjob/common.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dsjob_server;
struct event_base;

#define DSJOB_SERVER_MAX_LISTEN 8
#define DSJOB_SERVER_MAX_ADMIN_ALLOW 16
#define DSJOB_SERVER_MAX_LIMITS 64    /* --limit lines at most */
#define DSJOB_SERVER_MAX_SCHEDULES 64 /* --schedule lines (more come by admin command) */

/* Log levels, named as gearmand's --verbose names them. */
enum dsjob_log_level {
    DSJOB_LOG_FATAL = 0,
    DSJOB_LOG_ALERT,
    DSJOB_LOG_CRITICAL,
    DSJOB_LOG_ERROR,
    DSJOB_LOG_WARNING,
    DSJOB_LOG_NOTICE,
    DSJOB_LOG_INFO,
    DSJOB_LOG_DEBUG,
};

/* How log lines are written (--log-format). */
enum dsjob_log_format {
    DSJOB_LOG_FORMAT_TEXT = 0, /* date, time, level, source, message */
    DSJOB_LOG_FORMAT_JSON,     /* one object a line: time, level, and event fields or msg */
};

/* How a worker that can do several functions is given work (--priority). */
enum dsjob_priority_order {
    DSJOB_PRIORITY_FUNCTION = 0, /* gearmand 1.1.20: newest function first, by priority within it */
    DSJOB_PRIORITY_GLOBAL,       /* the highest priority over all its functions, oldest first */
    DSJOB_PRIORITY_GEARMAND_2,   /* gearmand 2.0: the highest priority over all its functions,
                                    the functions with a job of it taking turns */
};

/*
 * Server settings. Fill with dsjob_server_config_init, then change fields.
 * Strings are borrowed: they must outlive dsjob_server_new, which copies them.
 */
struct dsjob_server_config {
    size_t size; /* sizeof(struct dsjob_server_config), set by init */
    const char *listen[DSJOB_SERVER_MAX_LISTEN]; /* addresses to bind; default "127.0.0.1" */
    int nlisten;                                 /* entries used in listen[] */
    int port;                      /* TCP port; 0 picks a free one; -1 no TCP at all */
    const char *unix_socket;       /* path of a unix socket to listen on, or NULL */
    int backlog;                   /* listen(2) backlog */
    bool keepalive;                /* SO_KEEPALIVE on accepted TCP connections */
    size_t max_packet_size;        /* largest packet payload accepted, bytes */
    size_t max_output_buffer;      /* bytes queued to one slow peer before it is dropped */
    unsigned max_connections;      /* connections held at once; 0 means no limit */
    unsigned max_jobs;             /* jobs held at once (queued, scheduled, running); 0: none */
    unsigned max_queue;            /* every function's maxqueue until changed; 0: none */
    unsigned job_retries;          /* attempts before a job is failed; 0 = unlimited */
    bool round_robin;              /* rotate a worker's functions after each grab */
    bool exceptions;               /* forward WORK_EXCEPTION to every client, asked or not */
    const char *job_handle_prefix; /* handles are PREFIX:N; default "H:<hostname>" */
    const char *log_file;          /* "stderr", "none" or a path */
    enum dsjob_log_level verbose;  /* most verbose level logged */
    const char *admin_allow[DSJOB_SERVER_MAX_ADMIN_ALLOW]; /* ADDR[/BITS] allowed to administer */
    int nadmin_allow;                  /* 0: loopback and the unix socket only */
    const char *store;                 /* "none" (default), "sqlite", "memcached" or "postgres" */
    const char *work_dir;              /* sqlite: directory of dsjobd.db, made if absent */
    const char *store_db;              /* sqlite: the database file, instead of work_dir's */
    int store_sync;                    /* sqlite synchronous: 0 off, 1 normal, 2 full (default) */
    unsigned store_batch;              /* background submits per commit at most */
    unsigned store_commit_interval_ms; /* wait this long to group a commit; 0: one loop turn */
    const char *memcached_servers;     /* memcached: "host:port,host:port" */
    const char *memcached_prefix;      /* memcached: prefix of every key written */
    unsigned idle_timeout;             /* close a peer whose packet stays incomplete this many
                                          seconds; 0: never */
    /* The job lifecycle beyond gearmand's; every default is 1.1.20's behaviour. */
    unsigned retry_on;              /* DSJOB_RETRY_* outcomes that count as a failed attempt */
    unsigned retry_backoff_base_ms; /* a background retry's first wait, doubled each attempt
                                       (with jitter); 0: at once */
    unsigned retry_backoff_max_ms;  /* the longest wait; 0: an hour */
    unsigned max_dead;              /* failed background jobs kept per function; 0: dropped */
    unsigned keep_results;          /* seconds a background job's outcome stays; 0: none */
    size_t max_result_size;         /* bytes of a kept result or failure text */
    /* Fail fast, and priority across functions. */
    bool reject_no_worker;              /* refuse a submit for a function no worker can do */
    enum dsjob_priority_order priority; /* across functions or per function (default) */
    unsigned priority_aging;            /* a job waiting this many seconds counts one priority
                                           higher, and one more after as many again; 0: never */
    enum dsjob_log_format log_format;   /* text (default) or one JSON object a line */
    /* TLS on the TCP listeners (built with OpenSSL only); the unix socket stays plain. */
    bool ssl;                    /* every TCP connection must complete a TLS handshake */
    const char *ssl_certificate; /* PEM file: the server's certificate (and chain) */
    const char *ssl_key;         /* PEM file: the private key of ssl_certificate */
    const char *ssl_ca_file;     /* PEM file: CAs that client certificates are checked against */
    bool ssl_verify_client;      /* refuse a client without a certificate signed by ssl_ca_file */
    /* HTTP: health, metrics and a read-only JSON API; off by default. */
    int http_port;           /* TCP port of HTTP; 0 picks a free one; -1 (default): no HTTP */
    const char *http_listen; /* the address HTTP listens on; default "127.0.0.1" */
    unsigned job_timeout;    /* a running job whose worker says nothing about it for this many
                             seconds is taken back as by CAN_DO_TIMEOUT; 0: never */
    /* The postgres store: several servers share background jobs through one database. */
    const char *pg_dsn;    /* libpq connection string (store "postgres") */
    unsigned pg_lease;     /* seconds a server's lease on a job lasts unless renewed */
    unsigned pg_prefetch;  /* jobs a server leases beyond its idle workers */
    unsigned pg_poll_ms;   /* look for ready jobs this often even without a NOTIFY */
    bool http_admin;       /* HTTP takes POSTs that cancel jobs and retry or drop dead ones,
                               from --admin-allow peers with the CSRF token; default off */
    bool store_async_ends; /* a worker's next request is answered before the end of its last
                              job commits (a crash may run that job again); default off */

    /* Bounds on HTTP connections and on a job's unique key. */
    unsigned http_max_connections; /* HTTP connections held at once; default 64 (1 to 65536) */
    unsigned http_timeout;  /* seconds an HTTP request may take to arrive whole and its answer
                              to be sent, and a connection may stay idle; default 10 */
    size_t max_unique_size; /* longest unique key a submit may carry, bytes; default 1024
                               (gearmand: 64) */

    /* gearmand's keepalive settings and queue tables, for a drop-in start. */
    int keepalive_idle;           /* TCP_KEEPIDLE seconds on accepted TCP connections (turns
                                     keepalive on); -1 (default): the system's */
    int keepalive_interval;       /* TCP_KEEPINTVL seconds, likewise; -1: the system's */
    int keepalive_count;          /* TCP_KEEPCNT probes, likewise; -1: the system's */
    const char *libsqlite3_table; /* sqlite: gearmand's queue table, whose jobs the first open
                                     of its file takes; NULL: "gearman_queue" */
    const char *libpq_table;      /* postgres: gearmand's libpq queue table, likewise; NULL:
                                     "queue" */

    /* Bounds on the store's waits. */
    unsigned store_stuck_secs; /* a commit in flight this long is logged and fails /healthz;
                                   default 10 (1 to 86400) */
    unsigned pg_stop_grace_ms; /* postgres: ms the database has to answer once the server
                                   stops; default 3000 (0 to 600000) */
    unsigned pg_take_max;      /* postgres: the most jobs of one function a lease sized to the
                                   workers' rate takes at once; default 2048 (1 to 1000000) */

    /* Flow control (opt-in): "FUNCTION SETTINGS" lines, as the admin "limit" takes them. */
    const char *limits[DSJOB_SERVER_MAX_LIMITS]; /* e.g. "resize concurrency 4 rate 10/s" */
    int nlimits;                                 /* entries used in limits[] */

    /* Expiring jobs, bounded retention, unique keys held after a job ends. */
    unsigned max_queue_age; /* seconds a job may wait to start before it expires (every
                               function without its own "maxage"); default 0: never */
    unsigned unique_for;    /* seconds an ended job's unique key stays taken (every function
                               without its own "uniquefor"); default 0: not at all */
    unsigned max_kept;      /* kept results held at most, the oldest dropped first; default
                               100000 (1 to 100000000) */
    unsigned dead_max_age;  /* seconds a dead job is kept at most; default 604800 (a week);
                               0: no age limit */
    unsigned max_after;     /* jobs one submit may wait for (OPTION_REQ after=); default 1000
                               (1 to 100000) */

    /* Periodic schedules, each "NAME 'CRON' FUNCTION [PAYLOAD] [tz=ZONE]
       [priority=high|normal|low] [missed=skip|once]" (dsjobd(8) --schedule). */
    const char *schedule[DSJOB_SERVER_MAX_SCHEDULES]; /* the lines */
    int nschedule;                                    /* entries used; default 0: none */
    unsigned schedule_refresh; /* seconds between reads of a shared store's schedules;
                                  default 5 (1 to 3600) */

    /* postgres: a batch of ends refused by a deadlock or a serialization failure is sent
       again at once this many times; default 3 (0 to 100). (Last: fields are only added at
       the end, so that a program built with an older header still fits its size.) */
    unsigned pg_conflict_retries;

    /* A worker held until its last end commits (durable store): its GRAB_JOB waits at
       most this many milliseconds for that commit, then gets NO_JOB; default 10 (0 to
       10000; 0: NO_JOB at once, as gearmand answers every GRAB_JOB at once). */
    unsigned store_grab_wait_ms;
};

/* Outcomes of an attempt that --retry-on can count as failed (retry_on bits). */
enum dsjob_retry_on {
    DSJOB_RETRY_CRASH = 1 << 0,     /* the worker went away, or gave the job back */
    DSJOB_RETRY_TIMEOUT = 1 << 1,   /* its CAN_DO_TIMEOUT expired */
    DSJOB_RETRY_FAIL = 1 << 2,      /* WORK_FAIL */
    DSJOB_RETRY_EXCEPTION = 1 << 3, /* WORK_EXCEPTION */
};

/* dsjob_server_log_level reads a level name (any case) or number; -1 if unknown. */
DSJOB_API int dsjob_server_log_level(const char *name);

/* dsjob_server_config_init fills cfg with the defaults documented in dsjobd(8). */
DSJOB_API void dsjob_server_config_init(struct dsjob_server_config *cfg);

/*
 * dsjob_server_new checks cfg and makes a server that is not yet listening.
 * Returns NULL on failure and, when errbuf is not NULL, writes why into it.
 * The caller frees the result with dsjob_server_free.
 */
DSJOB_API struct dsjob_server *dsjob_server_new(const struct dsjob_server_config *cfg, char *errbuf,
                                                size_t errlen);

/*
 * dsjob_server_bind opens the log and the listening sockets. DSJOB_OK or an
 * error. If SIGPIPE still has its default action it is set to ignored, so
 * that a peer closing mid-write cannot kill the process.
 */
DSJOB_API int dsjob_server_bind(struct dsjob_server *srv);

/* dsjob_server_port returns the bound TCP port (after bind), or -1 if none. */
DSJOB_API int dsjob_server_port(const struct dsjob_server *srv);

/* dsjob_server_http_port returns the bound HTTP port (after bind), or -1 if HTTP is off. */
DSJOB_API int dsjob_server_http_port(const struct dsjob_server *srv);

/*
 * dsjob_server_address writes "host:port" of the first TCP listener (or the
 * unix socket path) into buf. DSJOB_OK, or DSJOB_ERR_STATE before bind.
 */
DSJOB_API int dsjob_server_address(const struct dsjob_server *srv, char *buf, size_t len);

/* dsjob_server_run binds if needed and serves in the calling thread until stopped. */
DSJOB_API int dsjob_server_run(struct dsjob_server *srv);

/* dsjob_server_start binds if needed and serves in a new thread; see dsjob_server_join. */
DSJOB_API int dsjob_server_start(struct dsjob_server *srv);

/*
 * dsjob_server_attach binds if needed and registers the server's events on
 * base, which the caller runs (borrowed: base must outlive the server).
 */
DSJOB_API int dsjob_server_attach(struct dsjob_server *srv, struct event_base *base);

/*
 * dsjob_server_stop asks the server to stop; async-signal-safe. graceful:
 * stop accepting and grabbing, let running jobs finish, then stop.
 */
DSJOB_API void dsjob_server_stop(struct dsjob_server *srv, bool graceful);

/* dsjob_server_reopen_log asks the server to reopen its log file; async-signal-safe. */
DSJOB_API void dsjob_server_reopen_log(struct dsjob_server *srv);

/* dsjob_server_join waits for the thread of dsjob_server_start; returns its result. */
DSJOB_API int dsjob_server_join(struct dsjob_server *srv);

/* dsjob_server_errmsg returns the last error's text; valid until the next call. */
DSJOB_API const char *dsjob_server_errmsg(const struct dsjob_server *srv);

/* dsjob_server_free stops nothing: call it after the server has stopped. NULL is a no-op. */
DSJOB_API void dsjob_server_free(struct dsjob_server *srv);

#ifdef __cplusplus
}
#endif

#endif
