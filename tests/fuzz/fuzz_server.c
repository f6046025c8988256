/*
 * Fuzz the whole server path (framing, dispatch, admin, queue) with
 * arbitrary bytes from two peers at once. The input is split in two at an
 * offset given by its first two bytes; each half is written into its own
 * connection of one in-process server, which runs until both are drained
 * and closed. Sanitizers catch what goes wrong; the target also checks that
 * no connection outlives its peers. After a shutdown command the next
 * input gets a new server.
 *
 * The first byte's top bit picks one of two servers: one with roomy limits,
 * and one with --max-packet-size 1024 and --max-output-buffer 1036, where
 * two packets in one turn push a peer over its output limit, so the paths
 * that drop a peer in the middle of a send are within reach of 4 KB inputs.
 */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include <dsjob/server.h>

#include "fuzz.h"
#include "server/conn.h"
#include "server/srv.h"

static struct event_base *base;
static struct dsjob_server *server;
static struct srv *srv;

/* The two servers: [0] roomy limits, [1] tiny ones. */
static struct {
    struct event_base *base;
    struct dsjob_server *server;
} slot[2];

static void
setup(int tiny)
{
    struct dsjob_server_config cfg;
    static char path[108];
    char err[256];

    snprintf(path, sizeof(path), "/tmp/dsjob-fuzz-%ld-%d.sock", (long)getpid(), tiny);
    dsjob_server_config_init(&cfg);
    cfg.port = -1;
    cfg.unix_socket = path;
    cfg.log_file = "none";
    cfg.max_packet_size = tiny ? 1024 : 1 << 16;
    cfg.max_output_buffer = tiny ? 1036 : 1 << 20;
    cfg.job_retries = 2;
    cfg.job_handle_prefix = "H:f";
    base = event_base_new();
    server = dsjob_server_new(&cfg, err, sizeof(err));
    if (server == NULL || dsjob_server_attach(server, base) != DSJOB_OK)
        abort();
    slot[tiny].base = base;
    slot[tiny].server = server;
}

static void
drain(int fd)
{
    char buf[65536];

    while (read(fd, buf, sizeof(buf)) > 0)
        ;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    int pair[2][2];
    size_t split, part[2][2];
    int i, turn;

    int tiny;

    if (size < 2)
        return 0;
    tiny = data[0] >> 7;
    base = slot[tiny].base;
    server = slot[tiny].server;
    if (server == NULL)
        setup(tiny);
    srv = (struct srv *)server; /* struct dsjob_server wraps struct srv first */
    split = ((size_t)(data[0] & 0x7f) << 8 | data[1]) % (size - 1);
    data += 2;
    size -= 2;
    part[0][0] = 0, part[0][1] = split;
    part[1][0] = split, part[1][1] = size - split;
    for (i = 0; i < 2; i++) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair[i]) < 0)
            abort();
        fcntl(pair[i][0], F_SETFL, O_NONBLOCK);
        fcntl(pair[i][1], F_SETFL, O_NONBLOCK);
        if (conn_new(srv, pair[i][0], (struct sockaddr *)&sun, sizeof(sun)) == NULL)
            abort();
    }
    /* Interleave the two peers in small slices so that their packets race. */
    for (turn = 0; turn < 64; turn++) {
        for (i = 0; i < 2; i++) {
            size_t n = part[i][1] < 512 ? part[i][1] : 512;

            if (n > 0) {
                ssize_t w = write(pair[i][1], data + part[i][0], n);

                if (w > 0) {
                    part[i][0] += (size_t)w;
                    part[i][1] -= (size_t)w;
                }
            }
            drain(pair[i][1]);
        }
        event_base_loop(base, EVLOOP_NONBLOCK);
        if (part[0][1] == 0 && part[1][1] == 0)
            break;
    }
    for (i = 0; i < 2; i++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        drain(pair[i][1]);
        close(pair[i][1]);
    }
    for (turn = 0; turn < 16 && (srv->nconns > 0 || !TAILQ_EMPTY(&srv->closing)); turn++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    if (srv->nconns != 0 && !srv->stopped)
        abort(); /* a connection outlived its peer */
    if (srv->stopped || srv->draining) {
        /*
         * A shutdown command ends the server as it ends dsjobd, which then
         * accepts nothing more; the next input gets a new one.
         */
        dsjob_server_free(server);
        event_base_free(base);
        slot[tiny].server = NULL;
        slot[tiny].base = NULL;
    }
    return 0;
}
