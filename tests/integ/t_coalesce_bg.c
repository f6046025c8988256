/*
 * A background submit whose unique key matches a live foreground job is
 * told JOB_CREATED with that job's handle. The job must then run even if
 * its foreground client leaves, and on a durable store it must survive a
 * kill -9: it was acknowledged as a background job. gearmand 1.1.20 drops
 * it with its foreground client (dsjobd(8) COMPATIBILITY); dsjobd used to
 * too, and stored nothing of it even with --work-dir.
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/peer.h"
#include "tap.h"

/* Reads packets until one that is not a NOOP; copies its first argument into h. */
static int
recv_skip_noop(int fd, char *h, size_t hcap, int timeout_ms)
{
    struct peer_pkt p;
    int t;

    while ((t = peer_recv(fd, &p, timeout_ms)) == PACKET_NOOP)
        peer_pkt_release(&p);
    if (h != NULL) {
        h[0] = '\0';
        if (t > 0 && p.nargs > 0)
            snprintf(h, hcap, "%.*s", (int)p.arg_len[0], (const char *)p.arg[0]);
    }
    peer_pkt_release(&p);
    return t;
}

/* Submits (fg or bg) func/unique/payload on fd; returns the handle's type, handle in h. */
static int
submit(int fd, bool bg, const char *unique, const char *payload, char *h, size_t hcap)
{
    peer_send(fd, bg ? PACKET_SUBMIT_JOB_BG : PACKET_SUBMIT_JOB, 3, "cbg", unique, payload);
    return recv_skip_noop(fd, h, hcap, PEER_TIMEOUT_MS);
}

/* A worker for cbg grabs one job: returns its payload in buf ("" if NO_JOB). */
static int
grab(int w, char *h, size_t hcap, char *payload, size_t pcap)
{
    struct peer_pkt p;
    int t;

    peer_send(w, PACKET_GRAB_JOB, 0);
    while ((t = peer_recv(w, &p, PEER_TIMEOUT_MS)) == PACKET_NOOP)
        peer_pkt_release(&p);
    h[0] = payload[0] = '\0';
    if (t == PACKET_JOB_ASSIGN && p.nargs == 3) {
        snprintf(h, hcap, "%.*s", (int)p.arg_len[0], (const char *)p.arg[0]);
        snprintf(payload, pcap, "%.*s", (int)p.arg_len[2], (const char *)p.arg[2]);
    }
    peer_pkt_release(&p);
    return t;
}

/* Waits until admin "workers" no longer lists the connection named id: it has been closed. */
static bool
gone(int port, const char *id)
{
    char buf[8192];
    int i;

    for (i = 0; i < 1000; i++) {
        int a = peer_connect(port);

        peer_admin(a, "workers", true, buf, sizeof(buf));
        close(a);
        if (strstr(buf, id) == NULL)
            return true;
        usleep(10000);
    }
    return false;
}

static void
kill9(struct daemon *d)
{
    int status;

    kill(d->pid, SIGKILL);
    waitpid(d->pid, &status, 0);
}

/* The foreground client leaves while its job is queued: the background submitter's job runs. */
static void
queued(const char *const *args, const char *name, bool restart)
{
    struct daemon d;
    char h1[128], h2[128], h[128], pl[64];
    int fg, bg, w;

    daemon_start(&d, args);
    fg = peer_connect(d.port);
    bg = peer_connect(d.port);
    peer_send(fg, PACKET_SET_CLIENT_ID, 1, "fg-client-cbg");
    tap_is_int(submit(fg, false, "u1", "one", h1, sizeof(h1)), PACKET_JOB_CREATED,
               "%s: a foreground job with unique u1", name);
    tap_is_int(submit(bg, true, "u1", "ignored", h2, sizeof(h2)), PACKET_JOB_CREATED,
               "%s: a background submit with u1 is acknowledged", name);
    tap_is_str(h2, h1, "%s: with the foreground job's handle", name);
    close(fg);
    tap_ok(gone(d.port, "fg-client-cbg"), "%s: the server saw the foreground client leave", name);
    if (restart) {
        kill9(&d);
        daemon_start(&d, args);
    }
    w = peer_connect(d.port);
    peer_send(w, PACKET_CAN_DO, 1, "cbg");
    tap_is_int(grab(w, h, sizeof(h), pl, sizeof(pl)), PACKET_JOB_ASSIGN,
               "%s: after its foreground client left%s, the job still runs", name,
               restart ? " and a kill -9" : "");
    tap_is_str(pl, "one", "%s: it is the job the submits shared", name);
    peer_send(w, PACKET_WORK_COMPLETE, 2, h, "done");
    tap_is_int(grab(w, h, sizeof(h), pl, sizeof(pl)), PACKET_NO_JOB, "%s: and runs once", name);
    close(w);
    close(bg);
    tap_is_int(daemon_stop(&d), 0, "%s: the server stops cleanly", name);
}

/*
 * The job is running when the background submit coalesces onto it; the
 * server dies before the worker ends it. The acknowledged job runs again
 * after the restart (at least once), and its foreground client's leaving
 * meanwhile changes nothing.
 */
static void
running(const char *const *args)
{
    struct daemon d;
    char h1[128], h2[128], h[128], pl[64];
    int fg, bg, w;

    daemon_start(&d, args);
    fg = peer_connect(d.port);
    bg = peer_connect(d.port);
    w = peer_connect(d.port);
    peer_send(w, PACKET_CAN_DO, 1, "cbg");
    tap_is_int(submit(fg, false, "u2", "two", h1, sizeof(h1)), PACKET_JOB_CREATED,
               "running: a foreground job with unique u2");
    tap_is_int(grab(w, h, sizeof(h), pl, sizeof(pl)), PACKET_JOB_ASSIGN,
               "running: a worker takes it");
    tap_is_int(submit(bg, true, "u2", "ignored", h2, sizeof(h2)), PACKET_JOB_CREATED,
               "running: a background submit with u2 is acknowledged");
    tap_is_str(h2, h1, "running: with the running job's handle");
    close(fg);
    kill9(&d);
    close(w);
    close(bg);
    daemon_start(&d, args);
    w = peer_connect(d.port);
    peer_send(w, PACKET_CAN_DO, 1, "cbg");
    tap_is_int(grab(w, h, sizeof(h), pl, sizeof(pl)), PACKET_JOB_ASSIGN,
               "running: after a kill -9 the acknowledged job runs again");
    tap_is_str(pl, "two", "running: it is the shared job");
    peer_send(w, PACKET_WORK_COMPLETE, 2, h, "done");
    tap_is_int(grab(w, h, sizeof(h), pl, sizeof(pl)), PACKET_NO_JOB, "running: and only it");
    close(w);
    tap_is_int(daemon_stop(&d), 0, "running: the server stops cleanly");
}

int
main(void)
{
    static const char *const mem[] = {NULL};
    char dir[] = "/tmp/dsjob-cbg.XXXXXX", cmd[300];
    const char *durable[3] = {"--work-dir", dir, NULL};

    alarm(120);
    if (mkdtemp(dir) == NULL)
        tap_bail("no temporary directory");
    queued(mem, "in memory", false);
    queued(durable, "durable", true);
    running(durable);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        tap_diag("could not remove %s", dir);
    return tap_done();
}
