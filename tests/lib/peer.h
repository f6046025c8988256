/*
 * Test helpers that speak the Gearman protocol over raw, blocking loopback
 * sockets with timeouts, and start dsjobd as a child process: enough to
 * send exactly the bytes a test wants (good or bad) and read exactly what
 * comes back. Every read is bounded by a timeout, so a test never hangs.
 */
#ifndef DSJOB_TESTS_PEER_H
#define DSJOB_TESTS_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/packet.h"

#define PEER_TIMEOUT_MS 5000

/* A received packet; payload is owned by the struct (peer_pkt_release). */
struct peer_pkt {
    uint32_t type;                             /* packet type, or 0 on failure */
    unsigned char *payload;                    /* the payload, NUL-terminated for convenience */
    size_t size;                               /* payload bytes */
    unsigned nargs;                            /* arguments split by the codec */
    const unsigned char *arg[PACKET_MAX_ARGS]; /* into payload */
    size_t arg_len[PACKET_MAX_ARGS];
};

/* A dsjobd child started by daemon_start. */
struct daemon {
    pid_t pid;     /* the child, or 0 when DSJOBD_TEST_ADDR names an outside daemon */
    int port;      /* its TCP port */
    char dir[256]; /* its temporary directory (log, port file) */
    bool exited;   /* daemon_alive saw it exit and reaped it */
    int status;    /* then: its wait status */
};

/*
 * daemon_start runs $DSJOBD on 127.0.0.1, port 0, with the NULL-terminated
 * extra arguments, and waits (at most 5 s) for its port file. Bails out of
 * the test if it cannot.
 */
void daemon_start(struct daemon *d, const char *const *extra);

/*
 * daemon_stop sends SIGTERM and waits (5 s at most, then SIGKILL and -1);
 * returns the exit status, also of a daemon that had exited by itself.
 */
int daemon_stop(struct daemon *d);

/* daemon_alive tells whether the child is still running; one that exited is reaped. */
bool daemon_alive(struct daemon *d);

/*
 * peer_unwrap_libtool: if bin is a libtool wrapper script (server/dsjobd in
 * the build tree while libdsjobserver is not installed), the program it
 * runs, .libs/NAME beside it, goes to real, and the wrapper's library
 * directories are put in front of LD_LIBRARY_PATH, as the wrapper does on
 * every run (a bash, an ls and three seds: half a second a start on a loaded
 * machine). Returns false, leaving everything alone, for anything else.
 */
bool peer_unwrap_libtool(const char *bin, char *real, size_t cap);

/* peer_connect connects to 127.0.0.1:port; bails out on failure. */
int peer_connect(int port);

/* peer_send_raw writes len bytes; returns 0 or -1. */
int peer_send_raw(int fd, const void *buf, size_t len);

/* peer_send sends a REQ packet with nargs string arguments (strlen each). */
int peer_send(int fd, uint32_t type, unsigned nargs, ...);

/* peer_send_bin sends a REQ packet with given args and lengths. */
int peer_send_bin(int fd, uint32_t type, unsigned nargs, const void *const *args,
                  const size_t *lens);

/*
 * peer_recv reads one RES packet within timeout_ms. Returns its type, 0 on
 * timeout or error, -1 if the server closed the connection.
 */
int peer_recv(int fd, struct peer_pkt *p, int timeout_ms);

void peer_pkt_release(struct peer_pkt *p);

/* Whether argument i of p is the string s. */
bool peer_arg_is(const struct peer_pkt *p, unsigned i, const char *s);

/*
 * peer_grab asks worker fd for its next job with grab (GRAB_JOB,
 * GRAB_JOB_UNIQ, GRAB_JOB_ALL) as a sleeping worker would: on NO_JOB it
 * sends PRE_SLEEP and ECHO_REQ, and grabs again if a NOOP comes before the
 * ECHO_RES (dsjobd answers NO_JOB to a worker held until its last end
 * commits, then a NOOP once it has, before what it sent after PRE_SLEEP).
 * Returns the type of the answer in p (JOB_ASSIGN*), NO_JOB when nothing is
 * left for it (p empty), or what peer_recv returns on an error.
 */
int peer_grab(int fd, uint32_t grab, struct peer_pkt *p, int timeout_ms);

/*
 * peer_recv_type reads one packet within timeout_ms and tells whether it is
 * of type; its first argument goes to out (cap bytes, NUL-terminated) when
 * out is not NULL.
 */
bool peer_recv_type(int fd, int type, char *out, size_t cap, int timeout_ms);

/* peer_closed tells whether the server closed fd (EOF within timeout_ms). */
bool peer_closed(int fd, int timeout_ms);

/*
 * peer_admin sends an admin line (newline added) and reads the reply into
 * buf: one line, or up to the "." line when multi is true. Returns bytes read.
 */
size_t peer_admin(int fd, const char *line, bool multi, char *buf, size_t cap);

/*
 * peer_run_job runs one foreground job end to end on fresh connections: a
 * worker registers func, a client submits payload, the worker completes it
 * with the payload reversed; returns true if the client got that result.
 */
bool peer_run_job(int port, const char *func, const char *payload);

/* peer_rss_kb reads a process's resident set (VmRSS) in kB, or -1. */
long peer_rss_kb(pid_t pid);

/* peer_now_us is the monotonic clock in microseconds. */
double peer_now_us(void);

/* peer_median sorts the n samples of us in place and returns the middle one, or -1 if none. */
double peer_median(double *us, int n);

#endif
