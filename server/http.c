/*
 * HTTP, off unless --http-port is given: GET /healthz, GET /metrics (the
 * samples of stats.c with their # HELP and # TYPE lines), a read-only JSON
 * API (/api/status, /api/workers, /api/jobs, /api/job/HANDLE,
 * /api/schedules, /api/batches, /api/batch/ID) built with
 * jansson from the same structures the admin commands print, and the
 * dashboard at / (server/dashboard/, compiled in as static data). evhttp
 * runs on the server's event_base: each request is answered whole in the
 * callback that read it (no request waits on a worker; only a pause,
 * resume or limit on a durable store waits for its commit, and a read of
 * a shared store's batches for its answer, struct http_wait), and evhttp
 * writes the answer without blocking. Requests are bounded before
 * any work is done (URI length, header size, no body), and a bad one gets
 * a 4xx with a one-line JSON reason. GET and HEAD never change anything;
 * with --http-admin, POSTs do (cancel a job, retry or drop dead ones,
 * pause, resume or limit a function), each only from a peer --admin-allow
 * admits and with the CSRF token the page carries, checked before anything
 * is touched.
 */
#include "config.h"
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <pthread.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>
#include <jansson.h>

#include "batch.h"
#include "conn.h"
#include "dashboard.h"
#include "flow.h"
#include "flow_ctl.h"
#include "job.h"
#include "job_dead.h"
#include "lifecycle.h"
#include "listener.h"
#include "queue.h"
#include "schedule.h"
#include "srv.h"
#include "stats.h"

#define HTTP_MAX_URI 2048     /* longest request target accepted, bytes */
#define HTTP_MAX_HEADERS 8192 /* request line and headers, bytes */
#define HTTP_STR_(x) #x
#define HTTP_STR(x) HTTP_STR_(x)
#define HTTP_JOBS_DEFAULT 100  /* /api/jobs without limit= */
#define HTTP_JOBS_MAX 10000    /* the largest limit= */
#define HTTP_MAX_TEXT 256      /* bytes of a name, unique key or id shown in a list */
#define HTTP_MAX_JOB_TEXT 4096 /* bytes of a unique key or error shown for one job */
#define HTTP_MAX_KEY 600       /* longest name given an exact key (its POST fits HTTP_MAX_URI) */
#define HTTP_MAX_FUNCS 10000   /* functions listed in /api/status */
#define HTTP_MAX_WORKERS 10000 /* connections listed in /api/workers */
#define HTTP_MAX_WORKER_FUNCS 1000 /* functions and held jobs listed per worker */
#define HTTP_MAX_BODY 0            /* request body bytes: a POST says all it means in its target */
#define HTTP_TOKEN_BYTES 32        /* random bytes of the CSRF token (twice as many hex digits) */

/* The dashboard loads nothing from anywhere but this server, and runs no inline code. */
#define HTTP_CSP "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/*
 * Every HTTP connection, from its accept to evhttp's close. evhttp (libevent
 * 2.1) has no connection limit, and its timeout restarts on every byte, so
 * the connections are counted and timed here: evhttp asks http_bevcb for
 * each accepted connection's bufferevent, and once evhttp has wrapped it,
 * adopt_cb finds the evhttp_connection (the bufferevent's callback
 * argument) and asks to be told of its close. At --http-max-connections the
 * listener is turned off until one closes. Each connection has a deadline,
 * --http-timeout from its accept or its last request: a request must arrive
 * whole, and the answer to the one before be sent, by then; at the deadline
 * the connection gets the timeout evhttp gives an idle one. Error answers
 * evhttp writes itself (a request that does not parse, headers too large)
 * are HTML: out_cb notices one (a response not written through send_reply)
 * and fix_cb puts the same status with a JSON body in its place.
 */
struct hconn {
    TAILQ_ENTRY(hconn) link;
    struct http_state *hs;
    struct bufferevent *bev;         /* made here; evhttp frees it */
    struct evhttp_connection *evcon; /* NULL until adopt_cb */
    struct evbuffer_cb_entry *outcb; /* on bev's output: out_cb */
    struct event *deadline;          /* --http-timeout */
    struct event *fix;               /* fix_cb, after evhttp wrote an error page */
    bool held;                       /* a reference on bev until adopt_cb */
    bool fixing;                     /* an error page was seen: out_cb looks no more */
};
TAILQ_HEAD(hconn_list, hconn);

/*
 * A pause or resume answered once the open batch, which holds the
 * setting, commits (as durable_reply answers the admin line). req is
 * NULL once http_close has freed it with its connection: nobody is told.
 */
struct http_wait {
    struct storage_wait w; /* first: storage's part */
    struct http_state *hs;
    struct evhttp_request *req;
    bool one;                    /* a shared store's read (w.op): GET /api/batch/ID, not the list */
    json_t *answer;              /* the 200's body, sent once committed (owned) */
    TAILQ_ENTRY(http_wait) link; /* in hs->waits */
};
TAILQ_HEAD(http_wait_list, http_wait);

struct http_state {
    struct srv *srv;
    struct evhttp *http;
    struct evconnlistener *lev;  /* evhttp's listener; NULL once closing */
    bool lev_on;                 /* lev is enabled */
    bool replying;               /* http_cb runs: a response written now is ours */
    struct hconn_list conns;     /* open connections */
    struct http_wait_list waits; /* pauses, resumes, limits waiting for their commit */
    unsigned nconns;             /* entries in conns */
    struct event *adopt_ev;      /* runs adopt_cb after the accept */
    struct http_state *next;     /* in states */
};

/* evhttp's listener calls its error callback with the evhttp: this finds the server. */
static pthread_mutex_t states_lock = PTHREAD_MUTEX_INITIALIZER;
static struct http_state *states;

void
http_accept_update(struct srv *srv)
{
    struct http_state *hs = srv->http_st;
    bool on;

    if (hs == NULL || hs->lev == NULL)
        return;
    on = !srv->accept_paused && hs->nconns < srv->cfg.http_max_connections;
    if (on == hs->lev_on)
        return;
    if (on)
        evconnlistener_enable(hs->lev);
    else
        evconnlistener_disable(hs->lev);
    hs->lev_on = on;
}

static void
hconn_free(struct hconn *hc)
{
    struct http_state *hs = hc->hs;

    TAILQ_REMOVE(&hs->conns, hc, link);
    hs->nconns--;
    event_free(hc->deadline);
    event_free(hc->fix);
    evbuffer_remove_cb_entry(bufferevent_get_output(hc->bev), hc->outcb);
    if (hc->held)
        bufferevent_decref(hc->bev);
    free(hc);
    http_accept_update(hs->srv);
}

static void
closed_cb(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    hconn_free(arg);
}

static void
adopt_cb(evutil_socket_t fd, short what, void *arg)
{
    struct http_state *hs = arg;
    struct hconn *hc, *next;
    bufferevent_event_cb ecb;
    void *cbarg;

    (void)fd;
    (void)what;
    for (hc = TAILQ_FIRST(&hs->conns); hc != NULL; hc = next) {
        next = TAILQ_NEXT(hc, link);
        if (hc->evcon != NULL)
            continue;
        bufferevent_getcb(hc->bev, NULL, NULL, &ecb, &cbarg);
        if (ecb == NULL || cbarg == NULL) { /* evhttp let it go already */
            hconn_free(hc);
            continue;
        }
        hc->evcon = cbarg;
        evhttp_connection_set_closecb(hc->evcon, closed_cb, hc);
        hc->held = false;
        bufferevent_decref(hc->bev);
    }
}

/* The deadline: closed as evhttp closes a connection idle past its timeout. */
static void
deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    struct hconn *hc = arg;

    (void)fd;
    (void)what;
    if (hc->evcon == NULL)
        return;
    log_info(&hc->hs->srv->log, "http: closed a connection at its --http-timeout deadline (%u s)",
             hc->hs->srv->cfg.http_timeout);
    /* evhttp frees the connection, and hc with it (closed_cb) */
    bufferevent_trigger_event(hc->bev, BEV_EVENT_READING | BEV_EVENT_TIMEOUT, 0);
}

static void
arm_deadline(struct hconn *hc)
{
    struct timeval tv = {(time_t)hc->hs->srv->cfg.http_timeout, 0};

    evtimer_add(hc->deadline, &tv);
}

/* Data added to a connection's output: an error page evhttp wrote itself, or ours? */
static void
out_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct hconn *hc = arg;
    char line[13];
    int code;

    if (info->n_added == 0 || info->orig_size != 0 || hc->hs->replying || hc->fixing)
        return;
    if (evbuffer_copyout(buf, line, sizeof(line) - 1) != (ev_ssize_t)sizeof(line) - 1)
        return;
    line[sizeof(line) - 1] = '\0';
    if (strncmp(line, "HTTP/1.", 7) != 0 || sscanf(line + 9, "%3d", &code) != 1 || code < 400)
        return; /* 100 Continue, or nothing we know */
    hc->fixing = true;
    event_active(hc->fix, EV_TIMEOUT, 0); /* once evhttp has written the whole page */
}

/* What a status evhttp answers by itself means here. */
static const char *
evhttp_error_text(int code)
{
    switch (code) {
    case 400:
        return "the request does not parse as HTTP/1.0 or HTTP/1.1, or its request line and "
               "headers are over " HTTP_STR(HTTP_MAX_HEADERS) " bytes";
    case 413: return "the request has a body: no request here takes one";
    case 417: return "Expect: only 100-continue is understood";
    case 501: return "the method is not implemented: GET and HEAD (POST with --http-admin) are";
    default: return "the request was refused";
    }
}

/* Replaces the HTML page evhttp wrote with the same status and a JSON body. */
static void
fix_cb(evutil_socket_t fd, short what, void *arg)
{
    struct hconn *hc = arg;
    struct evbuffer *out = bufferevent_get_output(hc->bev);
    struct evbuffer_ptr eol = evbuffer_search(out, "\r\n", 2, NULL);
    struct evbuffer_ptr eoh = evbuffer_search(out, "\r\n\r\n", 4, NULL);
    size_t len = evbuffer_get_length(out);
    char status[128], body[300];
    bool has_body;
    int code = 0;

    (void)fd;
    (void)what;
    if (eol.pos < 8 || eoh.pos < 0 || (size_t)eol.pos >= sizeof(status))
        return;
    evbuffer_copyout(out, status, (size_t)eol.pos);
    status[eol.pos] = '\0';
    if (sscanf(status + 9, "%3d", &code) != 1)
        return;
    has_body = len > (size_t)eoh.pos + 4;
    snprintf(body, sizeof(body), "{\"error\":\"%s\"}\n", evhttp_error_text(code));
    evbuffer_drain(out, len);
    evbuffer_add_printf(out,
                        "%s\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n"
                        "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                        status, strlen(body), has_body ? body : "");
}

/* evhttp's question for each accepted connection: its bufferevent, made here to count it. */
static struct bufferevent *
http_bevcb(struct event_base *base, void *arg)
{
    struct srv *srv = arg;
    struct http_state *hs = srv->http_st;
    struct hconn *hc = calloc(1, sizeof(*hc));
    struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);

    if (hc == NULL || bev == NULL || (hc->deadline = evtimer_new(base, deadline_cb, hc)) == NULL ||
        (hc->fix = event_new(base, -1, 0, fix_cb, hc)) == NULL ||
        (hc->outcb = evbuffer_add_cb(bufferevent_get_output(bev), out_cb, hc)) == NULL) {
        /* evhttp makes a bufferevent of its own, or drops the connection */
        log_err(&srv->log, "http: out of memory for a connection");
        if (hc != NULL && hc->deadline != NULL)
            event_free(hc->deadline);
        if (hc != NULL && hc->fix != NULL)
            event_free(hc->fix);
        free(hc);
        return bev;
    }
    hc->hs = hs;
    hc->bev = bev;
    hc->held = true; /* until adopt_cb, so a connection evhttp drops at once is no dangling bev */
    bufferevent_incref(bev);
    TAILQ_INSERT_TAIL(&hs->conns, hc, link);
    hs->nconns++;
    arm_deadline(hc);
    event_active(hs->adopt_ev, EV_TIMEOUT, 0);
    http_accept_update(srv);
    return bev;
}

/* The request req is here whole: its connection's next deadline starts now. */
static void
request_arrived(struct srv *srv, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct hconn *hc;

    TAILQ_FOREACH (hc, &srv->http_st->conns, link)
        if (hc->evcon == evcon) {
            arm_deadline(hc);
            return;
        }
}

/* An accept on the HTTP port failed (EMFILE...): rest every listener a moment. */
static void
http_accept_error_cb(struct evconnlistener *lev, void *arg)
{
    int err = EVUTIL_SOCKET_ERROR();
    struct http_state *hs;

    (void)arg;
    pthread_mutex_lock(&states_lock);
    for (hs = states; hs != NULL && hs->lev != lev; hs = hs->next)
        ;
    pthread_mutex_unlock(&states_lock);
    if (hs != NULL)
        listener_pause(hs->srv, "HTTP", err);
    else
        evconnlistener_disable(lev); /* cannot be: but never spin */
}

/* The length of the valid UTF-8 sequence at p (n bytes left), or 0 if there is none. */
static size_t
utf8_seq(const unsigned char *p, size_t n)
{
    unsigned cp;
    size_t k, i;

    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        k = 2, cp = p[0] & 0x1fu;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        k = 3, cp = p[0] & 0x0fu;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        k = 4, cp = p[0] & 0x07u;
    else
        return 0;
    if (n < k)
        return 0;
    for (i = 1; i < k; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3fu);
    }
    if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return k;
}

/*
 * A string for JSON, of at most max bytes of s (cut at a character): UTF-8
 * as it is, but a backslash, a control byte and a byte that is not UTF-8
 * spelled \xHH, so every backslash shown starts an escape and two
 * different strings never read alike (a raw 0xff byte is \xff, the four
 * characters \xff are \x5cxff). *cut, if not NULL, is set when s was longer.
 */
static json_t *
jstr_max(const void *s, size_t len, size_t max, bool *cut)
{
    const unsigned char *p = s;
    json_t *j;
    char *tmp;
    size_t i = 0, k = 0, n;

    if (cut != NULL)
        *cut = len > max;
    if (len > max) {
        len = max;
        while (len > 0 && (p[len] & 0xc0) == 0x80) /* not inside a character */
            len--;
    }
    tmp = malloc(len * 4 + 1);
    if (tmp == NULL)
        return NULL;
    while (i < len) {
        if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\') {
            tmp[k++] = (char)p[i++];
        } else if (p[i] >= 0x80 && (n = utf8_seq(p + i, len - i)) > 0) {
            memcpy(tmp + k, p + i, n);
            k += n, i += n;
        } else {
            k += (size_t)snprintf(tmp + k, 5, "\\x%02x", p[i++]);
        }
    }
    j = json_stringn(tmp, k);
    free(tmp);
    return j;
}

/* A string for JSON, whole (texts of our own, bounded where they are made). */
static json_t *
jstr(const void *s, size_t len)
{
    return jstr_max(s, len, len, NULL);
}

/* A name or key in an answer, cut at HTTP_MAX_TEXT bytes. */
static json_t *
jtext(const void *s, size_t len)
{
    return jstr_max(s, len, HTTP_MAX_TEXT, NULL);
}

/* A function's exact key: its name's bytes in hex, or null past HTTP_MAX_KEY bytes. */
static json_t *
jkey(const char *name, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    char buf[2 * HTTP_MAX_KEY];
    size_t i;

    if (len > HTTP_MAX_KEY)
        return json_null();
    for (i = 0; i < len; i++) {
        buf[2 * i] = hex[(unsigned char)name[i] >> 4];
        buf[2 * i + 1] = hex[(unsigned char)name[i] & 15];
    }
    return json_stringn(buf, 2 * len);
}

/*
 * Sends what is in the request's output buffer. HEAD gets the headers a GET
 * would (its Content-Length too) and no body: this evhttp sends what the
 * buffer holds whatever the method.
 */
static void
send_reply(struct evhttp_request *req, int code, const char *reason)
{
    struct evbuffer *buf = evhttp_request_get_output_buffer(req);

    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        char len[24];

        snprintf(len, sizeof(len), "%zu", evbuffer_get_length(buf));
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Length", len);
        evbuffer_drain(buf, evbuffer_get_length(buf));
    }
    evhttp_send_reply(req, code, reason, NULL);
}

/* Sends j (taken over) with code; a document that cannot be made is a 500. */
static void
reply_json(struct evhttp_request *req, int code, const char *reason, json_t *j)
{
    struct evbuffer *buf = evhttp_request_get_output_buffer(req);
    char *text = j != NULL ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;

    json_decref(j);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
    if (text == NULL) {
        evbuffer_add_printf(buf, "{\"error\":\"out of memory\"}\n");
        send_reply(req, 500, "Internal Server Error");
        return;
    }
    evbuffer_add(buf, text, strlen(text));
    evbuffer_add(buf, "\n", 1);
    free(text);
    send_reply(req, code, reason);
}

/* A 4xx (or 5xx) with {"error": "..."}. */
static void reply_error(struct evhttp_request *req, int code, const char *reason, const char *fmt,
                        ...) __attribute__((format(printf, 4, 5)));

static void
reply_error(struct evhttp_request *req, int code, const char *reason, const char *fmt, ...)
{
    char msg[300];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    reply_json(req, code, reason, json_pack("{s:o*}", "error", jstr(msg, strlen(msg))));
}

/* Why the server should not be sent work now, or NULL when it can take it. */
static const char *
unhealthy(const struct srv *srv, char *buf, size_t len)
{
    if (srv->stopped || srv->draining)
        return "stopping";
    if (srv->stats.store_failing) {
        snprintf(buf, len, "store: the last commit failed: %s", srv->stats.store_error);
        return buf;
    }
    if (storage_stuck(srv, buf, len) != NULL)
        return buf;
    if (srv->cfg.max_jobs > 0 && queue_live(&srv->queue) >= srv->cfg.max_jobs) {
        snprintf(buf, len, "--max-jobs reached: %zu jobs held", queue_live(&srv->queue));
        return buf;
    }
    if (srv->cfg.max_connections > 0 && srv->nconns >= srv->cfg.max_connections) {
        snprintf(buf, len, "--max-connections reached: %u connections", srv->nconns);
        return buf;
    }
    return NULL;
}

/* The peer of req, if --admin-allow admits it (HTTP is TCP only: no unix socket here). */
static bool
peer_admitted(const struct srv *srv, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    const struct sockaddr *sa = evcon != NULL ? evhttp_connection_get_addr(evcon) : NULL;

    return sa != NULL && srv_admin_allowed(srv, sa);
}

/* The peer's address as text, for errors and the log; "?" if unknown. */
static const char *
peer_name(struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    const char *addr = NULL;
    ev_uint16_t port;

    if (evcon != NULL)
        evhttp_connection_get_peer(evcon, (char **)&addr, &port);
    return addr != NULL ? addr : "?";
}

/*
 * Is the request's Host one that DNS rebinding cannot forge: an IP address,
 * localhost, or --http-listen as given (a name the operator chose)? A site
 * whose name an attacker re-points at 127.0.0.1 becomes the page's own
 * origin, but its requests still say its name in Host: they get no token
 * and may not write.
 */
static bool
host_ok(const struct srv *srv, struct evhttp_request *req)
{
    const char *host = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");
    const char *end, *colon;
    unsigned char addr[16];
    char name[256];
    size_t len;

    if (host == NULL)
        return false;
    if (host[0] == '[') {
        end = strchr(host, ']');
        len = end != NULL ? (size_t)(end - host - 1) : 0;
        if (end == NULL || len >= sizeof(name) || (end[1] != '\0' && end[1] != ':'))
            return false;
        memcpy(name, host + 1, len);
        name[len] = '\0';
        return inet_pton(AF_INET6, name, addr) == 1;
    }
    colon = strchr(host, ':');
    len = colon != NULL ? (size_t)(colon - host) : strlen(host);
    if (len == 0 || len >= sizeof(name))
        return false;
    memcpy(name, host, len);
    name[len] = '\0';
    return inet_pton(AF_INET, name, addr) == 1 || strcasecmp(name, "localhost") == 0 ||
           (srv->cfg.http_listen != NULL && strcasecmp(name, srv->cfg.http_listen) == 0);
}

/* The headers of every dashboard file: its type, no caching, no framing, no outside loads. */
static void
static_headers(struct evhttp_request *req, const char *type)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);

    evhttp_add_header(h, "Content-Type", type);
    evhttp_add_header(h, "Content-Security-Policy", HTTP_CSP);
    evhttp_add_header(h, "Cache-Control", "no-store");
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "X-Frame-Options", "DENY");
    evhttp_add_header(h, "Referrer-Policy", "no-referrer");
}

/*
 * GET /: the page, with the CSRF token where it says @TOKEN@ when admin
 * writes are on and the peer may make them, by a Host that is no rebound
 * name (the page shows its buttons only then); an empty token otherwise.
 */
static void
get_page(struct srv *srv, struct evhttp_request *req)
{
    struct evbuffer *buf = evhttp_request_get_output_buffer(req);
    const char *page = (const char *)dashboard_html, *mark = strstr(page, "@TOKEN@");
    const char *token = srv->http_token[0] != '\0' && peer_admitted(srv, req) && host_ok(srv, req)
                            ? srv->http_token
                            : "";

    if (mark == NULL) {
        evbuffer_add(buf, page, dashboard_html_len);
    } else {
        evbuffer_add(buf, page, (size_t)(mark - page));
        evbuffer_add(buf, token, strlen(token));
        evbuffer_add(buf, mark + 7, dashboard_html_len - (size_t)(mark + 7 - page));
    }
    static_headers(req, "text/html; charset=utf-8");
    send_reply(req, 200, "OK");
}

static void
get_file(struct evhttp_request *req, const unsigned char *data, size_t len, const char *type)
{
    evbuffer_add(evhttp_request_get_output_buffer(req), data, len);
    static_headers(req, type);
    send_reply(req, 200, "OK");
}

static void
get_healthz(struct srv *srv, struct evhttp_request *req)
{
    char buf[256];
    const char *why = unhealthy(srv, buf, sizeof(buf));

    if (why == NULL)
        reply_json(req, 200, "OK", json_pack("{s:s}", "status", "ok"));
    else
        reply_json(
            req, 503, "Service Unavailable",
            json_pack("{s:s,s:o*}", "status", "unavailable", "reason", jstr(why, strlen(why))));
}

static void
get_metrics(struct srv *srv, struct evhttp_request *req)
{
    struct evbuffer *buf = evhttp_request_get_output_buffer(req);

    if (stats_render(srv, buf, true) < 0) {
        evbuffer_drain(buf, evbuffer_get_length(buf));
        reply_error(req, 500, "Internal Server Error", "out of memory");
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    send_reply(req, 200, "OK");
}

/* A histogram's count and sum (seconds). */
static json_t *
hist_json(const struct stats_hist *h)
{
    uint64_t count = 0;
    int i;

    for (i = 0; i <= STATS_NBOUNDS; i++)
        count += h->n[i];
    return json_pack("{s:I,s:f}", "count", (json_int_t)count, "sum_seconds", h->sum / 1000.0);
}

/* A function's row; f NULL for one known only as waiting in the shared table. */
static json_t *
func_json(const struct srv *srv, const struct func *f, const char *name, size_t len)
{
    static const struct func none;
    const struct stats_func *s;

    if (f == NULL)
        f = &none;
    else
        name = f->name, len = f->name_len;
    s = &f->stats;
    return json_pack("{s:o*,s:o*,s:{s:i,s:i,s:i},s:i,s:i,s:i,s:i,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:o*,"
                     "s:o*,s:I}",
                     "name", jtext(name, len), "key", jkey(name, len), "queued", "high",
                     f->nqueued[JOB_PRIO_HIGH], "normal", f->nqueued[JOB_PRIO_NORMAL], "low",
                     f->nqueued[JOB_PRIO_LOW], "scheduled", f->nscheduled, "running",
                     f->nrunning + f->nsettling, "workers", f->nworkers, "dead", f->ndead,
                     "oldest_queued_seconds", f == &none ? 0.0 : stats_oldest_ms(srv, f) / 1000.0,
                     "submitted", (json_int_t)s->submitted, "completed", (json_int_t)s->completed,
                     "failed", (json_int_t)s->failed, "exceptions", (json_int_t)s->exceptions,
                     "retried", (json_int_t)s->retried, "cancelled", (json_int_t)s->cancelled,
                     "queue_wait", hist_json(&s->wait), "run", hist_json(&s->run), "shared_waiting",
                     (json_int_t)stats_pg_waiting(srv, name, len));
}

/* A function's flow control for /api/status: its settings and state, or null without. */
static json_t *
flow_json(struct func *f)
{
    struct flow *fl = f->flow;
    int64_t now = flow_ctl_now_ms();
    unsigned q = f->nqueued[0] + f->nqueued[1] + f->nqueued[2];
    char line[FLOW_SPEC_MAX];
    double t;

    if (fl == NULL)
        return json_null();
    flow_format(&fl->conf, line, sizeof(line));
    t = flow_tokens(fl, now);
    return json_pack("{s:s,s:b,s:i,s:i,s:o,s:s,s:i,s:I}", "settings", line, "paused",
                     fl->conf.paused, "concurrency", (int)fl->conf.concurrency, "running",
                     (int)f->nrunning, "tokens", t < 0 ? json_null() : json_real(t), "held",
                     q > 0 && !flow_ready(f, now) ? flow_why_name(fl->why) : "no", "keys",
                     (int)fl->nkeys, "started", (json_int_t)fl->started);
}

static void
get_status(struct srv *srv, struct evhttp_request *req)
{
    const struct stats *st = &srv->stats;
    json_t *doc, *funcs, *limits;
    struct stats_walk it = {NULL, 0};
    const struct func *f;
    const char *name;
    unsigned kinds[3];
    uint64_t n;
    char buf[256];
    const char *why = unhealthy(srv, buf, sizeof(buf));
    bool cut = false;
    int i;

    stats_conns(srv, kinds);
    limits = json_object();
    for (i = 0; i < STATS_NLIMITS && limits != NULL; i++)
        json_object_set_new(limits, stats_limit_name((enum stats_limit)i),
                            json_integer((json_int_t)st->limits[i]));
    funcs = json_array();
    TAILQ_FOREACH (f, &srv->queue.func_order, order) {
        if (funcs != NULL && json_array_size(funcs) >= HTTP_MAX_FUNCS) {
            cut = true;
            break;
        }
        json_t *fj = func_json(srv, f, NULL, 0);

        if (fj != NULL)
            json_object_set_new(fj, "flow", flow_json((struct func *)f));
        if (funcs != NULL && json_array_append_new(funcs, fj) < 0)
            break;
    }
    while (!cut && (name = stats_pg_waiting_next(srv, &it, &n)) != NULL) {
        if (queue_func(&srv->queue, name, strlen(name), false) != NULL)
            continue;
        if (funcs != NULL && json_array_size(funcs) >= HTTP_MAX_FUNCS) {
            cut = true;
            break;
        }
        if (funcs != NULL &&
            json_array_append_new(funcs, func_json(srv, NULL, name, strlen(name))) < 0)
            break;
    }
    doc = json_pack(
        "{s:s,s:I,s:b,s:o*,s:I,s:I,s:{s:i,s:i,s:i,s:I},s:{s:I,s:I},s:o*,"
        "s:{s:s,s:I,s:I,s:b,s:o*},s:o*}",
        "version", DSJOB_VERSION_STRING, "uptime_seconds",
        (json_int_t)(clock_uptime() - st->started), "healthy", why == NULL, "reason",
        why ? jstr(why, strlen(why)) : json_null(), "jobs", (json_int_t)srv->queue.njobs,
        "jobs_replayed", (json_int_t)st->replayed, "connections", "client", kinds[0], "worker",
        kinds[1], "admin", kinds[2], "accepted", (json_int_t)st->accepted, "bytes", "received",
        (json_int_t)st->bytes_in, "sent", (json_int_t)st->bytes_out, "limit_hits", limits, "store",
        "name", srv->cfg.store ? srv->cfg.store : "none", "commits", (json_int_t)st->commits,
        "commit_errors", (json_int_t)st->commit_errors, "failing", st->store_failing, "commit",
        hist_json(&st->commit_ms), "functions", funcs);
    if (doc != NULL && cut)
        json_object_set_new(doc, "functions_truncated", json_true());
    if (doc == NULL)
        reply_error(req, 500, "Internal Server Error", "out of memory");
    else
        reply_json(req, 200, "OK", doc);
}

static json_t *
worker_json(const struct conn *c)
{
    json_t *funcs = json_array(), *held = json_array();
    const struct ability *a;
    const struct job *j;

    json_t *doc;
    bool cut = false;

    TAILQ_FOREACH (a, &c->worker.abilities, by_worker) {
        if (json_array_size(funcs) >= HTTP_MAX_WORKER_FUNCS) {
            cut = true;
            break;
        }
        json_array_append_new(funcs, jtext(a->func->name, a->func->name_len));
    }
    TAILQ_FOREACH (j, &c->worker.held, link) {
        if (json_array_size(held) >= HTTP_MAX_WORKER_FUNCS) {
            cut = true;
            break;
        }
        json_array_append_new(held, json_string(job_handle(j)));
    }
    doc = json_pack("{s:i,s:s,s:o*,s:o*,s:o*,s:b}", "fd", c->fd, "ip", c->ip, "id",
                    c->client_id ? jtext(c->client_id, strlen(c->client_id)) : json_null(),
                    "functions", funcs, "running", held, "asleep", c->worker.asleep);
    if (doc != NULL && cut)
        json_object_set_new(doc, "truncated", json_true());
    return doc;
}

/* Every connection that registered a function or holds a job, newest first (admin "workers"). */
static void
get_workers(struct srv *srv, struct evhttp_request *req)
{
    json_t *list = json_array();
    const struct conn *c;

    bool cut = false;

    TAILQ_FOREACH_REVERSE (c, &srv->conns, conn_list, link) {
        if (list == NULL || !(c->worker.nabilities > 0 || c->worker.nheld > 0))
            continue;
        if (json_array_size(list) >= HTTP_MAX_WORKERS) {
            cut = true;
            break;
        }
        json_array_append_new(list, worker_json(c));
    }
    if (list == NULL)
        reply_error(req, 500, "Internal Server Error", "out of memory");
    else
        reply_json(req, 200, "OK", json_pack("{s:o,s:b}", "workers", list, "truncated", cut));
}

/* The periodic schedules, as admin "schedule list" prints them. */
static void
get_schedules(struct srv *srv, struct evhttp_request *req)
{
    json_t *list = schedule_json(srv);

    if (list == NULL)
        reply_error(req, 500, "Internal Server Error", "out of memory");
    else
        reply_json(req, 200, "OK", json_pack("{s:o}", "schedules", list));
}

/* A shared store's batches are read (storage_wait_fn): the answer. */
static void
batches_read(struct srv *srv, struct storage_wait *w, bool ok, const char *why)
{
    struct http_wait *hw = (struct http_wait *)w;
    json_t *list;

    (void)srv;
    if (hw->req == NULL) {
        free(hw);
        return;
    }
    TAILQ_REMOVE(&hw->hs->waits, hw, link);
    if (why == NULL) { /* the store closed: nobody is told */
        free(hw);
        return;
    }
    hw->hs->replying = true;
    list = ok ? batch_shared_json(w->op) : NULL;
    if (!ok)
        reply_error(hw->req, 503, "Service Unavailable", "STORE_ERROR %s", why);
    else if (list == NULL)
        reply_error(hw->req, 500, "Internal Server Error", "out of memory");
    else if (!hw->one)
        reply_json(hw->req, 200, "OK",
                   json_pack("{s:O}", "batches", list)); /* O: list is freed below */
    else if (json_array_size(list) == 0)
        reply_error(hw->req, 404, "Not Found", "no batch %.*s", (int)w->op->sb.id_len,
                    w->op->sb.id);
    else
        reply_json(hw->req, 200, "OK", json_incref(json_array_get(list, 0)));
    json_decref(list);
    hw->hs->replying = false;
    free(hw);
}

/*
 * On a shared store (postgres) the batches are the database's: read them
 * with the open batch, and answer once it is done.
 */
static void
get_shared_batches(struct srv *srv, struct evhttp_request *req, const char *id, size_t len)
{
    struct http_wait *hw = storage_alloc(srv, "http reply", sizeof(*hw));

    if (hw == NULL || (hw->w.op = batch_shared_read(srv, id, len)) == NULL) {
        free(hw);
        reply_error(req, 500, "Internal Server Error", "out of memory");
        return;
    }
    hw->w.done = batches_read;
    hw->hs = srv->http_st;
    hw->req = req;
    hw->one = id != NULL;
    TAILQ_INSERT_TAIL(&srv->http_st->waits, hw, link);
    storage_wait(srv, &hw->w);
}

/* The batches, as admin "batch list" prints them. */
static void
get_batches(struct srv *srv, struct evhttp_request *req)
{
    json_t *list;

    if (storage_batches_shared(srv)) {
        get_shared_batches(srv, req, NULL, 0);
        return;
    }
    list = batch_json(srv);
    if (list == NULL)
        reply_error(req, 500, "Internal Server Error", "out of memory");
    else
        reply_json(req, 200, "OK", json_pack("{s:o}", "batches", list));
}

/* GET /api/batch/ID: one batch, as admin "batch status ID" finds it. */
static void
get_batch(struct srv *srv, struct evhttp_request *req, const char *id, size_t len)
{
    json_t *o;

    if (!batch_id_ok(id, len)) {
        reply_error(req, 404, "Not Found", "no batch %.*s", (int)(len > 100 ? 100 : len), id);
        return;
    }
    if (storage_batches_shared(srv)) {
        get_shared_batches(srv, req, id, len);
        return;
    }
    o = batch_json_one(srv, id, len);
    if (o == NULL)
        reply_error(req, 404, "Not Found", "no batch %.*s", (int)len, id);
    else
        reply_json(req, 200, "OK", o);
}

/* One job, with the fields of admin "show job". */
static json_t *
job_json(const struct job *j, size_t max)
{
    const struct job_ext *x = j->ext;
    struct qworker *w = job_worker(j);
    json_t *doc, *worker = json_null();
    bool ucut = false;

    if (w != NULL) {
        struct conn *wc = conn_of_worker(w);

        worker =
            json_pack("{s:i,s:s,s:o*}", "fd", wc->fd, "ip", wc->ip, "id",
                      wc->client_id ? jtext(wc->client_id, strlen(wc->client_id)) : json_null());
    }
    doc = json_pack("{s:s,s:o*,s:s,s:s,s:b,s:I,s:o*,s:I,s:I,s:o*,s:[I,I],s:i}", "handle",
                    job_handle(j), "function", jtext(j->func->name, j->func->name_len), "state",
                    job_state_name(j), "priority", job_prio_name(j->prio), "background",
                    j->background, "attempts", (json_int_t)job_attempts(j), "unique",
                    jstr_max(job_unique(j), j->unique_len, max, &ucut), "run_at",
                    (json_int_t)(j->state == JOB_DEAD || j->state == JOB_DONE ? 0 : job_when(j)),
                    "payload_size", (json_int_t)j->data_len, "worker", worker, "status",
                    (json_int_t)(x ? x->numerator : 0), (json_int_t)(x ? x->denominator : 0),
                    "waiters", (int)job_nwaiters(j));
    if (doc != NULL && ucut)
        json_object_set_new(doc, "unique_size", json_integer((json_int_t)j->unique_len));
    if (doc != NULL)
        json_object_set_new(doc, "function_key", jkey(j->func->name, j->func->name_len));
    if (doc == NULL || x == NULL)
        return doc;
    if (j->state == JOB_DONE) {
        json_object_set_new(doc, "outcome", json_string(job_outcome_name(x->outcome)));
        json_object_set_new(doc, "ended", json_integer(x->last_fail));
        json_object_set_new(doc, "result_size", json_integer(x->result_size));
    } else if (x->first_fail != 0) {
        json_object_set_new(doc, "first_failure", json_integer(x->first_fail));
        json_object_set_new(doc, "last_failure", json_integer(x->last_fail));
        json_object_set_new(doc, "error", jstr_max(x->error, x->error_len, max, &ucut));
        if (ucut)
            json_object_set_new(doc, "error_size", json_integer((json_int_t)x->error_len));
    }
    return doc;
}

static void
free_vals(const char **vals, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        free((char *)vals[i]);
}

/* The query's parameters, each name allowed once and known; false after a 4xx or 5xx. */
static bool
parse_query(struct evhttp_request *req, const char *query, const char *const *known,
            const char **vals, size_t n)
{
    struct evkeyvalq params;
    struct evkeyval *kv;
    bool ok = true;
    size_t i;

    for (i = 0; i < n; i++)
        vals[i] = NULL;
    if (query == NULL)
        return true;
    TAILQ_INIT(&params);
    if (evhttp_parse_query_str(query, &params) != 0) {
        reply_error(req, 400, "Bad Request", "the query string does not parse");
        return false;
    }
    TAILQ_FOREACH (kv, &params, next) {
        for (i = 0; i < n && strcmp(kv->key, known[i]) != 0; i++)
            ;
        if (i == n || vals[i] != NULL) {
            reply_error(req, 400, "Bad Request", "%s query parameter '%.40s'",
                        i == n ? "unknown" : "repeated", kv->key);
            ok = false;
            break;
        }
        vals[i] = kv->value;
    }
    /* The values live in params, which is cleared here: the caller gets copies. */
    for (i = 0; ok && i < n; i++) {
        if (vals[i] != NULL && (vals[i] = strdup(vals[i])) == NULL) {
            free_vals(vals, i);
            reply_error(req, 500, "Internal Server Error", "out of memory");
            ok = false;
        }
    }
    if (!ok)
        for (i = 0; i < n; i++)
            vals[i] = NULL;
    evhttp_clear_headers(&params);
    return ok;
}

/* Appends j to list if there is room; false once limit jobs are listed. */
static bool
add_job(json_t *list, const struct job *j, const struct func *only, size_t limit, bool *cut)
{
    if (only != NULL && j->func != only)
        return true;
    if (json_array_size(list) >= limit) {
        *cut = true;
        return false;
    }
    json_array_append_new(list, job_json(j, HTTP_MAX_TEXT));
    return true;
}

/* Jobs as "show jobs detail" lists them: queued, scheduled, running, dead, kept. */
static void
list_jobs(struct srv *srv, json_t *list, const struct func *only, size_t limit, bool *cut)
{
    struct queue *q = &srv->queue;
    const struct func *f;
    const struct conn *c;
    const struct job *j;
    size_t i;
    int p;

    TAILQ_FOREACH (f, &q->func_order, order)
        for (p = 0; p < JOB_NPRIO; p++)
            TAILQ_FOREACH (j, &f->jobs[p], link)
                if (!add_job(list, j, only, limit, cut))
                    return;
    for (i = 0; i < q->scheduled.len; i++)
        if (!add_job(list, q->scheduled.elems[i], only, limit, cut))
            return;
    TAILQ_FOREACH (c, &srv->conns, link)
        TAILQ_FOREACH (j, &c->worker.held, link)
            if (!add_job(list, j, only, limit, cut))
                return;
    TAILQ_FOREACH (f, &q->func_order, order)
        TAILQ_FOREACH (j, &f->dead, link)
            if (!add_job(list, j, only, limit, cut))
                return;
    TAILQ_FOREACH (j, &q->kept, link)
        if (!add_job(list, j, only, limit, cut))
            return;
}

static void
get_jobs(struct srv *srv, struct evhttp_request *req, const char *query)
{
    static const char *const known[] = {"function", "limit"};
    const char *vals[2];
    const struct func *only = NULL;
    unsigned long limit = HTTP_JOBS_DEFAULT;
    bool cut = false;
    json_t *list;

    if (!parse_query(req, query, known, vals, 2))
        return;
    if (vals[1] != NULL) {
        char *end;

        errno = 0;
        limit = strtoul(vals[1], &end, 10);
        if (vals[1][0] < '0' || vals[1][0] > '9' || *end != '\0' || errno != 0 || limit == 0 ||
            limit > HTTP_JOBS_MAX) {
            reply_error(req, 400, "Bad Request", "limit must be 1 to %d", HTTP_JOBS_MAX);
            goto out;
        }
    }
    if (vals[0] != NULL) {
        only = queue_func(&srv->queue, vals[0], strlen(vals[0]), false);
        if (only == NULL) {
            reply_error(req, 404, "Not Found", "no function '%.200s'", vals[0]);
            goto out;
        }
    }
    list = json_array();
    if (list == NULL) {
        reply_error(req, 500, "Internal Server Error", "out of memory");
        goto out;
    }
    list_jobs(srv, list, only, limit, &cut);
    reply_json(req, 200, "OK", json_pack("{s:o,s:b}", "jobs", list, "truncated", cut));
out:
    free_vals(vals, 2);
}

/* f's job with this unique key: queued, running, settling or kept; NULL if none. */
static struct job *
find_unique(const struct func *f, const char *unique)
{
    size_t len = strlen(unique);
    struct job *j = queue_find_unique(f, unique, len);

    if (j == NULL && (j = queue_find_settling(f, unique, len)) == NULL)
        j = queue_find_kept(f, unique, len);
    return j;
}

/*
 * /api/job/HANDLE, or /api/job?unique=U&function=F (queued, running,
 * settling or kept); without function=, the one function whose index holds U.
 */
static void
get_job(struct srv *srv, struct evhttp_request *req, const char *handle, size_t handle_len,
        const char *query)
{
    static const char *const known[] = {"function", "unique"};
    const char *vals[2];
    struct job *j = NULL;
    struct func *f;

    if (handle_len > 0) {
        if (query != NULL) {
            reply_error(req, 400, "Bad Request", "/api/job/HANDLE takes no query");
            return;
        }
        j = queue_find_job(&srv->queue, handle, handle_len);
        if (j == NULL)
            reply_error(req, 404, "Not Found", "no job '%.*s'", (int)handle_len, handle);
        else
            reply_json(req, 200, "OK", job_json(j, HTTP_MAX_JOB_TEXT));
        return;
    }
    if (!parse_query(req, query, known, vals, 2))
        return;
    if (vals[1] == NULL) {
        reply_error(req, 400, "Bad Request",
                    "use /api/job/HANDLE or /api/job?unique=U[&function=F]");
        goto out;
    }
    if (vals[0] != NULL) {
        f = queue_func(&srv->queue, vals[0], strlen(vals[0]), false);
        j = f != NULL ? find_unique(f, vals[1]) : NULL;
        if (j == NULL)
            reply_error(req, 404, "Not Found", "no job of '%.100s' with unique '%.100s'", vals[0],
                        vals[1]);
        else
            reply_json(req, 200, "OK", job_json(j, HTTP_MAX_JOB_TEXT));
        goto out;
    }
    /* Without a function: every function's index, and the key must name one job. */
    TAILQ_FOREACH (f, &srv->queue.func_order, order) {
        struct job *k = find_unique(f, vals[1]);

        if (k != NULL && j != NULL) {
            reply_error(
                req, 409, "Conflict",
                "unique '%.100s' is held in more than one function: add function=", vals[1]);
            goto out;
        }
        if (k != NULL)
            j = k;
    }
    if (j == NULL)
        reply_error(req, 404, "Not Found", "no job with unique '%.100s'", vals[1]);
    else
        reply_json(req, 200, "OK", job_json(j, HTTP_MAX_JOB_TEXT));
out:
    free_vals(vals, 2);
}

static void
route(struct srv *srv, struct evhttp_request *req, const char *path, size_t len, const char *query)
{
    static const char job_prefix[] = "/api/job/";
    static const char batch_prefix[] = "/api/batch/";
    bool no_query = query == NULL;

#define IS(s) (len == sizeof(s) - 1 && memcmp(path, s, len) == 0)
    if (IS("/") && no_query)
        get_page(srv, req);
    else if (IS("/dashboard.css") && no_query)
        get_file(req, dashboard_css, dashboard_css_len, "text/css; charset=utf-8");
    else if (IS("/dashboard.js") && no_query)
        get_file(req, dashboard_js, dashboard_js_len, "text/javascript; charset=utf-8");
    else if (IS("/healthz") && no_query)
        get_healthz(srv, req);
    else if (IS("/metrics") && no_query)
        get_metrics(srv, req);
    else if (IS("/api/status") && no_query)
        get_status(srv, req);
    else if (IS("/api/workers") && no_query)
        get_workers(srv, req);
    else if (IS("/api/schedules") && no_query)
        get_schedules(srv, req);
    else if (IS("/api/batches") && no_query)
        get_batches(srv, req);
    else if (len > sizeof(batch_prefix) - 1 &&
             memcmp(path, batch_prefix, sizeof(batch_prefix) - 1) == 0 && no_query)
        get_batch(srv, req, path + sizeof(batch_prefix) - 1, len - (sizeof(batch_prefix) - 1));
    else if (IS("/api/jobs"))
        get_jobs(srv, req, query);
    else if (IS("/api/job"))
        get_job(srv, req, NULL, 0, query);
    else if (len > sizeof(job_prefix) - 1 && memcmp(path, job_prefix, sizeof(job_prefix) - 1) == 0)
        get_job(srv, req, path + sizeof(job_prefix) - 1, len - (sizeof(job_prefix) - 1), query);
    else if (IS("/") || IS("/dashboard.css") || IS("/dashboard.js") || IS("/healthz") ||
             IS("/metrics") || IS("/api/status") || IS("/api/workers") || IS("/api/schedules") ||
             IS("/api/batches"))
        reply_error(req, 400, "Bad Request", "%.*s takes no query", (int)len, path);
    else
        reply_error(req, 404, "Not Found", "no such page: %.*s", (int)(len > 100 ? 100 : len),
                    path);
#undef IS
}

/* Constant-time comparison of a header with the token, so timing tells nothing of it. */
static bool
token_ok(const struct srv *srv, const char *given)
{
    size_t i, n = strlen(srv->http_token);
    unsigned char diff = 0;

    if (given == NULL || n == 0 || strlen(given) != n)
        return false;
    for (i = 0; i < n; i++)
        diff |= (unsigned char)(given[i] ^ srv->http_token[i]);
    return diff == 0;
}

/* POST /api/job/HANDLE/cancel: as admin "cancel job". */
static void
post_cancel(struct srv *srv, struct evhttp_request *req, const char *handle, size_t len)
{
    struct job *j = queue_find_job(&srv->queue, handle, len);
    json_t *doc;

    if (j == NULL) {
        reply_error(req, 404, "Not Found", "no job '%.*s'", (int)(len > 100 ? 100 : len), handle);
        return;
    }
    if (job_ended(j)) {
        reply_error(req, 409, "Conflict", "the job has ended%s",
                    j->state == JOB_DEAD ? "; POST /api/dead/HANDLE/drop removes it" : "");
        return;
    }
    /* Made before the cancel, which may free j. */
    doc = json_pack("{s:s}", "cancelled", job_handle(j));
    log_notice(&srv->log, "http %s: cancelled job %s of '%s'", peer_name(req), job_handle(j),
               j->func->name);
    lifecycle_cancel(srv, j);
    reply_json(req, 200, "OK", doc);
}

/* POST /api/dead/NAME/retry or /drop: as admin "retry dead" and "drop dead" of NAME. */
static void
post_dead(struct srv *srv, struct evhttp_request *req, const char *name, size_t len, bool retry)
{
    unsigned done, held;

    if (job_dead_apply(srv, name, len, retry, &done, &held) < 0) {
        reply_error(req, 404, "Not Found", "no dead job or function '%.*s'",
                    (int)(len > 100 ? 100 : len), name);
        return;
    }
    log_notice(&srv->log, "http %s: %s %u dead jobs of '%.*s'", peer_name(req),
               retry ? "retried" : "dropped", done, (int)len, name);
    reply_json(req, 200, "OK",
               json_pack("{s:i,s:i}", retry ? "retried" : "dropped", (int)done, "held", (int)held));
}

/* The commit of a pause, resume or limit is done: its answer (storage_wait_fn). */
static void
pause_done(struct srv *srv, struct storage_wait *w, bool ok, const char *why)
{
    struct http_wait *hw = (struct http_wait *)w;

    (void)srv;
    if (hw->req != NULL && why != NULL) {
        TAILQ_REMOVE(&hw->hs->waits, hw, link);
        hw->hs->replying = true;
        if (ok) {
            reply_json(hw->req, 200, "OK", hw->answer);
            hw->answer = NULL;
        } else {
            reply_error(hw->req, 503, "Service Unavailable", "STORE_ERROR %s", why);
        }
        hw->hs->replying = false;
    } else if (hw->req != NULL) {
        TAILQ_REMOVE(&hw->hs->waits, hw, link); /* the store closed: nobody is told */
    }
    json_decref(hw->answer);
    free(hw);
}

/*
 * Answers a change of f's settings once it is committed on a durable
 * store, as the admin command is (durable_reply), else at once; answer is
 * the 200's body (taken).
 */
static void
reply_committed(struct srv *srv, struct evhttp_request *req, json_t *answer)
{
    struct http_wait *hw;

    if (srv->storage.durable && (hw = storage_alloc(srv, "http reply", sizeof(*hw))) != NULL) {
        hw->w.done = pause_done;
        hw->w.op = NULL;
        hw->hs = srv->http_st;
        hw->req = req;
        hw->answer = answer;
        TAILQ_INSERT_TAIL(&srv->http_st->waits, hw, link);
        storage_wait(srv, &hw->w);
        return;
    }
    reply_json(req, 200, "OK", answer);
}

/* POST /api/func/NAME/pause or /resume: as admin "pause" and "resume" of NAME. */
static void
post_pause(struct srv *srv, struct evhttp_request *req, const char *name, size_t len, bool pause)
{
    struct func *f = queue_func(&srv->queue, name, len, false);
    char err[200];

    if (f == NULL || queue_name_bad_byte(name, len) >= 0) {
        reply_error(req, 404, "Not Found", "no function '%.*s'", (int)(len > 100 ? 100 : len),
                    name);
        return;
    }
    if (flow_ctl_apply(srv, f, pause ? "paused" : "resumed", true, err, sizeof(err)) < 0) {
        reply_error(req, 500, "Internal Server Error", "%s", err);
        return;
    }
    log_notice(&srv->log, "http %s: %s '%s'", peer_name(req), pause ? "paused" : "resumed",
               f->name);
    reply_committed(srv, req, json_pack("{s:b}", "paused", pause));
}

/*
 * POST /api/func/NAME/limit?concurrency=N&rate=N/PERIOD&burst=N: as admin
 * "limit NAME concurrency N rate R burst B" with the parameters given
 * (at least one; "off" or 0 clears that limit, the others stay).
 */
static void
post_limit(struct srv *srv, struct evhttp_request *req, const char *name, size_t len,
           const char *query)
{
    static const char *const known[] = {"concurrency", "rate", "burst"};
    struct func *f = queue_func(&srv->queue, name, len, false);
    const char *vals[3];
    char words[FLOW_SPEC_MAX], err[200], line[FLOW_SPEC_MAX];
    size_t i, n = 0;

    if (f == NULL || queue_name_bad_byte(name, len) >= 0) {
        reply_error(req, 404, "Not Found", "no function '%.*s'", (int)(len > 100 ? 100 : len),
                    name);
        return;
    }
    if (!parse_query(req, query, known, vals, 3))
        return;
    words[0] = '\0';
    for (i = 0; i < 3; i++) {
        const char *v = vals[i], *c;

        if (v == NULL)
            continue;
        /* One word each: a space would smuggle in another setting. */
        for (c = v; *c != '\0' && (isalnum((unsigned char)*c) || *c == '/'); c++)
            ;
        if (*c != '\0' || c == v || c - v > 32) {
            reply_error(req, 400, "Bad Request", "bad value '%.40s' for '%s'", v, known[i]);
            goto out;
        }
        n += (size_t)snprintf(words + n, sizeof(words) - n, "%s%s %s", n ? " " : "", known[i], v);
    }
    if (n == 0) {
        reply_error(req, 400, "Bad Request",
                    "POST /api/func/NAME/limit takes concurrency=, rate= or burst=");
        goto out;
    }
    if (flow_ctl_apply(srv, f, words, true, err, sizeof(err)) < 0) {
        if (strcmp(err, "out of memory") == 0)
            reply_error(req, 500, "Internal Server Error", "%s", err);
        else
            reply_error(req, 400, "Bad Request", "%s", err);
        goto out;
    }
    log_notice(&srv->log, "http %s: limit '%s' %s", peer_name(req), f->name, words);
    line[0] = '\0';
    if (f->flow != NULL)
        flow_format(&f->flow->conf, line, sizeof(line));
    reply_committed(srv, req, json_pack("{s:s}", "settings", line));
out:
    free_vals(vals, 3);
}

/* Is path PREFIX NAME SUFFIX with a NAME of one byte or more? Sets *name, *name_len. */
static bool
split_path(const char *path, size_t len, const char *prefix, const char *suffix, const char **name,
           size_t *name_len)
{
    size_t p = strlen(prefix), s = strlen(suffix);

    if (len <= p + s || memcmp(path, prefix, p) != 0 || memcmp(path + len - s, suffix, s) != 0)
        return false;
    *name = path + p;
    *name_len = len - p - s;
    return true;
}

/*
 * The writes, with --http-admin only. Checked in this order, before
 * anything changes: a write route (404), no query but a limit's (400), a peer
 * --admin-allow admits (403), a Host that is not a rebound name (403),
 * the X-CSRF-Token header (403).
 */
static void
route_post(struct srv *srv, struct evhttp_request *req, const char *path, size_t len,
           const char *query)
{
    enum { CANCEL, RETRY, DROP, PAUSE, RESUME, LIMIT } what;
    const char *name, *given;
    size_t name_len;

    if (split_path(path, len, "/api/job/", "/cancel", &name, &name_len))
        what = CANCEL;
    else if (split_path(path, len, "/api/dead/", "/retry", &name, &name_len))
        what = RETRY;
    else if (split_path(path, len, "/api/dead/", "/drop", &name, &name_len))
        what = DROP;
    else if (split_path(path, len, "/api/func/", "/pause", &name, &name_len))
        what = PAUSE;
    else if (split_path(path, len, "/api/func/", "/resume", &name, &name_len))
        what = RESUME;
    else if (split_path(path, len, "/api/func/", "/limit", &name, &name_len))
        what = LIMIT;
    else {
        reply_error(req, 404, "Not Found",
                    "POST takes /api/job/HANDLE/cancel, /api/dead/NAME/retry, "
                    "/api/dead/NAME/drop, /api/func/NAME/pause, /api/func/NAME/resume or "
                    "/api/func/NAME/limit, not %.*s",
                    (int)(len > 100 ? 100 : len), path);
        return;
    }
    /* Only a limit's settings come in the query: they are the target's words. */
    if (query != NULL && what != LIMIT) {
        reply_error(req, 400, "Bad Request", "POST takes no query");
        return;
    }
    if (!peer_admitted(srv, req)) {
        log_warn(&srv->log, "http %s: refused POST %.*s: peer not in --admin-allow", peer_name(req),
                 (int)(len > 200 ? 200 : len), path);
        reply_error(req, 403, "Forbidden", "POST is not allowed from %s (see --admin-allow)",
                    peer_name(req));
        return;
    }
    if (!host_ok(srv, req)) {
        const char *host = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");

        log_warn(&srv->log, "http %s: refused POST %.*s: Host '%.100s'", peer_name(req),
                 (int)(len > 200 ? 200 : len), path, host ? host : "");
        reply_error(req, 403, "Forbidden",
                    "POST needs a Host header that is an address, localhost or --http-listen's "
                    "name, not '%.100s' (a guard against DNS rebinding)",
                    host ? host : "");
        return;
    }
    given = evhttp_find_header(evhttp_request_get_input_headers(req), "X-CSRF-Token");
    if (!token_ok(srv, given)) {
        log_warn(&srv->log, "http %s: refused POST %.*s: %s X-CSRF-Token", peer_name(req),
                 (int)(len > 200 ? 200 : len), path, given == NULL ? "no" : "a wrong");
        reply_error(req, 403, "Forbidden",
                    "%s X-CSRF-Token header: send the token of the page's dsjob-csrf meta tag",
                    given == NULL ? "no" : "a wrong");
        return;
    }
    if (what == CANCEL)
        post_cancel(srv, req, name, name_len);
    else if (what == PAUSE || what == RESUME)
        post_pause(srv, req, name, name_len, what == PAUSE);
    else if (what == LIMIT)
        post_limit(srv, req, name, name_len, query);
    else
        post_dead(srv, req, name, name_len, what == RETRY);
}

static void
http_answer(struct srv *srv, struct evhttp_request *req)
{
    const char *uri = evhttp_request_get_uri(req);
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    const char *path, *query;
    size_t len;
    char *decoded;

    if (cmd == EVHTTP_REQ_POST && !srv->cfg.http_admin) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
        reply_error(req, 405, "Method Not Allowed",
                    "POST changes the server and is off: start dsjobd with --http-admin");
        return;
    }
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD && cmd != EVHTTP_REQ_POST) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          srv->cfg.http_admin ? "GET, HEAD, POST" : "GET, HEAD");
        reply_error(req, 405, "Method Not Allowed",
                    srv->cfg.http_admin ? "only GET, HEAD and POST" : "only GET and HEAD");
        return;
    }
    if (uri == NULL || strlen(uri) > HTTP_MAX_URI) {
        reply_error(req, 414, "URI Too Long", "the request target is over %d bytes", HTTP_MAX_URI);
        return;
    }
    path = u != NULL ? evhttp_uri_get_path(u) : NULL;
    if (path == NULL || path[0] != '/') {
        reply_error(req, 400, "Bad Request", "the request target is not an absolute path");
        return;
    }
    query = evhttp_uri_get_query(u);
    decoded = evhttp_uridecode(path, 0, &len);
    if (decoded == NULL) {
        reply_error(req, 500, "Internal Server Error", "out of memory");
        return;
    }
    if (strlen(decoded) != len)
        reply_error(req, 400, "Bad Request", "the path holds a NUL byte");
    else if (cmd == EVHTTP_REQ_POST)
        route_post(srv, req, decoded, len, query);
    else
        route(srv, req, decoded, len, query);
    free(decoded);
}

static void
http_cb(struct evhttp_request *req, void *arg)
{
    struct srv *srv = arg;

    request_arrived(srv, req);
    srv->http_st->replying = true;
    http_answer(srv, req);
    srv->http_st->replying = false;
}

/* A fresh CSRF token for --http-admin: HTTP_TOKEN_BYTES from /dev/urandom, in hex. */
static int
make_token(struct srv *srv)
{
    unsigned char raw[HTTP_TOKEN_BYTES];
    size_t got = 0, i;
    ssize_t n;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

    while (fd >= 0 && got < sizeof(raw)) {
        n = read(fd, raw + got, sizeof(raw) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (fd >= 0)
        close(fd);
    if (got < sizeof(raw)) {
        snprintf(srv->errmsg, sizeof(srv->errmsg),
                 "--http-admin: cannot read /dev/urandom for the CSRF token: %s",
                 errno ? strerror(errno) : "short read");
        return -1;
    }
    for (i = 0; i < sizeof(raw); i++)
        snprintf(srv->http_token + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

int
http_open(struct srv *srv)
{
    struct evhttp_bound_socket *bound;
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    const char *addr = srv->cfg.http_listen ? srv->cfg.http_listen : "127.0.0.1";

    srv->http_port = -1;
    srv->http_token[0] = '\0';
    if (srv->cfg.http_port < 0)
        return 0;
    if (srv->cfg.http_admin && make_token(srv) < 0)
        return -1;
    srv->http = evhttp_new(srv->base);
    srv->http_st = calloc(1, sizeof(*srv->http_st));
    if (srv->http == NULL || srv->http_st == NULL ||
        (srv->http_st->adopt_ev = event_new(srv->base, -1, 0, adopt_cb, srv->http_st)) == NULL) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "--http-port: cannot make the HTTP server");
        http_close(srv);
        return -1;
    }
    srv->http_st->srv = srv;
    srv->http_st->http = srv->http;
    TAILQ_INIT(&srv->http_st->conns);
    TAILQ_INIT(&srv->http_st->waits);
    evhttp_set_bevcb(srv->http, http_bevcb, srv);
    evhttp_set_max_headers_size(srv->http, HTTP_MAX_HEADERS);
    evhttp_set_max_body_size(srv->http, HTTP_MAX_BODY);
    evhttp_set_timeout(srv->http, (int)srv->cfg.http_timeout);
    evhttp_set_allowed_methods(srv->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                              EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                              EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH |
                                              EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT);
    evhttp_set_gencb(srv->http, http_cb, srv);
    bound = evhttp_bind_socket_with_handle(srv->http, addr, (ev_uint16_t)srv->cfg.http_port);
    if (bound == NULL) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "--http-listen %s --http-port %d: %s", addr,
                 srv->cfg.http_port, errno ? strerror(errno) : "cannot listen");
        http_close(srv);
        return -1;
    }
    srv->http_st->lev = evhttp_bound_socket_get_listener(bound);
    srv->http_st->lev_on = true;
    evconnlistener_set_error_cb(srv->http_st->lev, http_accept_error_cb);
    pthread_mutex_lock(&states_lock);
    srv->http_st->next = states;
    states = srv->http_st;
    pthread_mutex_unlock(&states_lock);
    http_accept_update(srv);
    if (getsockname(evhttp_bound_socket_get_fd(bound), (struct sockaddr *)&ss, &sslen) == 0)
        srv->http_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                        : ((struct sockaddr_in *)&ss)->sin_port);
    log_notice(&srv->log, "serving HTTP on %s port %d", addr, srv->http_port);
    return 0;
}

int
http_port(const struct srv *srv)
{
    return srv->http != NULL ? srv->http_port : -1;
}

void
http_close(struct srv *srv)
{
    struct http_state *hs = srv->http_st, **pp;

    if (hs != NULL) {
        pthread_mutex_lock(&states_lock);
        for (pp = &states; *pp != NULL && *pp != hs; pp = &(*pp)->next)
            ;
        if (*pp != NULL)
            *pp = hs->next;
        pthread_mutex_unlock(&states_lock);
        hs->lev = NULL; /* evhttp_free frees it */
    }
    if (hs != NULL) {
        struct http_wait *hw;

        while ((hw = TAILQ_FIRST(&hs->waits)) != NULL) { /* evhttp_free frees their requests */
            TAILQ_REMOVE(&hs->waits, hw, link);
            hw->req = NULL;
            hw->hs = NULL;
        }
    }
    if (srv->http != NULL)
        evhttp_free(srv->http); /* closed_cb for every adopted connection */
    srv->http = NULL;
    if (hs != NULL) {
        while (!TAILQ_EMPTY(&hs->conns)) /* accepted, not yet adopted */
            hconn_free(TAILQ_FIRST(&hs->conns));
        if (hs->adopt_ev != NULL)
            event_free(hs->adopt_ev);
        free(hs);
    }
    srv->http_st = NULL;
}
