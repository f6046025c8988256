/*
 * Binary packet handlers: a table from packet type to handler, with the
 * argument checks done once, in dispatch_packet, before any handler runs.
 */
#ifndef DSJOB_SERVER_DISPATCH_H
#define DSJOB_SERVER_DISPATCH_H

#include "proto/packet.h"

struct conn;
struct job;

/* dispatch_packet acts on one decoded packet from c. */
void dispatch_packet(struct conn *c, const struct packet *p);

/*
 * dispatch_detach undoes everything c took part in, as when it disconnects:
 * its foreground waits end (a queued job nobody waits for is dropped), its
 * abilities go, and the jobs it was running are requeued or, past
 * --job-retries, failed.
 */
void dispatch_detach(struct conn *c);

/*
 * dispatch_cancel removes a job that is queued or scheduled, telling its
 * waiting clients WORK_FAIL; a running job is marked so that its result is
 * dropped. Returns 0, or -1 if the job is running and was only marked.
 */
int dispatch_cancel(struct conn *by, struct job *j);

/* dispatch_wake sends NOOP to one sleeping worker of j's function, if any. */
void dispatch_wake(struct job *j);

#endif
