/*
 * Flow control in the running server. Settings arrive as a line of words
 * (flow_conf_parse) from three places: --limit at start, the store's
 * function rows at replay (what was set at run time, so it wins), and the
 * admin "limit", "pause" and "resume" commands and HTTP, which store it
 * again with the next commit (storage_set_func). The queue asks flow.c at
 * every grab; what the queue cannot do, having no I/O, is done here: a
 * running job that stops (queue.flow_freed) wakes one sleeping worker of
 * its function if a job may now start, and a function waiting for a token
 * arms one timer for the moment it arrives. A function never held back by
 * anything but its workers wakes workers as lifecycle_wake always did.
 */
#include "config.h"
#include "flow_ctl.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "conn.h"
#include "flow.h"
#include "log.h"
#include "queue.h"
#include "srv.h"
#include "storage.h"

int64_t
flow_ctl_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wake up to n sleeping workers of f while one of its jobs may start. */
static void
wake(struct srv *srv, struct func *f, unsigned n)
{
    struct qworker *w;
    int64_t now = flow_ctl_now_ms();

    while (n-- > 0 && flow_ready(f, now) && (w = queue_wake_one(f)) != NULL)
        conn_send(conn_of_worker(w), PACKET_NOOP, 0, NULL, NULL);
    (void)srv;
}

static unsigned
queued(const struct func *f)
{
    return f->nqueued[0] + f->nqueued[1] + f->nqueued[2];
}

void
flow_ctl_arm(struct srv *srv)
{
    int64_t now = flow_ctl_now_ms(), best = -1;
    struct flow *fl;

    TAILQ_FOREACH (fl, &srv->queue.flows, all) {
        int64_t t;

        if (queued(fl->func) == 0 || TAILQ_EMPTY(&fl->func->sleepers))
            continue;
        t = flow_next_ms(fl->func, now);
        if (t > 0 && (best < 0 || t < best))
            best = t;
    }
    if (best < 0 || srv->flow_ev == NULL)
        return;
    if (srv->flow_armed > 0 && srv->flow_armed <= best && srv->flow_armed > now)
        return;
    {
        int64_t d = best - now;
        struct timeval tv = {d / 1000, (d % 1000) * 1000};

        srv->flow_armed = best;
        evtimer_add(srv->flow_ev, &tv);
    }
}

static void
token_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;
    int64_t now = flow_ctl_now_ms();
    struct flow *fl;

    (void)fd;
    (void)what;
    srv->flow_armed = 0;
    TAILQ_FOREACH (fl, &srv->queue.flows, all) {
        double t = flow_tokens(fl, now);
        unsigned n = queued(fl->func);

        if (n == 0)
            continue;
        if (t >= 1 && t < n)
            n = (unsigned)t;
        wake(srv, fl->func, n);
    }
    flow_ctl_arm(srv);
}

/* Once a second while functions have flow: forget idle keys. */
static void
sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;
    int64_t now = flow_ctl_now_ms();
    struct flow *fl;

    (void)fd;
    (void)what;
    TAILQ_FOREACH (fl, &srv->queue.flows, all)
        if (fl->nkeys > 0)
            flow_sweep(fl, now);
}

/* queue.flow_freed: a running job of f stopped. */
static void
freed(struct func *f, void *arg)
{
    struct srv *srv = arg;

    if (queued(f) > 0 && !TAILQ_EMPTY(&f->sleepers))
        wake(srv, f, 1);
}

static int
events(struct srv *srv)
{
    struct timeval second = {1, 0};

    if (srv->flow_ev != NULL || srv->base == NULL)
        return 0;
    srv->flow_ev = evtimer_new(srv->base, token_cb, srv);
    srv->flow_sweep_ev = event_new(srv->base, -1, EV_PERSIST, sweep_cb, srv);
    if (srv->flow_ev == NULL || srv->flow_sweep_ev == NULL ||
        event_add(srv->flow_sweep_ev, &second) < 0) {
        flow_ctl_close(srv);
        return -1;
    }
    return 0;
}

int
flow_ctl_open(struct srv *srv)
{
    int i;

    srv->queue.now_ms = flow_ctl_now_ms;
    srv->queue.flow_freed = freed;
    srv->queue.flow_arg = srv;
    for (i = 0; i < srv->cfg.nlimits; i++) {
        const char *line = srv->cfg.limits[i], *sp = strchr(line, ' ');
        struct func *f;
        char err[200];

        if (sp == NULL || sp == line) {
            snprintf(srv->errmsg, sizeof(srv->errmsg),
                     "--limit '%.100s': FUNCTION and settings expected", line);
            return -1;
        }
        f = queue_func(&srv->queue, line, (size_t)(sp - line), true);
        if (f == NULL || flow_ctl_apply(srv, f, sp + 1, false, err, sizeof(err)) < 0) {
            snprintf(srv->errmsg, sizeof(srv->errmsg), "--limit '%.100s': %s", line,
                     f == NULL ? "out of memory" : err);
            return -1;
        }
    }
    return 0;
}

void
flow_ctl_close(struct srv *srv)
{
    if (srv->flow_ev != NULL)
        event_free(srv->flow_ev);
    if (srv->flow_sweep_ev != NULL)
        event_free(srv->flow_sweep_ev);
    srv->flow_ev = NULL;
    srv->flow_sweep_ev = NULL;
    srv->flow_armed = 0;
}

int
flow_ctl_apply(struct srv *srv, struct func *f, const char *words, bool store, char *err,
               size_t errlen)
{
    struct flow_conf c;
    struct flow *fl = f->flow;
    bool was_paused = fl != NULL && fl->conf.paused, fresh = fl == NULL;
    char line[FLOW_SPEC_MAX];

    if (fl != NULL)
        c = fl->conf;
    else
        flow_conf_init(&c);
    if (flow_conf_parse(&c, words, err, errlen) < 0)
        return -1;
    if (fl == NULL) {
        if (!flow_conf_any(&c))
            return 0; /* nothing to do, nothing to hold */
        if ((fl = flow_new(f)) == NULL)
            goto nomem;
        fl->ctl = srv;
        TAILQ_INSERT_TAIL(&srv->queue.flows, fl, all); /* before events: nomem takes it out */
        if (events(srv) < 0)
            goto nomem;
    }
    if (flow_set(fl, &c, flow_ctl_now_ms()) < 0)
        goto nomem;
    if (store && storage_set_func(srv, f) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (store)
        srv->storage.flow_gen++; /* what a lease op in flight read of the store is older */
    flow_format(&c, line, sizeof(line));
    if (c.paused != was_paused)
        log_notice(&srv->log, "function '%s' %s", f->name, c.paused ? "paused" : "resumed");
    log_info(&srv->log, "function '%s': flow settings '%s'", f->name, line);
    if (!flow_conf_any(&c)) {
        /* No settings left: the function goes back to the plain grab path. */
        TAILQ_REMOVE(&srv->queue.flows, fl, all);
        flow_free(fl);
        f->flow = NULL;
        {
            unsigned n = queued(f);
            struct qworker *w;

            while (n-- > 0 && (w = queue_wake_one(f)) != NULL)
                conn_send(conn_of_worker(w), PACKET_NOOP, 0, NULL, NULL);
        }
        return 0;
    }
    wake(srv, f, queued(f));
    flow_ctl_arm(srv);
    return 0;

nomem:
    if (fresh && f->flow != NULL) {
        TAILQ_REMOVE(&srv->queue.flows, f->flow, all);
        flow_free(f->flow);
        f->flow = NULL;
    }
    snprintf(err, errlen, "out of memory");
    return -1;
}

void
flow_ctl_replay(struct srv *srv, struct func *f, const char *words)
{
    char err[200], line[FLOW_SPEC_MAX + 16];

    /* The stored line is the whole setting: it replaces --limit's, not adds to it. */
    snprintf(line, sizeof(line), "off resumed %s", words);
    if (flow_ctl_apply(srv, f, line, false, err, sizeof(err)) < 0)
        log_warn(&srv->log, "function '%s': stored flow settings '%s' not applied: %s", f->name,
                 words, err);
}

void
flow_ctl_wake(struct func *f)
{
    struct srv *srv = f->flow->ctl;

    if (TAILQ_EMPTY(&f->sleepers))
        return;
    if (flow_ready(f, flow_ctl_now_ms()))
        wake(srv, f, 1);
    else
        flow_ctl_arm(srv);
}

void
flow_ctl_held(struct srv *srv, const struct qworker *w)
{
    const struct ability *a;
    int64_t now = flow_ctl_now_ms();

    TAILQ_FOREACH (a, &w->abilities, by_worker) {
        struct func *f = a->func;

        if (f->flow == NULL || queued(f) == 0 || flow_ready(f, now))
            continue;
        f->flow->held++;
        log_debug(&srv->log, "function '%s': %u queued jobs held back (%s)", f->name, queued(f),
                  flow_why_name(f->flow->why));
    }
    flow_ctl_arm(srv);
}

void
flow_ctl_show(struct srv *srv, struct func *f, char *buf, size_t len)
{
    struct flow *fl = f->flow;
    int64_t now = flow_ctl_now_ms();
    char line[FLOW_SPEC_MAX], tokens[32];
    double t;

    (void)srv;
    if (fl == NULL) {
        snprintf(buf, len, "%s\tnone\t%u\t%u\t-\t0\tno\t0", f->name, f->nrunning, queued(f));
        return;
    }
    flow_format(&fl->conf, line, sizeof(line));
    t = flow_tokens(fl, now);
    if (t < 0)
        snprintf(tokens, sizeof(tokens), "-");
    else
        snprintf(tokens, sizeof(tokens), "%.1f", t);
    snprintf(buf, len, "%s\t%s\t%u\t%u\t%s\t%u\t%s\t%llu", f->name, line[0] ? line : "none",
             f->nrunning, queued(f), tokens, fl->nkeys,
             queued(f) > 0 && !flow_ready(f, now) ? flow_why_name(fl->why) : "no",
             (unsigned long long)fl->started);
}

/* The --limit line of the function named name (its settings after the name), or NULL. */
static const char *
config_line(const struct srv *srv, const char *name, size_t len)
{
    int i;

    for (i = 0; i < srv->cfg.nlimits; i++) {
        const char *line = srv->cfg.limits[i];

        if (strncmp(line, name, len) == 0 && line[len] == ' ')
            return line + len + 1;
    }
    return NULL;
}

/* Apply "off resumed WORDS" to f unless that is what it has: 1 if it changed, 0 if not. */
static int
sync_one(struct srv *srv, struct func *f, const char *words)
{
    struct flow_conf want, have;
    char a[FLOW_SPEC_MAX], b[FLOW_SPEC_MAX], line[FLOW_SPEC_MAX + 16], err[200];

    snprintf(line, sizeof(line), "off resumed %s", words != NULL ? words : "");
    flow_conf_init(&want);
    if (flow_conf_parse(&want, line, err, sizeof(err)) < 0)
        return 0;
    if (f->flow != NULL)
        have = f->flow->conf;
    else
        flow_conf_init(&have);
    flow_format(&want, a, sizeof(a));
    flow_format(&have, b, sizeof(b));
    if (strcmp(a, b) == 0)
        return 0;
    if (flow_ctl_apply(srv, f, line, false, err, sizeof(err)) < 0) {
        log_warn(&srv->log, "function '%s': stored flow settings '%s' not applied: %s", f->name,
                 words, err);
        return 0;
    }
    return 1;
}

void
flow_ctl_sync(struct srv *srv, const char *rows, size_t n)
{
    const char *at = rows;
    struct func *f, *next;
    size_t i;

    /* A function with a row: the row's settings. */
    for (i = 0; i < n; i++) {
        const char *name = at, *words = at + strlen(at) + 1;

        at = words + strlen(words) + 1;
        f = queue_func(&srv->queue, name, strlen(name), true);
        if (f != NULL && sync_one(srv, f, words) > 0)
            log_notice(&srv->log, "function '%s': flow settings '%s' from the store", name, words);
    }
    /* A function with settings and no row (it was deleted): --limit's, or none. */
    for (f = TAILQ_FIRST(&srv->queue.func_order); f != NULL; f = next) {
        bool found = false;

        next = TAILQ_NEXT(f, order);
        if (f->flow == NULL)
            continue;
        for (i = 0, at = rows; i < n && !found; i++) {
            found = strcmp(at, f->name) == 0;
            at += strlen(at) + 1;
            at += strlen(at) + 1;
        }
        if (!found && sync_one(srv, f, config_line(srv, f->name, f->name_len)) > 0)
            log_notice(&srv->log, "function '%s': flow settings removed from the store", f->name);
    }
}
