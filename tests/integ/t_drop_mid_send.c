/*
 * A peer dropped for --max-output-buffer in the middle of a send. The drop
 * used to happen inside conn_send, so the caller's waiter list, job or ack
 * list was freed under it (two use-after-frees, found with ASan). Now a send
 * only marks the peer, and it is closed once the handler has returned. Each
 * case below ends with the server still serving, and with the job's outcome
 * that the worker reported; under ASan (make check on --enable-asan, as CI
 * runs it) the old code fails each one with heap-use-after-free.
 *
 * The limits are tiny (--max-packet-size 1024, --max-output-buffer 1036) so
 * that two 600-byte packets in one write push a peer over: the same paths
 * the default limits reach with hundreds of megabytes.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/peer.h"
#include "tap.h"

static const char *const tiny[] = {"--max-packet-size", "1024", "--max-output-buffer", "1036",
                                   NULL};

/* One packet's bytes, as a peer writes them: REQ header and NUL-separated args. */
static size_t
req(unsigned char *buf, uint32_t type, const char *a, size_t alen, char fill, size_t blen)
{
    uint32_t size = (uint32_t)(alen + 1 + blen);

    memcpy(buf, "\0REQ", 4);
    buf[4] = (unsigned char)(type >> 24);
    buf[5] = (unsigned char)(type >> 16);
    buf[6] = (unsigned char)(type >> 8);
    buf[7] = (unsigned char)type;
    buf[8] = (unsigned char)(size >> 24);
    buf[9] = (unsigned char)(size >> 16);
    buf[10] = (unsigned char)(size >> 8);
    buf[11] = (unsigned char)size;
    memcpy(buf + 12, a, alen);
    buf[12 + alen] = '\0';
    memset(buf + 13 + alen, fill, blen);
    return 12 + size;
}

/* Reads packets until one of type want (skipping NOOPs); copies its first arg into h. */
static int
recv_until(int fd, int want, char *h, size_t hcap)
{
    struct peer_pkt p;
    int t;

    while ((t = peer_recv(fd, &p, PEER_TIMEOUT_MS)) == PACKET_NOOP)
        peer_pkt_release(&p);
    if (t == want && h != NULL && p.nargs > 0)
        snprintf(h, hcap, "%.*s", (int)p.arg_len[0], (const char *)p.arg[0]);
    peer_pkt_release(&p);
    return t;
}

/* The admin "status" line of func: "func\tqueued\trunning\tworkers", or "" if none. */
static void
status_of(int port, const char *func, char *line, size_t cap)
{
    char buf[4096], *s, *e;
    int a = peer_connect(port);
    size_t flen = strlen(func);

    line[0] = '\0';
    peer_admin(a, "status", true, buf, sizeof(buf));
    close(a);
    for (s = buf; *s != '\0'; s = e + 1) {
        e = strchr(s, '\n');
        if (e == NULL)
            break;
        if ((size_t)(e - s) > flen && strncmp(s, func, flen) == 0 && s[flen] == '\t') {
            snprintf(line, cap, "%.*s", (int)(e - s), s);
            return;
        }
    }
}

/*
 * A client that asked for exceptions waits for a job; its worker streams
 * WORK_DATA then ends with WORK_EXCEPTION in one write. The WORK_DATA fills
 * the client's output, so forwarding the exception drops the client while
 * lifecycle_exception walks the job's waiters.
 */
static void
exception_to_full_client(void)
{
    unsigned char buf[2048];
    struct daemon d;
    char h[128], st[256];
    size_t n;
    int c, w;

    daemon_start(&d, tiny);
    c = peer_connect(d.port);
    peer_send(c, PACKET_OPTION_REQ, 1, "exceptions");
    tap_is_int(recv_until(c, PACKET_OPTION_RES, NULL, 0), PACKET_OPTION_RES,
               "exceptions: the client asks for exceptions");
    peer_send(c, PACKET_SUBMIT_JOB, 3, "fx", "", "x");
    tap_is_int(recv_until(c, PACKET_JOB_CREATED, NULL, 0), PACKET_JOB_CREATED,
               "exceptions: the job is created");
    w = peer_connect(d.port);
    peer_send(w, PACKET_CAN_DO, 1, "fx");
    peer_send(w, PACKET_GRAB_JOB, 0);
    tap_is_int(recv_until(w, PACKET_JOB_ASSIGN, h, sizeof(h)), PACKET_JOB_ASSIGN,
               "exceptions: the worker is assigned it");
    n = req(buf, PACKET_WORK_DATA, h, strlen(h), 'D', 600);
    n += req(buf + n, PACKET_WORK_EXCEPTION, h, strlen(h), 'E', 600);
    peer_send_raw(w, buf, n);
    peer_send(w, PACKET_ECHO_REQ, 1, "after");
    tap_is_int(recv_until(w, PACKET_ECHO_RES, NULL, 0), PACKET_ECHO_RES,
               "exceptions: the worker is served after its client was dropped");
    tap_ok(peer_closed(c, PEER_TIMEOUT_MS), "exceptions: the client over the limit is closed");
    status_of(d.port, "fx", st, sizeof(st));
    tap_is_str(st, "fx\t0\t0\t1", "exceptions: the job ended (nothing queued or running)");
    tap_ok(peer_run_job(d.port, "other", "abc"), "exceptions: other clients are served");
    close(w);
    close(c);
    tap_ok(daemon_alive(&d), "exceptions: dsjobd is still running");
    tap_is_int(daemon_stop(&d), 0, "exceptions: and stops cleanly");
}

/*
 * One connection both waits for a job and works it. Its WORK_DATA fills its
 * own output, so forwarding the end drops it while the end is handled:
 * dropping it there requeued and freed the job under lifecycle_end (or
 * lifecycle_warned for a WORK_WARNING).
 */
static void
self_worker(uint32_t end, const char *name)
{
    unsigned char buf[2048];
    struct daemon d;
    char h[128], st[256], s[128];
    size_t n;
    int c, a;

    daemon_start(&d, tiny);
    c = peer_connect(d.port);
    peer_send(c, PACKET_CAN_DO, 1, "fs");
    peer_send(c, PACKET_SUBMIT_JOB, 3, "fs", "", "x");
    tap_is_int(recv_until(c, PACKET_JOB_CREATED, NULL, 0), PACKET_JOB_CREATED,
               "%s: the job is created", name);
    peer_send(c, PACKET_GRAB_JOB, 0);
    tap_is_int(recv_until(c, PACKET_JOB_ASSIGN, h, sizeof(h)), PACKET_JOB_ASSIGN,
               "%s: its own connection is assigned it", name);
    n = req(buf, PACKET_WORK_DATA, h, strlen(h), 'D', 600);
    n += req(buf + n, end, h, strlen(h), 'R', 600);
    peer_send_raw(c, buf, n);
    tap_ok(peer_closed(c, PEER_TIMEOUT_MS), "%s: the connection over the limit is closed", name);
    close(c);
    a = peer_connect(d.port);
    peer_send(a, PACKET_ECHO_REQ, 1, "ping");
    tap_is_int(recv_until(a, PACKET_ECHO_RES, NULL, 0), PACKET_ECHO_RES, "%s: dsjobd still answers",
               name);
    close(a);
    status_of(d.port, "fs", st, sizeof(st));
    snprintf(s, sizeof(s), "fs\t0\t0\t0");
    tap_is_str(st, s, "%s: the job is gone, not left queued or running", name);
    tap_ok(peer_run_job(d.port, "other", "abc"), "%s: other clients are served", name);
    tap_ok(daemon_alive(&d), "%s: dsjobd is still running", name);
    tap_is_int(daemon_stop(&d), 0, "%s: and stops cleanly", name);
}

/*
 * A durable server answers a batch's submitters after the commit: a client
 * that pipelined many background submits and reads nothing goes over the
 * limit while batch_finish walks the batch's acks. Every job it was given
 * is stored all the same, and runs.
 */
static void
acks_to_full_client(void)
{
    enum { N = 120 };
    char dir[] = "/tmp/dsjob-drop.XXXXXX";
    const char *args[8];
    unsigned char *buf = malloc((size_t)N * 64), *p;
    struct daemon d;
    int c, w, i, ran = 0;
    char name[32];

    if (mkdtemp(dir) == NULL || buf == NULL)
        tap_bail("no temporary directory");
    args[0] = "--work-dir";
    args[1] = dir;
    args[2] = tiny[0];
    args[3] = tiny[1];
    args[4] = tiny[2];
    args[5] = tiny[3];
    args[6] = NULL;
    daemon_start(&d, args);
    c = peer_connect(d.port);
    p = buf;
    for (i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "u%03d", i);
        memcpy(p, "\0REQ\0\0\0\x12\0\0\0\x0b", 12); /* SUBMIT_JOB_BG, 11 bytes */
        memcpy(p + 12, "fa\0", 3);
        memcpy(p + 15, name, 4);
        p[19] = '\0';
        memcpy(p + 20, "job", 3);
        p += 23;
    }
    peer_send_raw(c, buf, (size_t)(p - buf));
    tap_ok(peer_closed(c, 3 * PEER_TIMEOUT_MS),
           "acks: a client that reads none of %d answers is closed", N);
    close(c);
    w = peer_connect(d.port);
    peer_send(w, PACKET_CAN_DO, 1, "fa");
    for (i = 0; i < N; i++) {
        char h[128];

        struct peer_pkt pk;

        if (peer_grab(w, PACKET_GRAB_JOB, &pk, PEER_TIMEOUT_MS) != PACKET_JOB_ASSIGN) {
            peer_pkt_release(&pk);
            break;
        }
        snprintf(h, sizeof(h), "%.*s", (int)pk.arg_len[0], (const char *)pk.arg[0]);
        peer_pkt_release(&pk);
        peer_send(w, PACKET_WORK_COMPLETE, 2, h, "");
        ran++;
    }
    tap_is_int(ran, N, "acks: every job of the dropped client was stored and runs");
    close(w);
    tap_ok(peer_run_job(d.port, "other", "abc"), "acks: other clients are served");
    tap_ok(daemon_alive(&d), "acks: dsjobd is still running");
    tap_is_int(daemon_stop(&d), 0, "acks: and stops cleanly");
    free(buf);
    {
        char cmd[600];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            tap_diag("could not remove %s", dir);
    }
}

int
main(void)
{
    alarm(120);
    exception_to_full_client();
    self_worker(PACKET_WORK_COMPLETE, "complete");
    self_worker(PACKET_WORK_WARNING, "warning");
    acks_to_full_client();
    return tap_done();
}
