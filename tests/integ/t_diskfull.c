/*
 * A full disk costs the submits that do not fit and nothing else. dsjobd
 * keeps its SQLite store on a small tmpfs that a filler file nearly fills;
 * background submits of 32 KiB are acknowledged until the disk is full,
 * then refused with ERROR STORE_ERROR while the server keeps serving
 * (echo, foreground jobs). Once the filler is removed, submits are
 * acknowledged again without a restart; after a kill -9 and a restart,
 * exactly the acknowledged jobs are there. Needs root to mount the tmpfs:
 * skipped otherwise.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/peer.h"
#include "tap.h"

#define PAYLOAD (32 * 1024)
#define MAX_SUBMITS 400

static char dir[] = "/tmp/dsjob-full.XXXXXX";
static char mnt[300];
static bool mounted;

static void
cleanup(void)
{
    char cmd[700];

    if (mounted) {
        snprintf(cmd, sizeof(cmd), "umount '%s' 2>/dev/null", mnt);
        if (system(cmd) != 0)
            tap_diag("umount %s failed", mnt);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        tap_diag("could not remove %s", dir);
}

/* Submit one background job; returns the packet type answered. */
static int
submit(int c, const char *payload, char *handle, size_t cap, char *code, size_t code_cap)
{
    struct peer_pkt p;
    int t;

    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "full", "", payload);
    t = peer_recv(c, &p, PEER_TIMEOUT_MS);
    if (t == PACKET_JOB_CREATED)
        snprintf(handle, cap, "%.*s", (int)p.arg_len[0], (const char *)p.arg[0]);
    else if (t == PACKET_ERROR)
        snprintf(code, code_cap, "%.*s: %.*s", (int)p.arg_len[0], (const char *)p.arg[0],
                 (int)p.arg_len[1], (const char *)p.arg[1]);
    peer_pkt_release(&p);
    return t;
}

int
main(void)
{
    char wd[400], filler[400], cmd[800], handle[64], code[600] = "";
    const char *args[] = {"--work-dir", wd, NULL};
    char *payload = malloc(PAYLOAD + 1);
    struct daemon d;
    int c, i, acked = 0, t = 0, drained = 0;
    FILE *fp;

    alarm(120);
    if (geteuid() != 0)
        tap_skip_all("mounting a small tmpfs needs root");
    if (mkdtemp(dir) == NULL)
        tap_bail("mkdtemp: %s", strerror(errno));
    atexit(cleanup);
    snprintf(mnt, sizeof(mnt), "%s/mnt", dir);
    mkdir(mnt, 0700);
    snprintf(cmd, sizeof(cmd), "mount -t tmpfs -o size=2m tmpfs '%s' 2>/dev/null", mnt);
    if (system(cmd) != 0)
        tap_skip_all("cannot mount a tmpfs here (no privilege in this container)");
    mounted = true;
    snprintf(filler, sizeof(filler), "%s/filler", mnt);
    fp = fopen(filler, "w");
    for (i = 0; fp != NULL && i < 1200; i++)
        fwrite(payload, 1, 1024, fp); /* 1.2 MiB of the 2 */
    if (fp == NULL || fclose(fp) != 0)
        tap_bail("cannot write the filler");
    snprintf(wd, sizeof(wd), "%s/var", mnt);
    memset(payload, 'x', PAYLOAD);
    payload[PAYLOAD] = '\0';

    daemon_start(&d, args);
    c = peer_connect(d.port);
    for (i = 0; i < MAX_SUBMITS; i++) {
        t = submit(c, payload, handle, sizeof(handle), code, sizeof(code));
        if (t != PACKET_JOB_CREATED)
            break;
        acked++;
    }
    tap_ok(acked > 0, "%d background jobs fit before the disk filled", acked);
    tap_is_int(t, PACKET_ERROR, "then a submit is answered with an ERROR");
    tap_ok(strncmp(code, "STORE_ERROR", 11) == 0, "STORE_ERROR, saying why: %s", code);
    tap_ok(daemon_alive(&d), "the server is still up");
    tap_ok(peer_run_job(d.port, "fg", "still serving"), "a foreground job still completes");
    t = submit(c, payload, handle, sizeof(handle), code, sizeof(code));
    tap_is_int(t, PACKET_ERROR, "while the disk stays full, background submits keep failing");

    unlink(filler);
    t = submit(c, payload, handle, sizeof(handle), code, sizeof(code));
    tap_is_int(t, PACKET_JOB_CREATED, "with room again, a submit is acknowledged (no restart)");
    if (t == PACKET_JOB_CREATED)
        acked++;
    close(c);

    kill(d.pid, SIGKILL);
    waitpid(d.pid, NULL, 0);
    d.pid = 0;
    daemon_start(&d, args);
    c = peer_connect(d.port);
    peer_send(c, PACKET_CAN_DO, 1, "full");
    for (;;) {
        struct peer_pkt p;

        if (peer_grab(c, PACKET_GRAB_JOB, &p, PEER_TIMEOUT_MS) != PACKET_JOB_ASSIGN) {
            peer_pkt_release(&p);
            break;
        }
        drained++;
        peer_send_bin(c, PACKET_WORK_COMPLETE, 1, (const void *const *)&p.arg[0], &p.arg_len[0]);
        peer_pkt_release(&p);
    }
    tap_is_int(drained, acked,
               "after kill -9 and a restart, exactly the %d acknowledged jobs are there", acked);
    close(c);
    daemon_stop(&d);
    free(payload);
    return tap_done();
}
