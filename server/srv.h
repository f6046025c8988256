/*
 * The server: one event_base, its listeners, its connections, the queue and
 * the log. srv.c owns the lifecycle (bind, run, stop, free) and the timers
 * that belong to no connection (epoch jobs, deferred frees, control pipe).
 */
#ifndef DSJOB_SERVER_SRV_H
#define DSJOB_SERVER_SRV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <time.h>

#include <dsjob/server.h>

#include "clock.h"
#include "log.h"
#include "queue.h"
#include "stats.h"
#include "storage.h"

struct conn;
struct event;
struct event_base;
struct evconnlistener;
struct ssl_ctx_st;
struct evhttp;
struct http_state;
struct schedules;
struct deps;
struct batches;
TAILQ_HEAD(conn_list, conn);
TAILQ_HEAD(conn_flush_list, conn);

/* An address range allowed to administer: family, address and prefix bits. */
struct netmask {
    int family;             /* AF_INET or AF_INET6 */
    unsigned char addr[16]; /* network address, in network order */
    unsigned bits;          /* prefix length */
};

struct srv {
    struct dsjob_server_config cfg; /* settings; strings point into cfg_strings */
    char *cfg_strings;              /* one allocation holding the config's strings */
    struct event_base *base;        /* the loop */
    bool own_base;                  /* base was made by us and is freed with us */
    struct evconnlistener *listeners[DSJOB_SERVER_MAX_LISTEN + 1]; /* TCP and unix */
    int nlisteners;                                                /* entries used */
    int port;                                                      /* the bound TCP port, or -1 */
    char address[300];             /* "host:port" of the first listener */
    struct queue queue;            /* functions and jobs */
    struct log log;                /* where log lines go */
    struct storage storage;        /* the store and the answers waiting for it */
    struct stats stats;            /* server-wide counters (stats.c) */
    struct evhttp *http;           /* the --http-port server, or NULL (http.c) */
    struct http_state *http_st;    /* its connections and listener (http.c), or NULL */
    int http_port;                 /* its bound port, or -1 */
    char http_token[65];           /* --http-admin's CSRF token (hex), "" without it (http.c) */
    struct conn_list conns;        /* open connections */
    struct conn_list closing;      /* closed, waiting to be freed */
    unsigned nconns;               /* entries in conns */
    struct event *reaper_ev;       /* frees closing connections */
    struct conn_flush_list flushq; /* connections with output not yet tried */
    struct event *flush_ev;        /* writes flushq, after this turn's callbacks */
    struct event *epoch_ev;        /* fires when the next epoch job is due */
    struct event *tick_ev;         /* once a second, with --idle-timeout: conn_sweep_idle */
    int64_t epoch_armed;           /* time epoch_ev is set for, 0 if not */
    struct event *ctl_ev;          /* reads ctl_pipe */
    int ctl_pipe[2];               /* stop and reopen requests, signal-safe */
    struct netmask admin_allow[DSJOB_SERVER_MAX_ADMIN_ALLOW]; /* parsed --admin-allow */
    int nadmin_allow;                   /* entries used; 0 means loopback only */
    char handle_prefix[JOB_HANDLE_MAX]; /* handles are PREFIX:N */
    uint64_t next_job_id;               /* N of the next handle */
    uint64_t next_seq;                  /* submission order counter */
    bool bound;                         /* listeners are open */
    bool draining;                      /* graceful stop: wait for running jobs */
    bool stopped;                       /* the loop has been told to exit */
    pthread_t thread;                   /* the thread of dsjob_server_start */
    bool threaded;                      /* thread is running */
    int result;                         /* what run returns */
    time_t accept_error_at;             /* last accept error logged (listener_pause) */
    unsigned accept_pauses;             /* pauses since that line, for the next one */
    bool accept_paused;                 /* every listener is off until pause_ev (EMFILE) */
    struct event *pause_ev;             /* ends an accept pause (listener.c) */
    struct ssl_ctx_st *tls;             /* TLS context with --ssl (owned), NULL: plain TCP */
    struct event *accept_ev;            /* resumes the listeners paused for the turn */
    unsigned accepted;                  /* connections taken this loop turn */
    struct event *flow_ev;              /* the token timer of flow control (flow_ctl.c) */
    struct event *flow_sweep_ev;        /* forgets idle flow keys, once a second */
    int64_t flow_armed;                 /* monotonic ms flow_ev is set for, 0 if not */
    char errmsg[512];                   /* last error's text */
    struct schedules *schedules;        /* the periodic schedules (schedule.c), or NULL */
    struct deps *deps;                  /* the jobs that wait for others (deps.c), or NULL */
    struct batches *batches;            /* the batches (batch.c), or NULL */
};

/* srv_epoch_arm (re)arms the epoch timer for the earliest scheduled job. */
void srv_epoch_arm(struct srv *srv);

/* srv_stop stops the loop; graceful waits for running jobs first. */
void srv_stop(struct srv *srv, bool graceful);

/* srv_check_drained ends a graceful stop once no job is running. */
void srv_check_drained(struct srv *srv);

/* srv_admin_allowed tells whether a peer address may run privileged admin commands. */
bool srv_admin_allowed(const struct srv *srv, const struct sockaddr *sa);

/* srv_schedule_reap makes the reaper run at the top of the next loop turn. */
void srv_schedule_reap(struct srv *srv);

#endif
