/*
 * The HTTP side of the server (--http-port): health, Prometheus metrics and
 * a read-only JSON API, served by libevent's evhttp on the server's own
 * event_base, so a request is answered between two packets like any
 * other callback and never waits on anything.
 */
#ifndef DSJOB_SERVER_HTTP_H
#define DSJOB_SERVER_HTTP_H

struct srv;

/*
 * http_open binds --http-listen:--http-port when --http-port is set (port
 * 0 picks a free one, which http_port then tells). 0, or -1 with
 * srv->errmsg set; nothing is left open on failure.
 */
int http_open(struct srv *srv);

/* http_port returns the bound HTTP port, or -1 if HTTP is off or not bound. */
int http_port(const struct srv *srv);

/*
 * http_accept_update turns the HTTP listener on or off: off while every
 * listener rests (listener_pause) or --http-max-connections are open.
 */
void http_accept_update(struct srv *srv);

/* http_close stops serving HTTP and drops its connections; safe when not open. */
void http_close(struct srv *srv);

#endif
