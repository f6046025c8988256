/*
 * The durability promise under kill -9: a client pipelines background
 * submits into dsjobd with the SQLite store and records every handle it
 * was acknowledged; dsjobd is killed with SIGKILL while submits are still
 * flowing; a new dsjobd on the same work directory is drained by a
 * worker. Every acknowledged job must run after the restart (none was
 * running at the kill, so none may run twice), and jobs completed before
 * the kill must not come back. Run as "t_crash --memcached HOST:PORT" it
 * does the same against the memcached store (memcached itself is not
 * restarted: that store does not survive a memcached restart). With
 * "--total N" it sends at most N submits (not TOTAL), N/2 at least before
 * the kill, which comes once N/4 are acknowledged: the last burst (N/4,
 * 2000 at most) is kept back until then and goes out just before the
 * kill, so that the kill always follows real acknowledgements with submits
 * in flight. Before, all sent was the kill too, and a store that
 * acknowledges slowly (memcached, a round trip a submit; SQLite on a
 * loaded machine) was often killed after a handful of them, which checked
 * almost nothing. make check builds it with TOTAL 4000 (t_crash; the
 * memcached run, t_crash_memcached.sh, passes --total 800), make
 * check-long with 40000 (t_crash_long, t_crash_memcached_long.sh).
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/peer.h"
#include "tap.h"

#ifndef TOTAL
#define TOTAL 40000 /* background submits at most (--total) */
#endif
#define SENT_BEFORE (TOTAL / 2) /* submits sent before the kill, at least */
#define KILL_AFTER (TOTAL / 4)  /* acknowledgements seen before the kill, at least */
#define DONE_BEFORE 100         /* jobs completed before the flood */

struct seen {
    char (*handle)[32]; /* handles, in order */
    size_t n;
};

static int
cmp_handle(const void *a, const void *b)
{
    return strcmp(a, b);
}

static void
seen_add(struct seen *s, const unsigned char *h, size_t len)
{
    snprintf(s->handle[s->n++], 32, "%.*s", (int)len, (const char *)h);
}

/* Drain function f on port with one worker until nothing is left; record handles. */
static void
drain(int port, const char *f, struct seen *out)
{
    int w = peer_connect(port);
    struct peer_pkt p;

    peer_send(w, PACKET_CAN_DO, 1, f);
    for (;;) {
        int t;

        t = peer_grab(w, PACKET_GRAB_JOB_UNIQ, &p, PEER_TIMEOUT_MS);
        if (t != PACKET_JOB_ASSIGN_UNIQ) {
            peer_pkt_release(&p);
            break;
        }
        seen_add(out, p.arg[0], p.arg_len[0]);
        peer_send_bin(w, PACKET_WORK_COMPLETE, 1, (const void *const *)&p.arg[0], &p.arg_len[0]);
        peer_pkt_release(&p);
    }
    close(w);
}

int
main(int argc, char **argv)
{
    char dir[] = "/tmp/dsjob-crash.XXXXXX", wd[300], prefix[64];
    const char *args[5] = {"--work-dir", wd, NULL, NULL, NULL};
    int total = TOTAL, sent_before = SENT_BEFORE, kill_after = KILL_AFTER;
    int last = KILL_AFTER < 2000 ? KILL_AFTER : 2000; /* kept back for the kill */
    struct seen acked, before, after;
    struct daemon d;
    int c, sent = 0, i, missing = 0, dup = 0, back = 0;
    bool killed = false, stalled = false;
    char payload[64];
    struct peer_pkt p;

    alarm(600); /* a bound for a hang, not a speed: a loaded machine is slow */
    if (mkdtemp(dir) == NULL)
        tap_bail("mkdtemp: %s", strerror(errno));
    snprintf(wd, sizeof(wd), "%s/var", dir);
    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--memcached") == 0) {
            snprintf(prefix, sizeof(prefix), "crash%ld", (long)getpid());
            args[0] = "--memcached-servers";
            args[1] = argv[i + 1];
            args[2] = "--memcached-prefix";
            args[3] = prefix;
            tap_diag("store: memcached at %s, prefix %s", argv[i + 1], prefix);
        } else if (strcmp(argv[i], "--total") == 0 && atoi(argv[i + 1]) >= 4) {
            total = atoi(argv[i + 1]);
            sent_before = total / 2;
            kill_after = total / 4;
            last = total / 4 < 2000 ? total / 4 : 2000;
        } else {
            tap_bail("usage: t_crash [--memcached HOST:PORT] [--total N]");
        }
    }
    if (i != argc)
        tap_bail("usage: t_crash [--memcached HOST:PORT] [--total N]");
    acked = (struct seen){calloc((size_t)total, 32), 0};
    before = (struct seen){calloc(DONE_BEFORE, 32), 0};
    after = (struct seen){calloc((size_t)total + DONE_BEFORE, 32), 0};
    if (acked.handle == NULL || before.handle == NULL || after.handle == NULL)
        tap_bail("calloc: out of memory");
    daemon_start(&d, args);

    /* Jobs that finish before the crash must stay finished. */
    c = peer_connect(d.port);
    for (i = 0; i < DONE_BEFORE; i++) {
        snprintf(payload, sizeof(payload), "early %d", i);
        peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "crash", "", payload);
        if (peer_recv(c, &p, PEER_TIMEOUT_MS) != PACKET_JOB_CREATED)
            tap_bail("no JOB_CREATED for an early job");
        peer_pkt_release(&p);
    }
    drain(d.port, "crash", &before);
    tap_is_int((long long)before.n, DONE_BEFORE, "%d jobs submitted and completed before the flood",
               DONE_BEFORE);
    /*
     * Batches commit in order, so once a later submit is acknowledged the
     * deletions of those jobs are committed too. (Without this barrier a
     * job finished just before the kill may rightly run again.)
     */
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "barrier", "", "b");
    tap_is_int(peer_recv(c, &p, PEER_TIMEOUT_MS * 4), PACKET_JOB_CREATED,
               "a later submit is acknowledged: the early jobs' deletions are committed");
    peer_pkt_release(&p);

    /*
     * The flood: pipelined submits in bursts, reading acknowledgements as
     * they come. Once KILL_AFTER are in, one more burst goes out and dsjobd
     * is killed straight after, with that burst still being read and
     * committed; acknowledgements already on the wire are still counted.
     * That last burst is kept back: once the rest is sent (a store that
     * acknowledges slowly), the flood waits for KILL_AFTER, or for a pause
     * of the acknowledgements, to send it.
     */
    while (!killed) {
        struct pollfd pfd = {c, POLLIN, 0};
        bool ready = acked.n >= (size_t)kill_after && sent >= sent_before, waiting;
        int burst, n = ready ? last : 500, cap = ready ? total : total - last, pr;

        for (burst = 0; burst < n && sent < cap; burst++, sent++) {
            snprintf(payload, sizeof(payload), "job %d", sent);
            if (peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "crash", "", payload) < 0)
                break;
        }
        if (ready || stalled) {
            kill(d.pid, SIGKILL);
            killed = true;
        }
        waiting = !killed && sent >= cap;
        while ((pr = poll(&pfd, 1, killed ? 2000 : waiting ? PEER_TIMEOUT_MS : 0)) > 0) {
            int t = peer_recv(c, &p, PEER_TIMEOUT_MS);

            if (t == PACKET_JOB_CREATED)
                seen_add(&acked, p.arg[0], p.arg_len[0]);
            peer_pkt_release(&p);
            if (t <= 0)
                goto flood_over;
            if (waiting && acked.n >= (size_t)kill_after)
                break;
        }
        stalled = waiting && pr == 0;
    }
flood_over:
    close(c);
    tap_ok(killed && sent >= sent_before,
           "dsjobd was killed with SIGKILL after %zu acknowledgements, %d submits sent", acked.n,
           sent);
    tap_ok(sent > (int)acked.n,
           "submits were still in flight at the kill (%d sent, %zu acknowledged)", sent, acked.n);
    waitpid(d.pid, NULL, 0);
    d.pid = 0;

    daemon_start(&d, args);
    drain(d.port, "crash", &after);
    tap_ok(after.n >= acked.n, "after the restart %zu jobs ran (%zu were acknowledged)", after.n,
           acked.n);
    qsort(after.handle, after.n, 32, cmp_handle);
    for (i = 0; i < (int)acked.n; i++)
        if (bsearch(acked.handle[i], after.handle, after.n, 32, cmp_handle) == NULL)
            missing++;
    for (i = 1; i < (int)after.n; i++)
        if (strcmp(after.handle[i - 1], after.handle[i]) == 0)
            dup++;
    for (i = 0; i < (int)before.n; i++)
        if (bsearch(before.handle[i], after.handle, after.n, 32, cmp_handle) != NULL)
            back++;
    tap_diag("%zu jobs were stored but their acknowledgement was cut off by the kill",
             after.n - acked.n);
    tap_is_int(missing, 0, "every acknowledged job ran after the restart (none lost)");
    tap_is_int(dup, 0, "none ran twice (none was running at the kill)");
    tap_is_int(back, 0, "no job completed before the kill came back");
    tap_is_int(daemon_stop(&d), 0, "the restarted dsjobd stops cleanly");
    daemon_start(&d, args);
    drain(d.port, "crash", &before);
    tap_is_int((long long)before.n, DONE_BEFORE, "a second restart finds nothing left to run");

    /* A replayed job keeps its unique key, its priority and its handle. */
    {
        char h1[64] = "", h2[64] = "";

        c = peer_connect(d.port);
        peer_send(c, PACKET_SUBMIT_JOB_LOW_BG, 3, "crash", "ukey", "low");
        if (peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_JOB_CREATED)
            snprintf(h1, sizeof(h1), "%.*s", (int)p.arg_len[0], (const char *)p.arg[0]);
        peer_pkt_release(&p);
        peer_send(c, PACKET_SUBMIT_JOB_HIGH_BG, 3, "crash", "", "high");
        peer_recv(c, &p, PEER_TIMEOUT_MS);
        peer_pkt_release(&p);
        close(c);
        kill(d.pid, SIGKILL);
        waitpid(d.pid, NULL, 0);
        d.pid = 0;
        daemon_start(&d, args);
        c = peer_connect(d.port);
        peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "crash", "ukey", "again");
        if (peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_JOB_CREATED)
            snprintf(h2, sizeof(h2), "%.*s", (int)p.arg_len[0], (const char *)p.arg[0]);
        peer_pkt_release(&p);
        tap_ok(h1[0] != '\0' && strcmp(h1, h2) == 0,
               "after a restart a submit with a replayed job's unique key coalesces onto it (%s)",
               h1);
        close(c);
        after.n = 0;
        drain(d.port, "crash", &after);
        tap_ok(after.n == 2 && strcmp(after.handle[1], h1) == 0,
               "replayed priorities hold: the high job runs before the low one");
    }
    daemon_stop(&d);
    {
        char cmd[400];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            tap_diag("could not remove %s", dir);
    }
    free(acked.handle);
    free(before.handle);
    free(after.handle);
    return tap_done();
}
