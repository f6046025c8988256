/*
 * libdsjobclient's flow control calls against a real dsjobd:
 * dsjob_client_limit sets and reads a function's settings, pause and
 * resume change what a worker's GRAB_JOB gets (a raw peer worker: a
 * queued job of a paused function is not assigned, NO_JOB; resumed, it
 * is), a bad setting comes back as DSJOB_ERR_SERVER with the server's
 * words, and the calls refuse bad arguments before any server sees them.
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

/* One GRAB_JOB: the answer's type. */
static uint32_t
grab(int fd)
{
    struct peer_pkt p;
    uint32_t type;

    if (peer_send(fd, PACKET_GRAB_JOB, 0) < 0 || peer_recv(fd, &p, PEER_TIMEOUT_MS) < 0)
        return 0;
    type = p.type;
    peer_pkt_release(&p);
    return type;
}

int
main(void)
{
    struct daemon d;
    struct dsjob_client *c;
    char handle[DSJOB_HANDLE_MAX], *out = NULL;
    int w;

    daemon_start(&d, NULL);
    c = dsjob_client_new();
    if (c == NULL || dsjob_client_add_server(c, addr(d.port)) != DSJOB_OK)
        tap_bail("client");
    tap_is_int(dsjob_client_limit(c, "fl", "concurrency 2 rate 10/s", NULL), DSJOB_OK,
               "limit sets settings");
    tap_is_int(dsjob_client_limit(c, "fl", NULL, &out), DSJOB_OK, "limit reads them");
    tap_ok(out != NULL && strncmp(out, "fl\tconcurrency 2 rate 10/s\t0\t0\t", 30) == 0,
           "the function's line: '%s'", out ? out : "(null)");
    dsjob_free(out);
    out = NULL;
    tap_is_int(dsjob_client_limit(c, "fl", "concurrency nine", NULL), DSJOB_ERR_SERVER,
               "a bad setting is the server's error");
    tap_ok(strstr(dsjob_client_errmsg(c), "bad value 'nine' for 'concurrency'") != NULL,
           "with its words: %s", dsjob_client_errmsg(c));
    tap_is_int(dsjob_client_limit(c, "f l", "concurrency 1", NULL), DSJOB_ERR_ARG,
               "a name with a space is refused here");
    tap_is_int(dsjob_client_limit(c, "fl", "concurrency 1\nshutdown", NULL), DSJOB_ERR_ARG,
               "so are settings with a newline");

    tap_is_int(dsjob_client_pause(c, "fl"), DSJOB_OK, "pause");
    tap_is_int(
        dsjob_client_submit_bg(c, "fl", "", "x", 1, DSJOB_PRIO_NORMAL, handle, sizeof(handle)),
        DSJOB_OK, "a submit is taken while paused");
    w = peer_connect(d.port);
    if (w < 0 || peer_send(w, PACKET_CAN_DO, 1, "fl") < 0)
        tap_bail("worker");
    tap_is_int(grab(w), PACKET_NO_JOB, "a paused function's job is not assigned");
    tap_is_int(dsjob_client_limit(c, "fl", NULL, &out), DSJOB_OK, "limit reads it");
    tap_ok(out != NULL && strstr(out, "paused\t0\t1\t") != NULL &&
               strstr(out, "\tpaused\t") != NULL,
           "paused, one queued, held back by the pause: '%s'", out ? out : "(null)");
    dsjob_free(out);
    tap_is_int(dsjob_client_resume(c, "fl"), DSJOB_OK, "resume");
    tap_is_int(grab(w), PACKET_JOB_ASSIGN, "then it is assigned");

    dsjob_client_free(c);
    daemon_stop(&d);
    return tap_done();
}
