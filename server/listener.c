/*
 * Listeners. TCP addresses are resolved with getaddrinfo, so "localhost",
 * "::1" and "0.0.0.0" all work; port 0 lets the kernel choose, and the
 * chosen port is read back for dsjob_server_port. Past --max-connections
 * an accepted socket is told why in an ERROR packet and closed at once,
 * rather than left to hang in the backlog. libevent's listener accepts
 * until the backlog is empty, so a flood of connects would keep the loop
 * from everyone already connected: after ACCEPT_PER_TURN connections the
 * listeners pause until the loop turn's other ready events have run.
 * When accept fails for want of a descriptor (EMFILE, ENFILE) or memory,
 * the listening socket stays readable, so retrying at once would spin the
 * loop: every listener, the HTTP one too, is paused for LISTENER_PAUSE_MS
 * (listener_pause), and the log says so once in LISTENER_LOG_SECS at most.
 */
#include "config.h"
#include "listener.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "conn.h"
#include "http.h"
#include "proto/packet.h"
#include "srv.h"

static void
refuse(struct srv *srv, evutil_socket_t fd)
{
    unsigned char buf[256];
    const char *code = "TOO_MANY_CONNECTIONS";
    char text[128];
    const void *args[2];
    size_t lens[2];
    size_t n;

    snprintf(text, sizeof(text), "server holds %u connections (--max-connections %u)", srv->nconns,
             srv->cfg.max_connections);
    args[0] = code, lens[0] = strlen(code);
    args[1] = text, lens[1] = strlen(text);
    n = packet_encode(buf, sizeof(buf), PACKET_RES, PACKET_ERROR, 2, args, lens);
    if (n <= sizeof(buf) && send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        log_debug(&srv->log, "refusal not sent: %s", strerror(errno));
    evutil_closesocket(fd);
}

#define ACCEPT_PER_TURN 16

/* Run after the turn's other ready events: take connections again. */
static void
resume_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;
    int i;

    (void)fd;
    (void)what;
    srv->accepted = 0;
    if (srv->accept_paused)
        return; /* pause_end_cb takes them up again */
    for (i = 0; i < srv->nlisteners; i++)
        evconnlistener_enable(srv->listeners[i]);
}

/* Count a connection taken; at ACCEPT_PER_TURN, pause the listeners for the rest of the turn. */
static void
count_accept(struct srv *srv)
{
    int i;

    if (++srv->accepted < ACCEPT_PER_TURN || srv->accept_ev == NULL)
        return;
    for (i = 0; i < srv->nlisteners; i++)
        evconnlistener_disable(srv->listeners[i]);
    event_active(srv->accept_ev, EV_TIMEOUT, 0);
}

/*
 * set_keepalive turns TCP keepalive on for an accepted connection with
 * --keepalive or any of --keepalive-idle, --keepalive-interval and
 * --keepalive-count, and sets those given (not -1) on the connection
 * itself, as gearmand 2.0 does (1.1.20 set them on the listening socket
 * only). A failure is logged and the connection kept, as there.
 */
static void
set_keepalive(struct srv *srv, int fd)
{
    static const struct {
        int opt;
        const char *name;
    } knobs[] = {
        {TCP_KEEPIDLE, "TCP_KEEPIDLE"},
        {TCP_KEEPINTVL, "TCP_KEEPINTVL"},
        {TCP_KEEPCNT, "TCP_KEEPCNT"},
    };
    const int values[] = {srv->cfg.keepalive_idle, srv->cfg.keepalive_interval,
                          srv->cfg.keepalive_count};
    int one = 1;
    size_t i;

    if (!srv->cfg.keepalive && values[0] < 0 && values[1] < 0 && values[2] < 0)
        return;
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) < 0) {
        log_warn(&srv->log, "setsockopt(SO_KEEPALIVE): %s", strerror(errno));
        return;
    }
    for (i = 0; i < 3; i++)
        if (values[i] > 0 &&
            setsockopt(fd, IPPROTO_TCP, knobs[i].opt, &values[i], sizeof(values[i])) < 0)
            log_warn(&srv->log, "setsockopt(%s, %d): %s", knobs[i].name, values[i],
                     strerror(errno));
}

static void
accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    struct srv *srv = arg;

    (void)l;
    count_accept(srv);
    if (srv->cfg.max_connections > 0 && srv->nconns >= srv->cfg.max_connections) {
        log_warn(&srv->log, "refused a connection: --max-connections %u reached",
                 srv->cfg.max_connections);
        srv->stats.limits[STATS_LIMIT_MAX_CONNECTIONS]++;
        refuse(srv, fd);
        return;
    }
    if (sa->sa_family != AF_UNIX) {
        int one = 1;

        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        set_keepalive(srv, fd);
    }
    if (conn_new(srv, fd, sa, (socklen_t)salen) == NULL)
        log_err(&srv->log, "out of memory for a new connection");
}

#define LISTENER_PAUSE_MS 250 /* how long every listener rests after a failed accept */
#define LISTENER_LOG_SECS 10  /* the failed-accept line, at most once this often */

/* The pause is over: listen again (a descriptor may have come free meanwhile). */
static void
pause_end_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;
    int i;

    (void)fd;
    (void)what;
    srv->accept_paused = false;
    srv->accepted = 0;
    for (i = 0; i < srv->nlisteners; i++)
        evconnlistener_enable(srv->listeners[i]);
    http_accept_update(srv);
}

void
listener_pause(struct srv *srv, const char *which, int err)
{
    struct timeval tv = {0, LISTENER_PAUSE_MS * 1000};
    time_t now = time(NULL);
    int i;

    srv->accept_pauses++;
    if (now - srv->accept_error_at >= LISTENER_LOG_SECS) {
        log_err(&srv->log,
                "accept on the %s port: %s; every listener rests %d ms at a time until it "
                "works again (%u time%s since this was last said)",
                which, evutil_socket_error_to_string(err), LISTENER_PAUSE_MS, srv->accept_pauses,
                srv->accept_pauses == 1 ? "" : "s");
        srv->accept_error_at = now;
        srv->accept_pauses = 0;
    }
    if (srv->accept_paused || srv->pause_ev == NULL)
        return;
    srv->accept_paused = true;
    for (i = 0; i < srv->nlisteners; i++)
        evconnlistener_disable(srv->listeners[i]);
    http_accept_update(srv);
    evtimer_add(srv->pause_ev, &tv);
}

static void
accept_error_cb(struct evconnlistener *l, void *arg)
{
    (void)l;
    listener_pause(arg, "Gearman", EVUTIL_SOCKET_ERROR());
}

static int
add_listener(struct srv *srv, int fd, const char *what)
{
    struct evconnlistener *l;

    if (srv->nlisteners >= (int)(sizeof(srv->listeners) / sizeof(srv->listeners[0]))) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "too many listening sockets");
        close(fd);
        return -1;
    }
    l = evconnlistener_new(srv->base, accept_cb, srv, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
                           srv->cfg.backlog, fd);
    if (l == NULL) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot listen on %s", what);
        close(fd);
        return -1;
    }
    evconnlistener_set_error_cb(l, accept_error_cb);
    srv->listeners[srv->nlisteners++] = l;
    return 0;
}

static int
open_tcp(struct srv *srv, const char *host)
{
    struct addrinfo hints, *res, *ai;
    char port[16];
    int rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    /* Once one listener has a kernel-chosen port, the others share it. */
    snprintf(port, sizeof(port), "%d", srv->port > 0 ? srv->port : srv->cfg.port);
    rc = getaddrinfo(strcmp(host, "*") == 0 ? NULL : host, port, &hints, &res);
    if (rc != 0) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot resolve listen address '%s': %s", host,
                 gai_strerror(rc));
        return -1;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1;

        if (fd < 0)
            goto fail;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (ai->ai_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, srv->cfg.backlog) < 0) {
            close(fd);
            goto fail;
        }
        if (srv->port <= 0) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof(ss);

            if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
                srv->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                           : ((struct sockaddr_in *)&ss)->sin_port);
            snprintf(srv->address, sizeof(srv->address), "%s%s%s:%d",
                     ai->ai_family == AF_INET6 ? "[" : "", host,
                     ai->ai_family == AF_INET6 ? "]" : "", srv->port);
            snprintf(port, sizeof(port), "%d", srv->port);
        }
        if (add_listener(srv, fd, host) < 0)
            goto out;
        log_notice(&srv->log, "listening on %s port %d", host, srv->port);
    }
    freeaddrinfo(res);
    return 0;

fail:
    snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot listen on %s port %s: %s", host, port,
             strerror(errno));
out:
    freeaddrinfo(res);
    return -1;
}

static int
open_unix(struct srv *srv, const char *path)
{
    struct sockaddr_un sun;
    int fd;

    if (strlen(path) >= sizeof(sun.sun_path)) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "unix socket path too long: '%s'", path);
        return -1;
    }
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    strcpy(sun.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto fail;
    unlink(path); /* a stale socket from an earlier run */
    if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 || listen(fd, srv->cfg.backlog) < 0) {
        close(fd);
        goto fail;
    }
    if (srv->address[0] == '\0')
        snprintf(srv->address, sizeof(srv->address), "%s", path);
    log_notice(&srv->log, "listening on unix socket %s", path);
    return add_listener(srv, fd, path);

fail:
    snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot listen on unix socket '%s': %s", path,
             strerror(errno));
    return -1;
}

int
listener_open_all(struct srv *srv)
{
    int i;

    srv->accept_ev = event_new(srv->base, -1, 0, resume_cb, srv);
    srv->pause_ev = evtimer_new(srv->base, pause_end_cb, srv);
    srv->accept_paused = false;
    if (srv->accept_ev == NULL || srv->pause_ev == NULL) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "cannot make the listeners' event");
        return -1;
    }
    if (srv->cfg.port >= 0)
        for (i = 0; i < srv->cfg.nlisten; i++)
            if (open_tcp(srv, srv->cfg.listen[i]) < 0)
                return -1;
    if (srv->cfg.unix_socket != NULL && open_unix(srv, srv->cfg.unix_socket) < 0)
        return -1;
    if (srv->nlisteners == 0) {
        snprintf(srv->errmsg, sizeof(srv->errmsg), "nothing to listen on");
        return -1;
    }
    return 0;
}

void
listener_close_all(struct srv *srv)
{
    int i;

    for (i = 0; i < srv->nlisteners; i++)
        evconnlistener_free(srv->listeners[i]);
    srv->nlisteners = 0;
    if (srv->accept_ev != NULL)
        event_free(srv->accept_ev);
    srv->accept_ev = NULL;
    if (srv->pause_ev != NULL)
        event_free(srv->pause_ev);
    srv->pause_ev = NULL;
    srv->accept_paused = false;
    if (srv->cfg.unix_socket != NULL && srv->bound)
        unlink(srv->cfg.unix_socket);
}
