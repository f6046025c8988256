/*
 * The crash test of t_crash.c with an independent client: libgearman
 * submits background jobs one after another (gearman_client_do_background)
 * and records every handle it is given; dsjobd with the SQLite store is
 * killed with SIGKILL while the client is still submitting; after a
 * restart every recorded job must run, and none twice.
 *
 * make check kills dsjobd after KILL_AFTER acknowledgements (500); make
 * check-long's t_crash_lg_long, the same source, after 3,000, enough
 * single-job commits for SQLite's automatic WAL checkpoints (every 1,000
 * pages) to have run before the kill.
 */
#include "config.h"

#include <libgearman/gearman.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/peer.h"
#include "tap.h"

#define MAX_JOBS 200000
#ifndef KILL_AFTER
#define KILL_AFTER 500
#endif

static char (*acked)[GEARMAN_JOB_HANDLE_SIZE];
static atomic_int nacked;
static atomic_bool stop;
static int port;
/* The submitter tells main when KILL_AFTER jobs are acknowledged, or it stopped. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reached = PTHREAD_COND_INITIALIZER;
static bool submitter_done;

static void
tell_main(bool done)
{
    pthread_mutex_lock(&lock);
    if (done)
        submitter_done = true;
    pthread_cond_signal(&reached);
    pthread_mutex_unlock(&lock);
}

static void *
submitter(void *arg)
{
    gearman_client_st *cl = gearman_client_create(NULL);
    char payload[64];
    int i;

    (void)arg;
    gearman_client_add_server(cl, "127.0.0.1", (in_port_t)port);
    gearman_client_set_timeout(cl, 2000);
    for (i = 0; i < MAX_JOBS && !atomic_load(&stop); i++) {
        char handle[GEARMAN_JOB_HANDLE_SIZE];

        snprintf(payload, sizeof(payload), "lg %d", i);
        if (gearman_client_do_background(cl, "crash_lg", NULL, payload, strlen(payload), handle) !=
            GEARMAN_SUCCESS)
            break; /* the server is gone */
        memcpy(acked[atomic_load(&nacked)], handle, sizeof(handle));
        if (atomic_fetch_add(&nacked, 1) + 1 == KILL_AFTER)
            tell_main(false);
    }
    gearman_client_free(cl);
    tell_main(true);
    return NULL;
}

static int
cmp_handle(const void *a, const void *b)
{
    return strcmp(a, b);
}

int
main(void)
{
    char dir[] = "/tmp/dsjob-crashlg.XXXXXX", wd[300], cmd[400];
    const char *args[] = {"--work-dir", wd, NULL};
    char(*ran)[GEARMAN_JOB_HANDLE_SIZE] = calloc(MAX_JOBS, GEARMAN_JOB_HANDLE_SIZE);
    size_t nran = 0;
    struct daemon d;
    pthread_t t;
    int i, missing = 0, dup = 0, w, n;

    alarm(600); /* a bound for a hang, not a speed: a loaded machine is slow */
    acked = calloc(MAX_JOBS, GEARMAN_JOB_HANDLE_SIZE);
    if (mkdtemp(dir) == NULL)
        tap_bail("mkdtemp");
    snprintf(wd, sizeof(wd), "%s/var", dir);
    daemon_start(&d, args);
    port = d.port;
    pthread_create(&t, NULL, submitter, NULL);
    pthread_mutex_lock(&lock);
    while (atomic_load(&nacked) < KILL_AFTER && !submitter_done)
        pthread_cond_wait(&reached, &lock);
    pthread_mutex_unlock(&lock);
    kill(d.pid, SIGKILL);
    waitpid(d.pid, NULL, 0);
    d.pid = 0;
    atomic_store(&stop, true);
    pthread_join(t, NULL);
    n = atomic_load(&nacked);
    tap_ok(n >= KILL_AFTER, "libgearman had %d background jobs acknowledged when dsjobd was killed",
           n);

    daemon_start(&d, args);
    w = peer_connect(d.port);
    peer_send(w, PACKET_CAN_DO, 1, "crash_lg");
    for (;;) {
        struct peer_pkt p;

        if (peer_grab(w, PACKET_GRAB_JOB, &p, PEER_TIMEOUT_MS) != PACKET_JOB_ASSIGN) {
            peer_pkt_release(&p);
            break;
        }
        snprintf(ran[nran++], GEARMAN_JOB_HANDLE_SIZE, "%.*s", (int)p.arg_len[0],
                 (const char *)p.arg[0]);
        peer_send_bin(w, PACKET_WORK_COMPLETE, 1, (const void *const *)&p.arg[0], &p.arg_len[0]);
        peer_pkt_release(&p);
    }
    close(w);
    qsort(ran, nran, GEARMAN_JOB_HANDLE_SIZE, cmp_handle);
    for (i = 0; i < n; i++)
        if (bsearch(acked[i], ran, nran, GEARMAN_JOB_HANDLE_SIZE, cmp_handle) == NULL)
            missing++;
    for (i = 1; i < (int)nran; i++)
        if (strcmp(ran[i - 1], ran[i]) == 0)
            dup++;
    tap_diag("%zu jobs ran after the restart", nran);
    tap_is_int(missing, 0, "every job libgearman was acknowledged ran after the restart");
    tap_is_int(dup, 0, "none ran twice");
    daemon_stop(&d);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        tap_diag("could not remove %s", dir);
    free(acked);
    free(ran);
    return tap_done();
}
