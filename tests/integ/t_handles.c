/*
 * Handles are never a prefix of one another. libgearman 2.0 matches a
 * reply to its task by the task's handle as a prefix of the reply's
 * (strncmp over strlen of the task's handle), so with H:x:2 and H:x:20 in
 * flight task 2 would take task 20's reply. Checked over the handles a
 * server gives out: 250 background submits (ids 1 to 250, past 2, 20 and
 * 200), then the same after a restart on a SQLite store, where new ids
 * follow the replayed ones; every pair is put to libgearman 2.0's match.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/peer.h"
#include "tap.h"

#define NJOBS 250

static char handles[2 * NJOBS][128];
static int nhandles;

/* Submit n background jobs on a fresh connection; their handles go to handles[]. */
static bool
submit_all(int port, int n)
{
    struct peer_pkt p;
    int c = peer_connect(port), i;
    bool ok = true;

    for (i = 0; i < n; i++)
        peer_send(c, PACKET_SUBMIT_JOB_BG, 3, "th", "", "x");
    for (i = 0; i < n && ok; i++) {
        ok = peer_recv(c, &p, PEER_TIMEOUT_MS) == PACKET_JOB_CREATED && p.nargs == 1 &&
             p.arg_len[0] < sizeof(handles[0]);
        if (ok)
            snprintf(handles[nhandles++], sizeof(handles[0]), "%.*s", (int)p.arg_len[0],
                     (const char *)p.arg[0]);
        peer_pkt_release(&p);
    }
    close(c);
    return ok;
}

/* libgearman 2.0's test (client.cc): does the reply's handle r go to the task of handle t? */
static bool
lg2_matches(const char *t, const char *r)
{
    return strlen(t) <= strlen(r) && strncmp(t, r, strlen(t)) == 0;
}

/* The pairs (t, r), t != r, that libgearman 2.0 would confuse; the first in *a, *b. */
static int
confusions(const char **a, const char **b)
{
    int i, j, n = 0;

    for (i = 0; i < nhandles; i++)
        for (j = 0; j < nhandles; j++)
            if (i != j && lg2_matches(handles[i], handles[j]) && n++ == 0)
                *a = handles[i], *b = handles[j];
    return n;
}

static void
check(const char *how)
{
    const char *a = "", *b = "";
    int n = confusions(&a, &b);

    tap_is_int(n, 0, "%s: no handle of %d is a prefix of another (libgearman 2.0's match)", how,
               nhandles);
    if (n > 0)
        tap_diag("  '%s' matches the reply for '%s'", a, b);
}

int
main(void)
{
    const char *args[] = {"--store", "sqlite", "--libsqlite3-db", NULL, NULL};
    char db[300];
    struct daemon d;

    alarm(120);
    daemon_start(&d, NULL);
    tap_ok(submit_all(d.port, NJOBS), "%d background submits answered", NJOBS);
    tap_diag("handles 2 and 20: %s %s", handles[1], handles[19]);
    check("one server");
    tap_is_int(daemon_stop(&d), 0, "dsjobd stops cleanly");

    snprintf(db, sizeof(db), "%s/handles-%d.db", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    args[3] = db;
    nhandles = 0;
    daemon_start(&d, args);
    tap_ok(submit_all(d.port, NJOBS / 2), "sqlite store: %d jobs stored", NJOBS / 2);
    tap_is_int(daemon_stop(&d), 0, "sqlite store: dsjobd stops");
    daemon_start(&d, args);
    tap_ok(submit_all(d.port, NJOBS / 2), "sqlite store: after a restart, %d more", NJOBS / 2);
    check("across a restart, the replayed jobs' and the new ones'");
    tap_is_int(daemon_stop(&d), 0, "sqlite store: dsjobd stops cleanly");
    unlink(db);
    return tap_done();
}
