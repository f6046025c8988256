/*
 * Listening sockets: TCP on the configured addresses and port, and an
 * optional unix socket. Accepted sockets become connections (conn_new).
 */
#ifndef DSJOB_SERVER_LISTENER_H
#define DSJOB_SERVER_LISTENER_H

struct srv;

/*
 * listener_open_all binds every configured address. Returns 0, or -1 with
 * srv->errmsg saying which address failed and why.
 */
int listener_open_all(struct srv *srv);

/*
 * listener_pause rests every listener (the HTTP one too) for a moment after
 * an accept on the WHICH port failed with err (EMFILE, ENFILE, ENOMEM...),
 * rather than be called again at once; the log line is rate-limited.
 */
void listener_pause(struct srv *srv, const char *which, int err);

/* listener_close_all stops accepting and closes the listening sockets. */
void listener_close_all(struct srv *srv);

#endif
