/*
 * The I/O-error sweep. One fixed workload (background
 * submits, a foreground job, two completions, more submits) runs once on
 * tests/soak/dsjobd_cut without faults to count the SQLite writes, syncs,
 * opens and truncates it makes; then once for every N of every kind, with
 * the test VFS failing the Nth one with SQLITE_IOERR (the write sweep again
 * with SQLITE_FULL). Each step checks: every submit is answered
 * JOB_CREATED or ERROR STORE_ERROR; the foreground job completes; once the
 * error is past, a submit is acknowledged again without a restart; after a
 * kill -9 the database opens again and holds every acknowledged job that
 * was not completed (never a false acknowledgement). A server that refuses
 * to start because its database could not be opened is allowed, if it
 * starts once the error is gone. Prints "# sweep-row ..." for make soak,
 * which runs it (dsjobd backs off about a second after a failed commit, so
 * the whole sweep takes over a minute: too long for make check). With
 * --stride K only every Kth N is tried (CI's short version).
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "lib/peer.h"
#include "tap.h"

#define FIRST_SUBMITS 6 /* background submits before the foreground job */
#define LATER_SUBMITS 2 /* after the completions */
#define NJOBS (FIRST_SUBMITS + LATER_SUBMITS)
#define COMPLETIONS 2
#define RETRIES 24 /* submits at the end, until one is acknowledged */

static const char *const op_name[] = {"write", "sync", "open", "truncate"};
#define NOPS 4

static char root[] = "/tmp/dsjob-sweep.XXXXXX";
static const char *bin;

/* What one step saw. */
struct step {
    int acked[NJOBS + RETRIES]; /* 1: JOB_CREATED, -1: STORE_ERROR, 0: no answer */
    int done[NJOBS + RETRIES];  /* completed by the worker */
    int store_errors;           /* ERROR STORE_ERROR answers */
    int bad_answers;            /* anything else */
    bool fg_ok;                 /* the foreground job completed */
    bool recovered;             /* a submit was acknowledged after the error */
    int started;                /* 0 the server would not start with the fault */
};

static struct {
    unsigned long steps, acked, lost, phantoms, dups, came_back, refused;
} tot;

static void
cleanup(void)
{
    char cmd[300];

    if (getenv("DSJOB_KEEP_TMP") != NULL)
        return;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        tap_diag("could not remove %s", root);
}

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/*
 * spawn starts dsjobd_cut on dir with fail (NULL: none) as DSJOB_CUTVFS_FAIL;
 * returns its port, or 0 if it exited (a fault at start); *pid is set.
 */
static int
spawn(const char *dir, const char *fail, const char *counts, pid_t *pid)
{
    char portfile[300], log[300], undo[300], wd[300];
    int port = 0, i;

    snprintf(portfile, sizeof(portfile), "%s/port", dir);
    snprintf(log, sizeof(log), "%s/dsjobd.log", dir);
    snprintf(undo, sizeof(undo), "%s/undo", dir);
    snprintf(wd, sizeof(wd), "%s/store", dir);
    unlink(portfile);
    *pid = fork();
    if (*pid < 0)
        tap_bail("fork: %s", strerror(errno));
    if (*pid == 0) {
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
        snprintf(log, sizeof(log), "%s/stderr", dir);
        if (freopen(log, "a", stderr) == NULL) /* a refusal to start says why there */
            _exit(126);
        snprintf(log, sizeof(log), "%s/dsjobd.log", dir);
        setenv("DSJOB_CUTVFS_LOG", undo, 1);
        setenv("DSJOB_CUTVFS_NOFSYNC", "1", 1); /* no power cut here: fsync buys nothing */
        if (fail != NULL)
            setenv("DSJOB_CUTVFS_FAIL", fail, 1);
        else
            unsetenv("DSJOB_CUTVFS_FAIL");
        if (counts != NULL)
            setenv("DSJOB_CUTVFS_COUNTS", counts, 1);
        else
            unsetenv("DSJOB_CUTVFS_COUNTS");
        execl(bin, bin, "-L", "127.0.0.1", "-p", "0", "--port-file", portfile, "--log-file", log,
              "--work-dir", wd, "--store-sync", "full", (char *)NULL);
        _exit(127);
    }
    for (i = 0; i < 200; i++) {
        FILE *fp = fopen(portfile, "r");
        int status;

        if (fp != NULL) {
            if (fscanf(fp, "%d", &port) == 1 && port > 0) {
                fclose(fp);
                return port;
            }
            fclose(fp);
        }
        if (waitpid(*pid, &status, WNOHANG) == *pid) {
            *pid = 0;
            return 0;
        }
        sleep_ms(10);
    }
    tap_bail("dsjobd_cut did not write its port file within 2 s");
    return 0;
}

static void
stop(pid_t *pid, int sig)
{
    if (*pid <= 0)
        return;
    kill(*pid, sig);
    waitpid(*pid, NULL, 0);
    *pid = 0;
}

static void
payload_of(int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "sweep job %d", i);
}

/* submit job i in the background: 1 acknowledged, -1 STORE_ERROR, 0 anything else. */
static int
submit(int c, int i, struct step *s)
{
    struct peer_pkt p;
    char data[32];
    int t, r = 0;

    payload_of(i, data, sizeof(data));
    peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "sweep", "", data);
    t = peer_recv(c, &p, PEER_TIMEOUT_MS);
    if (t == PACKET_JOB_CREATED)
        r = 1;
    else if (t == PACKET_ERROR && p.arg_len[0] == 11 && memcmp(p.arg[0], "STORE_ERROR", 11) == 0)
        r = -1;
    peer_pkt_release(&p);
    if (r == -1)
        s->store_errors++;
    if (r == 0)
        s->bad_answers++;
    s->acked[i] = r;
    return r;
}

/* job_of is the index of a "sweep job N" payload, or -1. */
static int
job_of(const struct peer_pkt *p)
{
    int i;

    if (p->nargs < 3 || p->arg_len[2] < 11 || memcmp(p->arg[2], "sweep job ", 10) != 0)
        return -1;
    i = atoi((const char *)p->arg[2] + 10);
    return i >= 0 && i < NJOBS + RETRIES ? i : -1;
}

/* complete up to n jobs with worker w; marks them done. */
static void
complete(int w, int n, struct step *s)
{
    struct peer_pkt p;

    while (n-- > 0) {
        int i;

        peer_send(w, PACKET_GRAB_JOB, 0);
        if (peer_recv(w, &p, PEER_TIMEOUT_MS) != PACKET_JOB_ASSIGN) {
            peer_pkt_release(&p);
            return;
        }
        i = job_of(&p);
        peer_send_bin(w, PACKET_WORK_COMPLETE, 1, (const void *const *)&p.arg[0], &p.arg_len[0]);
        if (i >= 0)
            s->done[i] = 1;
        peer_pkt_release(&p);
    }
    /* the answer to the next request comes after the completions committed */
    peer_send(w, PACKET_ECHO_REQ, 1, "sync");
    peer_recv(w, &p, PEER_TIMEOUT_MS);
    peer_pkt_release(&p);
}

/* workload runs the fixed load on a server at port. */
static void
workload(int port, struct step *s)
{
    int c = peer_connect(port), w = peer_connect(port), i;

    peer_send(w, PACKET_CAN_DO, 1, "sweep");
    for (i = 0; i < FIRST_SUBMITS; i++)
        submit(c, i, s);
    s->fg_ok = peer_run_job(port, "sweep_fg", "foreground");
    complete(w, COMPLETIONS, s);
    for (i = FIRST_SUBMITS; i < NJOBS; i++)
        submit(c, i, s);
    for (i = NJOBS; i < NJOBS + RETRIES && !s->recovered; i++)
        s->recovered = submit(c, i, s) == 1;
    close(w);
    close(c);
}

/* drain takes every job from a server and returns how many; tallies the step's figures. */
static bool
drain(int port, const struct step *s, const char *what, unsigned long *bad)
{
    int w = peer_connect(port), seen[NJOBS + RETRIES] = {0}, i;
    unsigned long lost = 0, phantoms = 0, dups = 0, back = 0;
    struct peer_pkt p;

    peer_send(w, PACKET_CAN_DO, 1, "sweep");
    for (;;) {
        peer_send(w, PACKET_GRAB_JOB, 0);
        if (peer_recv(w, &p, PEER_TIMEOUT_MS) != PACKET_JOB_ASSIGN) {
            peer_pkt_release(&p);
            break;
        }
        i = job_of(&p);
        if (i < 0 || s->acked[i] == 0 || seen[i])
            phantoms++;
        else
            seen[i] = 1;
        peer_send_bin(w, PACKET_WORK_COMPLETE, 1, (const void *const *)&p.arg[0], &p.arg_len[0]);
        peer_pkt_release(&p);
    }
    close(w);
    for (i = 0; i < NJOBS + RETRIES; i++) {
        if (s->acked[i] == 1) {
            tot.acked++;
            if (!s->done[i] && !seen[i])
                lost++;
            if (s->done[i] && seen[i])
                dups++;
        }
        if (s->acked[i] == -1 && seen[i])
            back++;
    }
    tot.lost += lost;
    tot.phantoms += phantoms;
    tot.dups += dups;
    tot.came_back += back;
    if (back > 0)
        tap_diag("%s: %lu submits answered STORE_ERROR were stored all the same", what, back);
    *bad = lost + phantoms;
    return lost == 0 && phantoms == 0;
}

/* counts_of reads the baseline's operation counts. */
static void
counts_of(const char *path, unsigned long n[NOPS])
{
    FILE *fp = fopen(path, "r");

    if (fp == NULL ||
        fscanf(fp, "write %lu sync %lu open %lu truncate %lu", &n[0], &n[1], &n[2], &n[3]) != 4)
        tap_bail("no operation counts in %s", path);
    fclose(fp);
}

static void
one_step(const char *fail, int no)
{
    char dir[300], cmd[400];
    struct step s;
    unsigned long bad = 0;
    pid_t pid;
    int port;
    bool ok;

    memset(&s, 0, sizeof(s));
    snprintf(dir, sizeof(dir), "%s/%d", root, no);
    if (mkdir(dir, 0700) != 0)
        tap_bail("mkdir %s: %s", dir, strerror(errno));
    tot.steps++;
    port = spawn(dir, fail, NULL, &pid);
    if (port > 0) {
        s.started = 1;
        workload(port, &s);
        ok = pid > 0 && waitpid(pid, NULL, WNOHANG) == 0;
        stop(&pid, SIGKILL);
    } else {
        tot.refused++;
        ok = true;
    }
    port = spawn(dir, NULL, NULL, &pid);
    if (port == 0) {
        tap_ok(false, "%s: the database does not open again", fail);
        return;
    }
    ok = drain(port, &s, fail, &bad) && ok;
    stop(&pid, SIGTERM);
    if (s.started)
        tap_ok(ok && s.fg_ok && s.recovered && s.bad_answers == 0,
               "%s: %d STORE_ERROR answers, foreground job %s, %s, %lu acknowledged jobs lost "
               "or phantoms after a restart",
               fail, s.store_errors, s.fg_ok ? "ran" : "FAILED",
               s.recovered ? "recovered without a restart" : "NOT RECOVERED", bad);
    else
        tap_ok(ok, "%s: refused to start; starts once the error is gone, %lu lost or phantoms",
               fail, bad);
    if (getenv("DSJOB_KEEP_TMP") == NULL) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            tap_diag("could not remove %s", dir);
    }
}

int
main(int argc, char **argv)
{
    char dir[300], counts[300], fail[64];
    unsigned long n[NOPS], k;
    struct step s;
    pid_t pid;
    int port, op, no = 0;
    unsigned long stride = 1;

    if (argc == 3 && strcmp(argv[1], "--stride") == 0)
        stride = strtoul(argv[2], NULL, 10);
    if (stride < 1 || (argc != 1 && argc != 3))
        tap_bail("usage: t_iosweep [--stride K]");
    alarm(600);
    bin = getenv("DSJOBD_CUT");
    if (bin == NULL || access(bin, X_OK) != 0)
        tap_skip_all("no tests/soak/dsjobd_cut (DSJOBD_CUT)");
    if (mkdtemp(root) == NULL)
        tap_bail("mkdtemp: %s", strerror(errno));
    atexit(cleanup);
    signal(SIGPIPE, SIG_IGN);

    /* the baseline: no fault, counted */
    memset(&s, 0, sizeof(s));
    snprintf(dir, sizeof(dir), "%s/base", root);
    snprintf(counts, sizeof(counts), "%s/counts", root);
    mkdir(dir, 0700);
    port = spawn(dir, NULL, counts, &pid);
    if (port == 0)
        tap_bail("dsjobd_cut does not start");
    workload(port, &s);
    stop(&pid, SIGTERM);
    counts_of(counts, n);
    tap_ok(s.store_errors == 0 && s.fg_ok && s.recovered, "the workload runs without faults");
    tap_diag("operations in one run: %lu writes, %lu syncs, %lu opens, %lu truncates", n[0], n[1],
             n[2], n[3]);

    for (op = 0; op < NOPS; op++)
        for (k = 1; k <= n[op]; k += stride) {
            snprintf(fail, sizeof(fail), "%s:%lu:1:ioerr", op_name[op], k);
            one_step(fail, no++);
            if (op == 0) {
                snprintf(fail, sizeof(fail), "%s:%lu:1:full", op_name[op], k);
                one_step(fail, no++);
            }
        }
    /* a longer outage: every write fails for a while, then none does */
    snprintf(fail, sizeof(fail), "write:%lu:%lu:ioerr", n[0] / 3 + 1, n[0] / 2);
    one_step(fail, no++);
    snprintf(fail, sizeof(fail), "sync:2:%lu:ioerr", n[1]);
    one_step(fail, no++);

    printf("# sweep-row steps %lu acknowledged %lu lost %lu phantoms %lu duplicates %lu\n",
           tot.steps, tot.acked, tot.lost, tot.phantoms, tot.dups);
    tap_diag("%lu steps, %lu refused to start, %lu acknowledged, %lu lost, %lu phantoms, "
             "%lu duplicates, %lu submits answered STORE_ERROR and stored anyway",
             tot.steps, tot.refused, tot.acked, tot.lost, tot.phantoms, tot.dups, tot.came_back);
    return tap_done();
}
