/*
 * Bad input costs the sender and nobody else. Against a real dsjobd: each
 * kind of malformed packet gets an ERROR packet; where framing is lost the
 * connection is closed, where it holds the connection keeps working; and
 * after each one a background job queued beforehand is still queued, a
 * worker that was connected all along still gets work, and a normal
 * foreground job still completes.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/peer.h"
#include "tap.h"

static int port;
static int bystander; /* a client connection open throughout */

/* Expect an ERROR with this code on fd; returns true if it came. */
static bool
expect_error(int fd, const char *code, const char *what)
{
    struct peer_pkt p;
    int t = peer_recv(fd, &p, PEER_TIMEOUT_MS);
    bool ok = t == PACKET_ERROR && p.arg_len[0] == strlen(code) &&
              memcmp(p.arg[0], code, p.arg_len[0]) == 0;

    tap_ok(ok, "%s: ERROR %s", what, code);
    if (t == PACKET_ERROR)
        tap_diag("  text: %.*s", (int)p.arg_len[1], (const char *)p.arg[1]);
    else
        tap_diag("  got packet type %d", t);
    peer_pkt_release(&p);
    return ok;
}

static bool
echo_works(int fd)
{
    struct peer_pkt p;
    bool ok;

    peer_send(fd, PACKET_ECHO_REQ, 1, "still-here");
    ok = peer_recv(fd, &p, PEER_TIMEOUT_MS) == PACKET_ECHO_RES && p.arg_len[0] == 10 &&
         memcmp(p.arg[0], "still-here", 10) == 0;
    peer_pkt_release(&p);
    return ok;
}

/* After each bad input: the rest of the server carries on. */
static void
others_unharmed(const char *after)
{
    char buf[4096];

    peer_admin(bystander, "status", true, buf, sizeof(buf));
    tap_ok(strstr(buf, "queued\t1\t0\t0\n") != NULL, "%s: the queued background job is still there",
           after);
    tap_ok(echo_works(bystander), "%s: another connection still served", after);
    tap_ok(peer_run_job(port, "rev", "abc\x01xyz"), "%s: a normal job still completes", after);
}

static void
bad_magic(void)
{
    int fd = peer_connect(port);

    peer_send_raw(fd, "\0REX\0\0\0\x10\0\0\0\0", 12);
    expect_error(fd, "INVALID_MAGIC", "wrong magic");
    tap_ok(peer_closed(fd, PEER_TIMEOUT_MS), "wrong magic: connection closed");
    close(fd);
    others_unharmed("wrong magic");
}

static void
too_large(void)
{
    int fd = peer_connect(port);
    unsigned char hdr[PACKET_HEADER_SIZE];

    packet_encode_header(hdr, PACKET_REQ, PACKET_SUBMIT_JOB_BG, 1u << 20); /* limit is 64K here */
    peer_send_raw(fd, hdr, sizeof(hdr));
    expect_error(fd, "PACKET_TOO_LARGE", "declared size over --max-packet-size");
    tap_ok(peer_closed(fd, PEER_TIMEOUT_MS), "oversized: connection closed");
    close(fd);
    others_unharmed("oversized");
}

static void
too_few_args(void)
{
    int fd = peer_connect(port);

    peer_send(fd, PACKET_SUBMIT_JOB, 1, "fonly");
    expect_error(fd, "INVALID_PACKET", "SUBMIT_JOB with one argument");
    tap_ok(echo_works(fd), "too few arguments: framing holds, the connection still works");
    peer_send(fd, PACKET_WORK_STATUS, 2, "H:x:1", "3");
    expect_error(fd, "INVALID_PACKET", "WORK_STATUS with two arguments");
    close(fd);
    others_unharmed("too few arguments");
}

static void
unknown_type(void)
{
    int fd = peer_connect(port);

    peer_send(fd, 99, 1, "whatever");
    expect_error(fd, "INVALID_COMMAND", "unknown packet type 99");
    peer_send(fd, PACKET_NOOP, 0);
    expect_error(fd, "INVALID_COMMAND", "a server-only type (NOOP) from a peer");
    peer_send(fd, 5, 0);
    expect_error(fd, "INVALID_COMMAND", "the unused type 5");
    tap_ok(echo_works(fd), "unknown types: the connection still works");
    close(fd);
    others_unharmed("unknown type");
}

static void
not_held(void)
{
    int fd = peer_connect(port);
    int victim_client = peer_connect(port), victim_worker = peer_connect(port);
    struct peer_pkt p;
    char handle[128];

    /* A job really running on another worker: a stranger must not be able to finish it. */
    peer_send(victim_worker, PACKET_CAN_DO, 1, "victim");
    peer_send(victim_client, PACKET_SUBMIT_JOB, 3, "victim", "", "data");
    peer_recv(victim_client, &p, PEER_TIMEOUT_MS);
    snprintf(handle, sizeof(handle), "%.*s", (int)p.arg_len[0], (const char *)p.arg[0]);
    peer_pkt_release(&p);
    peer_send(victim_worker, PACKET_GRAB_JOB, 0);
    tap_is_int(peer_recv(victim_worker, &p, PEER_TIMEOUT_MS), PACKET_JOB_ASSIGN,
               "victim job assigned");
    peer_pkt_release(&p);

    peer_send(fd, PACKET_WORK_COMPLETE, 2, handle, "forged");
    expect_error(fd, "JOB_NOT_FOUND", "WORK_COMPLETE for a job another worker holds");
    peer_send(fd, PACKET_WORK_FAIL, 1, "H:nosuch:1");
    expect_error(fd, "JOB_NOT_FOUND", "WORK_FAIL for an unknown handle");
    tap_ok(echo_works(fd), "not held: the connection still works");
    peer_send(victim_worker, PACKET_WORK_COMPLETE, 2, handle, "real");
    tap_is_int(peer_recv(victim_client, &p, PEER_TIMEOUT_MS), PACKET_WORK_COMPLETE,
               "the real worker's result reaches the client");
    tap_ok(p.arg_len[1] == 4 && memcmp(p.arg[1], "real", 4) == 0, "and it is the real one");
    peer_pkt_release(&p);
    close(fd);
    close(victim_client);
    close(victim_worker);
    others_unharmed("not held");
}

static void
truncated(void)
{
    int fd = peer_connect(port);

    /* Header says 100 bytes, 10 arrive, then the peer goes away. */
    peer_send_raw(fd,
                  "\0REQ\0\0\0\x12\0\0\0\x64"
                  "half a pac",
                  22);
    close(fd);
    others_unharmed("truncated packet then close");
}

static void
response_magic(void)
{
    int fd = peer_connect(port);
    unsigned char buf[64];
    const void *args[1] = {"x"};
    size_t lens[1] = {1};
    size_t n = packet_encode(buf, sizeof(buf), PACKET_RES, PACKET_ECHO_REQ, 1, args, lens);

    peer_send_raw(fd, buf, n);
    expect_error(fd, "INVALID_MAGIC", "a request with \\0RES magic");
    tap_ok(echo_works(fd), "response magic: the connection still works");
    close(fd);
}

static void
long_line(void)
{
    int fd = peer_connect(port);
    static char line[20000];
    char buf[512] = "";
    size_t n;

    memset(line, 'x', sizeof(line));
    peer_send_raw(fd, line, sizeof(line));
    n = peer_admin(fd, "", false, buf, sizeof(buf));
    tap_ok(n > 0 && strncmp(buf, "ERR LINE_TOO_LONG", 17) == 0,
           "an endless admin line: ERR LINE_TOO_LONG");
    tap_ok(peer_closed(fd, PEER_TIMEOUT_MS), "endless line: connection closed");
    close(fd);
    others_unharmed("endless admin line");
}

/* Every line of a status listing has its four fields, and the list ends once. */
static bool
status_well_formed(const char *buf)
{
    const char *line = buf, *nl;

    while ((nl = strchr(line, '\n')) != NULL) {
        const char *t;
        int tabs = 0;

        if (nl - line == 1 && line[0] == '.')
            return nl[1] == '\0';
        for (t = line; t < nl; t++)
            tabs += *t == '\t';
        if (tabs != 3)
            return false;
        line = nl + 1;
    }
    return false;
}

/*
 * A function name with a control byte would forge lines in the admin
 * status listing (a newline, a tab, a "." line): it is refused where a
 * name is first given, with an ERROR, and the connection goes on.
 */
static void
control_names(void)
{
    int fd = peer_connect(port);
    char buf[4096];

    peer_send(fd, PACKET_SUBMIT_JOB_BG, 3, "evil\n.\nfake", "", "x");
    expect_error(fd, "INVALID_ARGUMENT", "SUBMIT_JOB_BG with a newline in its function name");
    peer_send(fd, PACKET_SUBMIT_JOB, 3, "del\x7f", "", "x");
    expect_error(fd, "INVALID_ARGUMENT", "SUBMIT_JOB with a DEL byte in its function name");
    peer_send(fd, PACKET_SUBMIT_JOB_EPOCH, 4, "ep\x01", "", "0", "x");
    expect_error(fd, "INVALID_ARGUMENT", "SUBMIT_JOB_EPOCH with a control byte in its function");
    peer_send(fd, PACKET_CAN_DO, 1, "tab\tname");
    expect_error(fd, "INVALID_ARGUMENT", "CAN_DO with a tab in its function name");
    peer_send(fd, PACKET_CAN_DO_TIMEOUT, 2, "cr\r", "1000");
    expect_error(fd, "INVALID_ARGUMENT", "CAN_DO_TIMEOUT with a CR in its function name");
    tap_ok(echo_works(fd), "control bytes in names: the connection still works");
    peer_admin(fd, "create function a\tb", false, buf, sizeof(buf));
    tap_ok(strncmp(buf, "ERR INVALID_ARGUMENTS", 21) == 0,
           "create function with a tab in the name: ERR INVALID_ARGUMENTS");
    peer_admin(bystander, "status", true, buf, sizeof(buf));
    tap_ok(status_well_formed(buf), "status has four fields on every line and one end");
    if (!status_well_formed(buf))
        tap_diag("status: %s", buf);
    close(fd);
    others_unharmed("control bytes in function names");
}

int
main(void)
{
    static const char *const args[] = {"--max-packet-size", "64K", NULL};
    struct daemon d;
    struct peer_pkt p;
    int client, worker;

    alarm(120);
    daemon_start(&d, args);
    port = d.port;
    bystander = peer_connect(port);
    /* A background job nobody can run, and a worker connected throughout. */
    client = peer_connect(port);
    peer_send(client, PACKET_SUBMIT_JOB_BG, 3, "queued", "", "keep me");
    tap_is_int(peer_recv(client, &p, PEER_TIMEOUT_MS), PACKET_JOB_CREATED, "background job queued");
    peer_pkt_release(&p);
    worker = peer_connect(port);
    peer_send(worker, PACKET_CAN_DO, 1, "rev");

    bad_magic();
    too_large();
    too_few_args();
    unknown_type();
    not_held();
    truncated();
    response_magic();
    long_line();
    control_names();

    tap_ok(daemon_alive(&d), "dsjobd is still running");
    close(client);
    close(worker);
    close(bystander);
    tap_is_int(daemon_stop(&d), 0, "dsjobd stops cleanly on SIGTERM");
    return tap_done();
}
