/*
 * libdsjobserver as a library: a server started in its own thread on port
 * 0 reports its address and serves; one attached to the caller's
 * event_base serves while the caller runs the loop; a graceful stop waits
 * for the running job and stops handing out new ones; bad configs are
 * refused with a reason.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include <dsjob/server.h>

#include "lib/peer.h"
#include "tap.h"

static struct dsjob_server *
make(void)
{
    struct dsjob_server_config cfg;
    char err[256];
    struct dsjob_server *srv;

    dsjob_server_config_init(&cfg);
    cfg.port = 0;
    cfg.log_file = "none";
    srv = dsjob_server_new(&cfg, err, sizeof(err));
    if (srv == NULL)
        tap_bail("dsjob_server_new: %s", err);
    return srv;
}

static void
test_thread(void)
{
    struct dsjob_server *srv = make();
    char addr[128], want[64];
    int port;

    tap_is_int(dsjob_server_port(srv), -1, "no port before bind");
    tap_is_int(dsjob_server_address(srv, addr, sizeof(addr)), DSJOB_ERR_STATE,
               "no address before bind");
    tap_is_int(dsjob_server_start(srv), DSJOB_OK, "start in a thread");
    port = dsjob_server_port(srv);
    tap_ok(port > 0, "port 0 became a real port (%d)", port);
    dsjob_server_address(srv, addr, sizeof(addr));
    snprintf(want, sizeof(want), "127.0.0.1:%d", port);
    tap_is_str(addr, want, "address is host:port");
    tap_ok(peer_run_job(port, "lib-f", "hello"), "a job runs through the in-process server");
    tap_is_int(dsjob_server_start(srv), DSJOB_ERR_STATE, "a second start is refused");
    dsjob_server_stop(srv, false);
    tap_is_int(dsjob_server_join(srv), DSJOB_OK, "stop, then join returns OK");
    dsjob_server_free(srv);
}

struct attach_arg {
    struct dsjob_server *srv;
    int port;
    bool ok;
};

static void *
attach_peer(void *arg)
{
    struct attach_arg *a = arg;

    a->ok = peer_run_job(a->port, "attached", "on your loop");
    dsjob_server_stop(a->srv, false);
    return NULL;
}

static void
test_attach(void)
{
    struct event_base *base = event_base_new();
    struct attach_arg a;
    pthread_t t;

    a.srv = make();
    tap_is_int(dsjob_server_attach(a.srv, base), DSJOB_OK, "attach to the caller's base");
    a.port = dsjob_server_port(a.srv);
    pthread_create(&t, NULL, attach_peer, &a);
    event_base_dispatch(base);
    pthread_join(t, NULL);
    tap_ok(a.ok, "a job runs while the caller runs the loop");
    dsjob_server_free(a.srv);
    event_base_free(base);
}

static void
test_graceful(void)
{
    struct dsjob_server *srv = make();
    struct peer_pkt p;
    int port, w, c, w2;
    char handle[128];

    dsjob_server_start(srv);
    port = dsjob_server_port(srv);
    w = peer_connect(port);
    w2 = peer_connect(port);
    c = peer_connect(port);
    peer_send(w, PACKET_CAN_DO, 1, "g");
    peer_send(w2, PACKET_CAN_DO, 1, "g");
    peer_send(c, PACKET_SUBMIT_JOB, 3, "g", "", "one");
    peer_recv(c, &p, PEER_TIMEOUT_MS);
    snprintf(handle, sizeof(handle), "%.*s", (int)p.arg_len[0], (const char *)p.arg[0]);
    peer_pkt_release(&p);
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "g", "", "two");
    peer_recv(c, &p, PEER_TIMEOUT_MS);
    peer_pkt_release(&p);
    peer_send(w, PACKET_GRAB_JOB, 0);
    tap_is_int(peer_recv(w, &p, PEER_TIMEOUT_MS), PACKET_JOB_ASSIGN, "job one running");
    peer_pkt_release(&p);
    dsjob_server_stop(srv, true);
    usleep(100000);
    peer_send(w2, PACKET_GRAB_JOB, 0);
    tap_is_int(peer_recv(w2, &p, PEER_TIMEOUT_MS), PACKET_NO_JOB,
               "while draining, no new job is handed out");
    peer_pkt_release(&p);
    peer_send(w, PACKET_WORK_COMPLETE, 2, handle, "done");
    tap_is_int(peer_recv(c, &p, PEER_TIMEOUT_MS), PACKET_WORK_COMPLETE,
               "the running job's result still reaches its client");
    peer_pkt_release(&p);
    tap_is_int(dsjob_server_join(srv), DSJOB_OK, "then the server stops by itself");
    close(w);
    close(w2);
    close(c);
    dsjob_server_free(srv);
}

static void
test_bad_config(void)
{
    struct dsjob_server_config cfg;
    char err[256] = "";

    dsjob_server_config_init(&cfg);
    cfg.admin_allow[0] = "10.0.0.0/33";
    cfg.nadmin_allow = 1;
    tap_ok(dsjob_server_new(&cfg, err, sizeof(err)) == NULL, "a bad --admin-allow is refused");
    tap_ok(strstr(err, "10.0.0.0/33") != NULL, "naming it: %s", err);
    dsjob_server_config_init(&cfg);
    cfg.max_packet_size = 10;
    tap_ok(dsjob_server_new(&cfg, err, sizeof(err)) == NULL, "a tiny --max-packet-size is refused");
    cfg.size = 3;
    tap_ok(dsjob_server_new(&cfg, err, sizeof(err)) == NULL,
           "a config too small to hold its own fields is refused");
    dsjob_server_config_init(&cfg);
    cfg.size = sizeof(cfg) + 8;
    tap_ok(dsjob_server_new(&cfg, err, sizeof(err)) == NULL,
           "a config larger than the library's is refused");
    tap_ok(strstr(err, "config size") != NULL, "saying so: %s", err);
    dsjob_server_config_init(&cfg);
    cfg.store = "nosuch";
    tap_ok(dsjob_server_new(&cfg, err, sizeof(err)) == NULL, "an unknown store is refused by new");
    tap_ok(strstr(err, "unknown store 'nosuch'") != NULL, "naming it: %s", err);
    dsjob_server_config_init(&cfg);
    cfg.work_dir = "";
    tap_ok(dsjob_server_new(&cfg, err, sizeof(err)) == NULL, "an empty work_dir is refused");
}

/*
 * A program built against an older library passes a smaller config: the
 * fields it knows are used, the ones past its size get their defaults.
 */
static void
test_old_config(void)
{
    struct dsjob_server_config cfg;
    struct dsjob_server *srv;
    char err[256] = "";
    int port;

    dsjob_server_config_init(&cfg);
    cfg.size = offsetof(struct dsjob_server_config, store);
    cfg.port = 0;
    cfg.log_file = "none";
    cfg.store = "nosuch"; /* past the old size: must not be read */
    srv = dsjob_server_new(&cfg, err, sizeof(err));
    tap_ok(srv != NULL, "a config of an older, smaller size is taken (%s)", err);
    if (srv == NULL)
        return;
    tap_is_int(dsjob_server_start(srv), DSJOB_OK, "and the server starts");
    port = dsjob_server_port(srv);
    tap_ok(peer_run_job(port, "old-f", "x"), "and runs a job with the default store");
    dsjob_server_stop(srv, false);
    dsjob_server_join(srv);
    dsjob_server_free(srv);
}

static struct dsjob_server *
make_durable(const char *dir, int port)
{
    struct dsjob_server_config cfg;
    char err[256];
    struct dsjob_server *srv;

    dsjob_server_config_init(&cfg);
    cfg.port = port;
    cfg.log_file = "none";
    cfg.store = "sqlite";
    cfg.work_dir = dir;
    srv = dsjob_server_new(&cfg, err, sizeof(err));
    if (srv == NULL)
        tap_bail("dsjob_server_new: %s", err);
    return srv;
}

/* The count of queued jobs of function f that admin "status" shows, or -1. */
static int
queued(int port, const char *f)
{
    char buf[4096], *line;
    int fd = peer_connect(port), n = -1;
    size_t flen = strlen(f);

    peer_admin(fd, "status", true, buf, sizeof(buf));
    close(fd);
    for (line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n"))
        if (strncmp(line, f, flen) == 0 && line[flen] == '\t')
            n = atoi(line + flen + 1);
    return n;
}

/*
 * A bind that fails (here: the port is taken) undoes all it did, the jobs it
 * replayed included, so that binding again once the port is free gives a
 * server that holds each stored job once.
 */
static void
test_bind_retry(void)
{
    char dir[] = "/tmp/t_server_lib.XXXXXX", cmd[64];
    struct dsjob_server *srv, *holder;
    int port, fd, i;
    struct peer_pkt p;

    if (mkdtemp(dir) == NULL)
        tap_bail("mkdtemp: %s", strerror(errno));
    srv = make_durable(dir, 0);
    if (dsjob_server_start(srv) != DSJOB_OK) {
        tap_skip(4, "no sqlite store: %s", dsjob_server_errmsg(srv));
        dsjob_server_free(srv);
        return;
    }
    fd = peer_connect(dsjob_server_port(srv));
    for (i = 0; i < 3; i++) {
        peer_send(fd, PACKET_SUBMIT_JOB_BG, 3, "retry-f", "", "stored");
        peer_recv(fd, &p, PEER_TIMEOUT_MS);
        peer_pkt_release(&p);
    }
    close(fd);
    dsjob_server_stop(srv, false);
    dsjob_server_join(srv);
    dsjob_server_free(srv);

    holder = make();
    dsjob_server_bind(holder);
    port = dsjob_server_port(holder);
    srv = make_durable(dir, port);
    tap_is_int(dsjob_server_bind(srv), DSJOB_ERR_SYS, "bind on a taken port fails");
    dsjob_server_free(holder);
    tap_is_int(dsjob_server_start(srv), DSJOB_OK, "binding again once it is free works");
    tap_is_int(queued(port, "retry-f"), 3, "and each stored job is held once");
    tap_ok(peer_run_job(port, "retry-g", "y"), "and the server runs jobs");
    /* The store's writer of the failed bind was stopped; the new one must not stop at once. */
    fd = peer_connect(port);
    peer_send(fd, PACKET_SUBMIT_JOB_BG, 3, "retry-h", "", "stored after");
    tap_is_int(peer_recv(fd, &p, PEER_TIMEOUT_MS), PACKET_JOB_CREATED,
               "and a background submit is stored (its commit comes back)");
    peer_pkt_release(&p);
    close(fd);
    dsjob_server_stop(srv, false);
    dsjob_server_join(srv);
    dsjob_server_free(srv);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        tap_diag("could not remove %s", dir);
}

static void
test_port_taken(void)
{
    struct dsjob_server *a = make(), *b;
    struct dsjob_server_config cfg;
    char err[256];

    dsjob_server_bind(a);
    dsjob_server_config_init(&cfg);
    cfg.port = dsjob_server_port(a);
    cfg.log_file = "none";
    b = dsjob_server_new(&cfg, err, sizeof(err));
    tap_is_int(dsjob_server_bind(b), DSJOB_ERR_SYS, "binding a taken port fails");
    tap_ok(strstr(dsjob_server_errmsg(b), "Address already in use") != NULL, "and says why: %s",
           dsjob_server_errmsg(b));
    dsjob_server_free(b);
    dsjob_server_free(a);
}

int
main(void)
{
    alarm(60);
    test_thread();
    test_attach();
    test_graceful();
    test_bad_config();
    test_port_taken();
    test_old_config();
    test_bind_retry();
    return tap_done();
}
