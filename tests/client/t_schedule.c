/*
 * libdsjobclient's schedule calls against a real dsjobd:
 * dsjob_client_schedule_add makes a schedule every second whose tick a raw
 * peer worker is then given (function, payload), dsjob_client_schedule_list
 * lists it with its options, dsjob_client_schedule pauses, resumes and
 * removes it, a server's refusal comes back as DSJOB_ERR_SERVER with its
 * words, and bad arguments are refused before any server sees them.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dsjob/client.h>

#include "lib/peer.h"
#include "tap.h"

static const char *
addr(int port)
{
    static char buf[64];

    snprintf(buf, sizeof(buf), "127.0.0.1:%d", port);
    return buf;
}

/*
 * The next job the worker fd is given, waiting for the tick: GRAB_JOB, and
 * on NO_JOB PRE_SLEEP until the server's NOOP (each wait bounded by
 * PEER_TIMEOUT_MS of silence). Its payload into buf; false if none came.
 */
static bool
next_job(int fd, char *buf, size_t cap)
{
    struct peer_pkt p;
    int rounds;

    for (rounds = 0; rounds < 10; rounds++) {
        if (peer_send(fd, PACKET_GRAB_JOB, 0) < 0 || peer_recv(fd, &p, PEER_TIMEOUT_MS) < 0)
            return false;
        if (p.type == PACKET_JOB_ASSIGN && p.nargs == 3) {
            snprintf(buf, cap, "%.*s|%.*s", (int)p.arg_len[1], (const char *)p.arg[1],
                     (int)p.arg_len[2], (const char *)p.arg[2]);
            peer_pkt_release(&p);
            return true;
        }
        peer_pkt_release(&p);
        if (peer_send(fd, PACKET_PRE_SLEEP, 0) < 0 || peer_recv(fd, &p, PEER_TIMEOUT_MS) < 0)
            return false;
        peer_pkt_release(&p); /* the NOOP */
    }
    return false;
}

int
main(void)
{
    struct daemon d;
    struct dsjob_client *c;
    char *out = NULL, job[256];
    int w;

    daemon_start(&d, NULL);
    c = dsjob_client_new();
    if (c == NULL || dsjob_client_add_server(c, addr(d.port)) != DSJOB_OK)
        tap_bail("client");
    tap_is_int(dsjob_client_schedule_list(c, &out), DSJOB_OK, "list with none");
    tap_ok(out != NULL && out[0] == '\0', "is empty: '%s'", out ? out : "(null)");
    dsjob_free(out);
    out = NULL;

    tap_is_int(dsjob_client_schedule_add(c, "tick", "* * * * * *", "sch.f", "it's a tick",
                                         "priority=high missed=once"),
               DSJOB_OK, "add a schedule every second (a payload with a quote and a blank)");
    tap_is_int(dsjob_client_schedule_list(c, &out), DSJOB_OK, "list");
    tap_ok(out != NULL &&
               strncmp(out, "tick\t* * * * * *\tUTC\tsch.f\thigh\tonce\tactive\t", 42) == 0,
           "lists it with its options: '%s'", out ? out : "(null)");
    dsjob_free(out);
    out = NULL;
    w = peer_connect(d.port);
    if (w < 0 || peer_send(w, PACKET_CAN_DO, 1, "sch.f") < 0)
        tap_bail("worker");
    tap_ok(next_job(w, job, sizeof(job)) && strcmp(job, "sch.f|it's a tick") == 0,
           "a tick's job reaches a worker: '%s'", job);

    tap_is_int(dsjob_client_schedule(c, "pause", "tick"), DSJOB_OK, "pause");
    tap_is_int(dsjob_client_schedule_list(c, &out), DSJOB_OK, "list");
    tap_ok(out != NULL && strstr(out, "\tpaused\t-\t") != NULL, "paused, no next run: '%s'",
           out ? out : "(null)");
    dsjob_free(out);
    out = NULL;
    tap_is_int(dsjob_client_schedule(c, "resume", "tick"), DSJOB_OK, "resume");
    tap_is_int(dsjob_client_schedule(c, "rm", "tick"), DSJOB_OK, "rm");
    tap_is_int(dsjob_client_schedule_list(c, &out), DSJOB_OK, "list");
    tap_ok(out != NULL && out[0] == '\0', "none left: '%s'", out ? out : "(null)");
    dsjob_free(out);
    out = NULL;

    tap_is_int(dsjob_client_schedule_add(c, "bad", "61 * * * *", "sch.f", NULL, NULL),
               DSJOB_ERR_SERVER, "a cron expression that does not parse is the server's error");
    tap_ok(strstr(dsjob_client_errmsg(c), "61") != NULL, "with its words: %s",
           dsjob_client_errmsg(c));
    tap_is_int(dsjob_client_schedule(c, "rm", "nosuch"), DSJOB_ERR_SERVER,
               "an unknown schedule too");
    tap_ok(strstr(dsjob_client_errmsg(c), "no schedule nosuch") != NULL, "saying so: %s",
           dsjob_client_errmsg(c));
    tap_is_int(dsjob_client_schedule_add(c, "a b", "* * * * *", "sch.f", NULL, NULL), DSJOB_ERR_ARG,
               "a name with a blank is refused here");
    tap_is_int(dsjob_client_schedule_add(c, "q", "* * * * *", "sch.f", "'\"", NULL), DSJOB_ERR_ARG,
               "a payload with both quotes too");
    tap_is_int(dsjob_client_schedule_add(c, "q", "* * * * *", "sch.f", NULL, "tz=UTC\nshutdown"),
               DSJOB_ERR_ARG, "options with a newline too");
    tap_is_int(dsjob_client_schedule(c, "stop", "tick"), DSJOB_ERR_ARG, "an unknown verb too");
    tap_is_int(dsjob_client_schedule_list(c, NULL), DSJOB_ERR_ARG, "list wants out");

    dsjob_client_free(c);
    daemon_stop(&d);
    return tap_done();
}
