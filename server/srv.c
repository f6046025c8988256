/*
 * Server lifecycle and the events that belong to no connection. A server
 * is made from a config (strings copied), bound (log and listeners opened,
 * so its port is known before it serves), then run on its own base in the
 * calling thread or a thread of its own, or attached to a base the caller
 * runs. Stop requests arrive through a pipe so that they are safe from
 * signal handlers and other threads; the loop reads them and acts.
 */
#include "config.h"
#include "srv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "batch.h"
#include "conn.h"
#include "deps.h"
#include "durable.h"
#include "flow_ctl.h"
#include "http.h"
#include "lifecycle.h"
#include "listener.h"
#include "options.h"
#include "schedule.h"
#include "storage.h"
#include "store.h"
#include "tls.h"

#define SRV_STOP_FLUSH 2 /* seconds peers get to read their last replies at a stop */

struct dsjob_server {
    struct srv srv; /* the whole server; the public type is only its wrapper */
};

int
dsjob_server_log_level(const char *name)
{
    return log_level_parse(name);
}

void
dsjob_server_config_init(struct dsjob_server_config *cfg)
{
    const struct option_bound *b;

    memset(cfg, 0, sizeof(*cfg));
    cfg->size = sizeof(*cfg);
    for (b = option_bounds; b < option_bounds + OPTION_NBOUNDS; b++)
        option_store(cfg, b, (unsigned long long)b->def);
    cfg->listen[0] = "127.0.0.1";
    cfg->nlisten = 1;
    cfg->log_file = "stderr";
    cfg->verbose = DSJOB_LOG_ERROR;
    cfg->store = "none";
    cfg->store_sync = 2; /* full: an acknowledged job survives a power loss */
    cfg->memcached_prefix = "dsjob";
    cfg->retry_on = DSJOB_RETRY_CRASH | DSJOB_RETRY_TIMEOUT; /* what 1.1.20 retries */
    cfg->priority = DSJOB_PRIORITY_FUNCTION;
    cfg->http_listen = "127.0.0.1";
}

/* The queue as the config wants it: made empty at new, and again after a failed bind. */
static void
srv_queue_init(struct srv *srv)
{
    queue_init(&srv->queue, srv->cfg.round_robin);
    srv->queue.default_max_queue = srv->cfg.max_queue;
    queue_set_order(&srv->queue,
                    srv->cfg.priority == DSJOB_PRIORITY_GLOBAL       ? QUEUE_ORDER_GLOBAL
                    : srv->cfg.priority == DSJOB_PRIORITY_GEARMAND_2 ? QUEUE_ORDER_TURNS
                                                                     : QUEUE_ORDER_FUNCTION,
                    srv->cfg.priority_aging, clock_now());
}

static int
parse_netmask(const char *s, struct netmask *m)
{
    char addr[INET6_ADDRSTRLEN + 8];
    const char *slash = strchr(s, '/');
    size_t len = slash ? (size_t)(slash - s) : strlen(s);
    unsigned long bits;
    char *end;

    if (len >= sizeof(addr))
        return -1;
    memcpy(addr, s, len);
    addr[len] = '\0';
    memset(m, 0, sizeof(*m));
    if (inet_pton(AF_INET, addr, m->addr) == 1) {
        m->family = AF_INET;
        m->bits = 32;
    } else if (inet_pton(AF_INET6, addr, m->addr) == 1) {
        m->family = AF_INET6;
        m->bits = 128;
    } else {
        return -1;
    }
    if (slash != NULL) {
        bits = strtoul(slash + 1, &end, 10);
        if (slash[1] == '\0' || *end != '\0' || bits > m->bits)
            return -1;
        m->bits = (unsigned)bits;
    }
    return 0;
}

static bool
netmask_match(const struct netmask *m, int family, const unsigned char *addr)
{
    unsigned full = m->bits / 8, rest = m->bits % 8;

    if (m->family != family)
        return false;
    if (memcmp(m->addr, addr, full) != 0)
        return false;
    if (rest == 0)
        return true;
    return ((m->addr[full] ^ addr[full]) & (0xff << (8 - rest))) == 0;
}

bool
srv_admin_allowed(const struct srv *srv, const struct sockaddr *sa)
{
    const unsigned char *addr;
    unsigned char v4[4];
    int family = sa->sa_family;
    int i;

    if (family == AF_UNIX)
        return true;
    if (family == AF_INET) {
        addr = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
    } else if (family == AF_INET6) {
        addr = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        /* An IPv4 peer on a dual-stack socket is judged as IPv4. */
        if (IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)addr)) {
            memcpy(v4, addr + 12, 4);
            addr = v4;
            family = AF_INET;
        }
    } else {
        return false;
    }
    if (srv->nadmin_allow == 0) {
        if (family == AF_INET)
            return addr[0] == 127;
        return IN6_IS_ADDR_LOOPBACK((const struct in6_addr *)addr);
    }
    for (i = 0; i < srv->nadmin_allow; i++)
        if (netmask_match(&srv->admin_allow[i], family, addr))
            return true;
    return false;
}

/*
 * Copy the config and every string in it into one allocation owned by srv.
 * -1: out of memory; -2: a count of listen or admin-allow entries is out of
 * range (checked before the arrays are read).
 */
static int
copy_config(struct srv *srv, const struct dsjob_server_config *cfg)
{
    const char **strs[DSJOB_SERVER_MAX_LISTEN + DSJOB_SERVER_MAX_ADMIN_ALLOW +
                      DSJOB_SERVER_MAX_LIMITS + DSJOB_SERVER_MAX_SCHEDULES + 24];
    size_t n = 0, total = 0, i;
    char *at;
    int k;

    /* A program built against an older, smaller config gets defaults for the rest. */
    dsjob_server_config_init(&srv->cfg);
    memcpy(&srv->cfg, cfg, cfg->size);
    srv->cfg.size = sizeof(srv->cfg);
    if (srv->cfg.nlisten < 0 || srv->cfg.nlisten > DSJOB_SERVER_MAX_LISTEN ||
        srv->cfg.nadmin_allow < 0 || srv->cfg.nadmin_allow > DSJOB_SERVER_MAX_ADMIN_ALLOW ||
        srv->cfg.nlimits < 0 || srv->cfg.nlimits > DSJOB_SERVER_MAX_LIMITS ||
        srv->cfg.nschedule < 0 || srv->cfg.nschedule > DSJOB_SERVER_MAX_SCHEDULES)
        return -2;
    for (k = 0; k < srv->cfg.nlisten; k++)
        strs[n++] = &srv->cfg.listen[k];
    for (k = 0; k < srv->cfg.nadmin_allow; k++)
        strs[n++] = &srv->cfg.admin_allow[k];
    for (k = 0; k < srv->cfg.nlimits; k++)
        strs[n++] = &srv->cfg.limits[k];
    for (k = 0; k < srv->cfg.nschedule; k++)
        strs[n++] = &srv->cfg.schedule[k];
    strs[n++] = &srv->cfg.unix_socket;
    strs[n++] = &srv->cfg.job_handle_prefix;
    strs[n++] = &srv->cfg.log_file;
    strs[n++] = &srv->cfg.store;
    strs[n++] = &srv->cfg.work_dir;
    strs[n++] = &srv->cfg.store_db;
    strs[n++] = &srv->cfg.memcached_servers;
    strs[n++] = &srv->cfg.memcached_prefix;
    strs[n++] = &srv->cfg.ssl_certificate;
    strs[n++] = &srv->cfg.ssl_key;
    strs[n++] = &srv->cfg.ssl_ca_file;
    strs[n++] = &srv->cfg.http_listen;
    strs[n++] = &srv->cfg.pg_dsn;
    strs[n++] = &srv->cfg.libsqlite3_table;
    strs[n++] = &srv->cfg.libpq_table;
    for (i = 0; i < n; i++)
        if (*strs[i] != NULL)
            total += strlen(*strs[i]) + 1;
    srv->cfg_strings = at = malloc(total + 1);
    if (at == NULL)
        return -1;
    for (i = 0; i < n; i++) {
        size_t len;

        if (*strs[i] == NULL)
            continue;
        len = strlen(*strs[i]) + 1;
        memcpy(at, *strs[i], len);
        *strs[i] = at;
        at += len;
    }
    return 0;
}

/*
 * check_bounds holds every numeric setting of cfg to its bounds in
 * option_bounds[], the ones dsjobd's command line holds it to. -1 with the
 * reason in err (the words dsjobd uses) if one is out of them.
 */
static int
check_bounds(const struct dsjob_server_config *cfg, char *err, size_t errlen)
{
    const struct option_bound *b;
    char text[32];

    for (b = option_bounds; b < option_bounds + OPTION_NBOUNDS; b++) {
        const void *field = (const char *)cfg + b->offset;
        unsigned long long v;

        if (b->kind == OPTION_NOFIELD)
            continue;
        if (b->kind == OPTION_INT) {
            int i = *(const int *)field;

            if (i == -1 && (b->flags & (OPTION_UNSET | OPTION_OFF_API)))
                continue;
            if (i < 0) {
                snprintf(text, sizeof(text), "%d", i);
                option_range_error(b, text, err, errlen);
                return -1;
            }
            v = (unsigned)i;
        } else {
            v = b->kind == OPTION_UINT ? *(const unsigned *)field : *(const size_t *)field;
        }
        if (v >= b->min && v <= b->max)
            continue;
        if (b->flags & OPTION_SECONDS)
            option_seconds(v, text, sizeof(text));
        else
            snprintf(text, sizeof(text), "%llu", v);
        option_range_error(b, text, err, errlen);
        return -1;
    }
    return 0;
}

struct dsjob_server *
dsjob_server_new(const struct dsjob_server_config *cfg, char *errbuf, size_t errlen)
{
    struct dsjob_server *ds;
    struct srv *srv;
    char host[128], store_err[STORE_ERRLEN], bound_err[256];
    int i, rc;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        if (errbuf != NULL && errlen > 0)                                                          \
            snprintf(errbuf, errlen, __VA_ARGS__);                                                 \
        goto out_free;                                                                             \
    } while (0)

    if (cfg->size < offsetof(struct dsjob_server_config, listen) || cfg->size > sizeof(*cfg)) {
        if (errbuf != NULL && errlen > 0)
            snprintf(errbuf, errlen, "config size %zu is not one this library knows (at most %zu)",
                     cfg->size, sizeof(*cfg));
        return NULL;
    }
    ds = calloc(1, sizeof(*ds));
    if (ds == NULL) {
        if (errbuf != NULL && errlen > 0)
            snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    srv = &ds->srv;
    srv->ctl_pipe[0] = srv->ctl_pipe[1] = -1;
    srv->port = -1;
    srv->http_port = -1;
    TAILQ_INIT(&srv->conns);
    TAILQ_INIT(&srv->closing);
    TAILQ_INIT(&srv->flushq);
    rc = copy_config(srv, cfg);
    if (rc == -2)
        FAIL("bad number of listen addresses (%d) or --admin-allow ranges (%d)", cfg->nlisten,
             cfg->nadmin_allow);
    if (rc < 0)
        FAIL("out of memory");
    if (store_find(srv->cfg.store ? srv->cfg.store : "none", store_err) == NULL)
        FAIL("--store: %s", store_err);
    if (srv->cfg.work_dir != NULL && srv->cfg.work_dir[0] == '\0')
        FAIL("--work-dir is empty");
    if (srv->cfg.store_db != NULL && srv->cfg.store_db[0] == '\0')
        FAIL("--libsqlite3-db is empty");
    if (srv->cfg.http_listen != NULL && srv->cfg.http_listen[0] == '\0')
        FAIL("--http-listen is empty");
    if (check_bounds(&srv->cfg, bound_err, sizeof(bound_err)) < 0)
        FAIL("%s", bound_err);
    if (srv->cfg.libsqlite3_table != NULL &&
        option_table_error("--libsqlite3-table", srv->cfg.libsqlite3_table, bound_err,
                           sizeof(bound_err)))
        FAIL("%s", bound_err);
    if (srv->cfg.libpq_table != NULL &&
        option_table_error("--libpq-table", srv->cfg.libpq_table, bound_err, sizeof(bound_err)))
        FAIL("%s", bound_err);
    if (srv->cfg.http_admin && srv->cfg.http_port < 0)
        FAIL("--http-admin needs --http-port");
    if (srv->cfg.max_output_buffer < srv->cfg.max_packet_size + PACKET_HEADER_SIZE)
        FAIL("--max-output-buffer (%zu) must be at least --max-packet-size (%zu)",
             srv->cfg.max_output_buffer, srv->cfg.max_packet_size);
    if (srv->cfg.retry_backoff_max_ms != 0 &&
        srv->cfg.retry_backoff_max_ms < srv->cfg.retry_backoff_base_ms)
        FAIL("--retry-backoff: the longest wait is shorter than the first");
    if (srv->cfg.store_sync < 0 || srv->cfg.store_sync > 2)
        FAIL("--store-sync must be off, normal or full");
    if (srv->cfg.priority != DSJOB_PRIORITY_FUNCTION &&
        srv->cfg.priority != DSJOB_PRIORITY_GLOBAL &&
        srv->cfg.priority != DSJOB_PRIORITY_GEARMAND_2)
        FAIL("--priority must be function, global or gearmand-2.0");
    if (srv->cfg.log_format != DSJOB_LOG_FORMAT_TEXT &&
        srv->cfg.log_format != DSJOB_LOG_FORMAT_JSON)
        FAIL("unknown log format %d", (int)srv->cfg.log_format);
    if (srv->cfg.ssl && !tls_built())
        FAIL("--ssl: TLS was not built: install libssl-dev and configure --with-openssl");
    if (srv->cfg.ssl && (srv->cfg.ssl_certificate == NULL || srv->cfg.ssl_key == NULL))
        FAIL("--ssl needs --ssl-certificate and --ssl-key");
    if (!srv->cfg.ssl && (srv->cfg.ssl_certificate != NULL || srv->cfg.ssl_key != NULL ||
                          srv->cfg.ssl_ca_file != NULL || srv->cfg.ssl_verify_client))
        FAIL("--ssl-certificate, --ssl-key, --ssl-ca-file and --ssl-verify-client need --ssl");
    if (srv->cfg.ssl_verify_client && srv->cfg.ssl_ca_file == NULL)
        FAIL("--ssl-verify-client needs --ssl-ca-file");
    for (i = 0; i < srv->cfg.nadmin_allow; i++)
        if (parse_netmask(srv->cfg.admin_allow[i], &srv->admin_allow[i]) < 0)
            FAIL("--admin-allow '%s' is not ADDR or ADDR/BITS", srv->cfg.admin_allow[i]);
    srv->nadmin_allow = srv->cfg.nadmin_allow;
    if (srv->cfg.job_handle_prefix != NULL) {
        if (strlen(srv->cfg.job_handle_prefix) > JOB_HANDLE_MAX - 24)
            FAIL("--job-handle-prefix is longer than %d bytes", JOB_HANDLE_MAX - 24);
        snprintf(srv->handle_prefix, sizeof(srv->handle_prefix), "%s", srv->cfg.job_handle_prefix);
    } else {
        if (gethostname(host, sizeof(host)) < 0)
            snprintf(host, sizeof(host), "localhost");
        host[sizeof(host) - 1] = '\0';
        snprintf(srv->handle_prefix, sizeof(srv->handle_prefix), "H:%s", host);
    }
    srv->next_job_id = 1;
    srv_queue_init(srv);
    return ds;

out_free:
    free(srv->cfg_strings);
    free(ds);
    return NULL;
#undef FAIL
}

static void
reaper_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;
    struct conn *c;

    (void)fd;
    (void)what;
    while ((c = TAILQ_FIRST(&srv->closing)) != NULL) {
        TAILQ_REMOVE(&srv->closing, c, link);
        conn_free(c);
    }
    if (srv->stopped && TAILQ_EMPTY(&srv->conns) && srv->base != NULL)
        event_base_loopexit(srv->base, NULL);
}

void
srv_schedule_reap(struct srv *srv)
{
    event_active(srv->reaper_ev, EV_TIMEOUT, 0);
}

static void
epoch_due(struct job *j, void *arg)
{
    stats_queued(arg, j); /* its wait starts when it falls due */
    lifecycle_wake(j);
}

static void
epoch_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;

    (void)fd;
    (void)what;
    srv->epoch_armed = 0;
    queue_due(&srv->queue, clock_now(), epoch_due, srv);
    srv_epoch_arm(srv);
}

void
srv_epoch_arm(struct srv *srv)
{
    int64_t next = queue_next_due(&srv->queue);
    struct timeval tv;
    struct timeval now;

    if (next == 0 || (srv->epoch_armed != 0 && srv->epoch_armed <= next))
        return;
    gettimeofday(&now, NULL);
    /* Fire at the start of the due second, not up to a second late. */
    if (next > now.tv_sec) {
        /* A far epoch waits a day at a time (epoch_cb re-arms): no overflow here or in libevent. */
        int64_t sec = next - now.tv_sec < 86400 ? next - now.tv_sec : 86400;
        int64_t usec = sec * 1000000 - now.tv_usec;

        tv.tv_sec = (time_t)(usec / 1000000);
        tv.tv_usec = (suseconds_t)(usec % 1000000);
    } else {
        tv.tv_sec = 0;
        tv.tv_usec = 0;
    }
    evtimer_add(srv->epoch_ev, &tv);
    srv->epoch_armed = next;
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;

    (void)fd;
    (void)what;
    if (srv->cfg.idle_timeout > 0)
        conn_sweep_idle(srv, clock_uptime());
    if (srv->queue.nended > 0)
        lifecycle_expire(srv, clock_now());
    if (srv->queue.expiring.len > 0)
        lifecycle_expire_jobs(srv, clock_now_ms());
}

static void
stop_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;

    (void)fd;
    (void)what;
    log_notice(&srv->log, "peers did not read their last replies in time: stopping anyway");
    event_base_loopexit(srv->base, NULL);
}

/*
 * Stop: close the listeners and every connection, letting each take what
 * is already queued for it (a result that ended a graceful stop, the OK of
 * a shutdown command), then leave the loop once all are gone, or after
 * SRV_STOP_FLUSH seconds.
 */
static void
srv_exit_loop(struct srv *srv)
{
    struct timeval tv = {SRV_STOP_FLUSH, 0};
    struct conn *c, *next;

    if (srv->stopped)
        return;
    srv->stopped = true;
    schedule_stop(srv);
    listener_close_all(srv);
    http_close(srv);
    storage_drain(srv); /* answer the last batches' submitters before they are closed */
    for (c = TAILQ_FIRST(&srv->conns); c != NULL; c = next) {
        next = TAILQ_NEXT(c, link);
        conn_close(c, true);
    }
    event_base_once(srv->base, -1, EV_TIMEOUT, stop_deadline_cb, srv, &tv);
    srv_schedule_reap(srv);
}

void
srv_check_drained(struct srv *srv)
{
    struct func *f;

    TAILQ_FOREACH (f, &srv->queue.func_order, order)
        if (f->nrunning > 0)
            return;
    log_notice(&srv->log, "graceful stop: no job is running");
    srv_exit_loop(srv);
}

void
srv_stop(struct srv *srv, bool graceful)
{
    if (!graceful) {
        log_notice(&srv->log, "stopping");
        srv_exit_loop(srv);
        return;
    }
    if (!srv->draining) {
        /* Closed, not paused: a new client is refused at once, as by gearmand. */
        log_notice(&srv->log, "graceful stop: no new connections or grabs");
        srv->draining = true;
        listener_close_all(srv);
    }
    srv_check_drained(srv);
}

static void
ctl_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;
    char cmds[64];
    ssize_t n, i;

    (void)what;
    while ((n = read(fd, cmds, sizeof(cmds))) > 0) {
        for (i = 0; i < n; i++) {
            switch (cmds[i]) {
            case 's': srv_stop(srv, false); break;
            case 'g': srv_stop(srv, true); break;
            case 'h':
                if (log_reopen(&srv->log) < 0)
                    log_err(&srv->log, "cannot reopen log '%s': %s", srv->log.path,
                            strerror(errno));
                else
                    log_notice(&srv->log, "log reopened");
                break;
            }
        }
    }
}

/* srv_teardown frees what srv_setup made; safe on a partial setup. */
static void
srv_teardown(struct srv *srv)
{
    struct event **evs[] = {&srv->reaper_ev, &srv->flush_ev, &srv->epoch_ev, &srv->ctl_ev,
                            &srv->tick_ev};
    size_t i;

    for (i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
        if (*evs[i] != NULL)
            event_free(*evs[i]);
        *evs[i] = NULL;
    }
    for (i = 0; i < 2; i++) {
        if (srv->ctl_pipe[i] >= 0)
            close(srv->ctl_pipe[i]);
        srv->ctl_pipe[i] = -1;
    }
    if (srv->own_base && srv->base != NULL)
        event_base_free(srv->base);
    srv->base = NULL;
    srv->own_base = false;
}

/* srv_setup makes the loop's own events; on failure it leaves nothing behind. */
static int
srv_setup(struct srv *srv, struct event_base *base)
{
    int rc = DSJOB_ERR_NOMEM;

    if (srv->base != NULL)
        return 0;
    srv->base = base ? base : event_base_new();
    srv->own_base = base == NULL;
    if (srv->base == NULL) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot make an event base");
        goto fail;
    }
    if (pipe2(srv->ctl_pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "pipe: %s", strerror(errno));
        rc = DSJOB_ERR_SYS;
        goto fail;
    }
    srv->reaper_ev = event_new(srv->base, -1, 0, reaper_cb, srv);
    srv->flush_ev = event_new(srv->base, -1, 0, conn_flush_cb, srv);
    srv->epoch_ev = evtimer_new(srv->base, epoch_cb, srv);
    srv->ctl_ev = event_new(srv->base, srv->ctl_pipe[0], EV_READ | EV_PERSIST, ctl_cb, srv);
    if (srv->reaper_ev == NULL || srv->flush_ev == NULL || srv->epoch_ev == NULL ||
        srv->ctl_ev == NULL || event_add(srv->ctl_ev, NULL) < 0) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot make the server's events");
        goto fail;
    }
    {
        /* Always: deadlines and retention come with submits and admin commands too. */
        struct timeval second = {1, 0};

        srv->tick_ev = event_new(srv->base, -1, EV_PERSIST, tick_cb, srv);
        if (srv->tick_ev == NULL || event_add(srv->tick_ev, &second) < 0) {
            snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot make the server's timer");
            goto fail;
        }
    }
    return 0;

fail:
    srv_teardown(srv);
    return rc;
}

/*
 * A peer that goes away while we write to it must cost an EPIPE, not the
 * process: writev has no MSG_NOSIGNAL. A handler the program
 * installed itself is left alone.
 */
static void
ignore_sigpipe(void)
{
    struct sigaction sa;

    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) {
        sa.sa_handler = SIG_IGN;
        sigaction(SIGPIPE, &sa, NULL);
    }
}

/*
 * srv_bind makes the work directory, then opens the log, the store
 * (replaying its jobs) and the listeners.
 * A failure undoes all of it, replayed jobs included, so that a later call
 * (after the port was freed, say) starts again from nothing. The reason is
 * in errmsg for the caller to print; it is logged too when the log is a file,
 * so that it is not printed twice on stderr.
 */
static int
srv_bind(struct srv *srv, struct event_base *base)
{
    int rc;

    if (srv->bound)
        return 0;
    ignore_sigpipe();
    rc = srv_setup(srv, base);
    if (rc != 0)
        return rc;
    /* The work directory first: the log file may be in it. */
    if (srv->cfg.work_dir != NULL) {
        char err[STORE_ERRLEN];

        rc = store_make_dir(srv->cfg.work_dir, err);
        if (rc != DSJOB_OK) {
            snprintf(srv->errmsg, sizeof(srv->errmsg), "%s", err);
            goto fail;
        }
    }
    srv->log.json = srv->cfg.log_format == DSJOB_LOG_FORMAT_JSON;
    if (log_open(&srv->log, srv->cfg.log_file, srv->cfg.verbose) < 0) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot open log file '%s': %s",
                 srv->cfg.log_file, strerror(errno));
        rc = DSJOB_ERR_SYS;
        goto fail;
    }
    if (tls_open(srv) < 0) {
        rc = DSJOB_ERR_ARG;
        goto fail;
    }
    if (flow_ctl_open(srv) < 0) {
        rc = DSJOB_ERR_ARG;
        goto fail;
    }
    if (batch_init(srv) < 0) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "out of memory for the batches");
        rc = DSJOB_ERR_NOMEM;
        goto fail;
    }
    if (durable_open(srv) < 0) {
        rc = DSJOB_ERR_STORE;
        goto fail;
    }
    if (schedule_open(srv) < 0) {
        rc = DSJOB_ERR_ARG;
        goto fail;
    }
    if (listener_open_all(srv) < 0 || http_open(srv) < 0) {
        rc = DSJOB_ERR_SYS;
        goto fail;
    }
    srv->bound = true;
    srv->stats.started = clock_uptime();
    return 0;

fail:
    if (srv->log.fp != NULL && srv->log.fp != stderr)
        log_err(&srv->log, "%s", srv->errmsg);
    http_close(srv);
    listener_close_all(srv);
    schedule_close(srv);
    durable_close(srv);
    deps_close(srv);
    batch_close(srv);
    tls_close(srv);
    flow_ctl_close(srv);
    queue_release(&srv->queue);
    srv_queue_init(srv);
    log_release(&srv->log);
    srv_teardown(srv);
    return rc;
}

int
dsjob_server_bind(struct dsjob_server *ds)
{
    return srv_bind(&ds->srv, NULL);
}

int
dsjob_server_http_port(const struct dsjob_server *ds)
{
    return http_port(&ds->srv);
}

int
dsjob_server_port(const struct dsjob_server *ds)
{
    return ds->srv.bound ? ds->srv.port : -1;
}

int
dsjob_server_address(const struct dsjob_server *ds, char *buf, size_t len)
{
    if (!ds->srv.bound)
        return DSJOB_ERR_STATE;
    snprintf(buf, len, "%s", ds->srv.address);
    return DSJOB_OK;
}

int
dsjob_server_attach(struct dsjob_server *ds, struct event_base *base)
{
    if (base == NULL)
        return DSJOB_ERR_ARG;
    if (ds->srv.base != NULL && ds->srv.base != base)
        return DSJOB_ERR_STATE;
    return srv_bind(&ds->srv, base);
}

int
dsjob_server_run(struct dsjob_server *ds)
{
    struct srv *srv = &ds->srv;
    int rc = srv_bind(srv, NULL);

    if (rc != 0)
        return rc;
    log_notice(&srv->log, "dsjobd %s serving", DSJOB_VERSION_STRING);
    if (event_base_dispatch(srv->base) < 0) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "event loop failed");
        return DSJOB_ERR_SYS;
    }
    log_notice(&srv->log, "stopped");
    return DSJOB_OK;
}

static void *
srv_thread(void *arg)
{
    struct dsjob_server *ds = arg;

    ds->srv.result = dsjob_server_run(ds);
    return NULL;
}

int
dsjob_server_start(struct dsjob_server *ds)
{
    struct srv *srv = &ds->srv;
    int rc = srv_bind(srv, NULL);

    if (rc != 0)
        return rc;
    if (srv->threaded)
        return DSJOB_ERR_STATE;
    rc = pthread_create(&srv->thread, NULL, srv_thread, ds);
    if (rc != 0) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "pthread_create: %s", strerror(rc));
        return DSJOB_ERR_SYS;
    }
    srv->threaded = true;
    return DSJOB_OK;
}

int
dsjob_server_join(struct dsjob_server *ds)
{
    if (!ds->srv.threaded)
        return DSJOB_ERR_STATE;
    pthread_join(ds->srv.thread, NULL);
    ds->srv.threaded = false;
    return ds->srv.result;
}

static void
ctl_send(struct srv *srv, char cmd)
{
    int saved = errno;

    if (srv->ctl_pipe[1] >= 0 && write(srv->ctl_pipe[1], &cmd, 1) < 0) {
        /* Pipe full: an earlier request is already waiting to be read. */
    }
    errno = saved;
}

void
dsjob_server_stop(struct dsjob_server *ds, bool graceful)
{
    ctl_send(&ds->srv, graceful ? 'g' : 's');
}

void
dsjob_server_reopen_log(struct dsjob_server *ds)
{
    ctl_send(&ds->srv, 'h');
}

const char *
dsjob_server_errmsg(const struct dsjob_server *ds)
{
    return ds->srv.errmsg;
}

void
dsjob_server_free(struct dsjob_server *ds)
{
    struct srv *srv;
    struct conn *c;

    if (ds == NULL)
        return;
    srv = &ds->srv;
    if (srv->threaded)
        dsjob_server_join(ds);
    http_close(srv);
    listener_close_all(srv);
    while ((c = TAILQ_FIRST(&srv->conns)) != NULL)
        conn_close(c, false);
    if (srv->reaper_ev != NULL)
        reaper_cb(-1, 0, srv);
    schedule_close(srv);
    durable_close(srv);
    deps_close(srv);
    batch_close(srv);
    tls_close(srv);
    flow_ctl_close(srv);
    queue_release(&srv->queue);
    srv_teardown(srv);
    log_release(&srv->log);
    free(srv->cfg_strings);
    free(ds);
}
