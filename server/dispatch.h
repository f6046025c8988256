/*
 * Binary packet handlers: a table from packet type to handler, with the
 * argument checks done once, in dispatch_packet, before any handler runs.
 */
#ifndef DSJOB_SERVER_DISPATCH_H
#define DSJOB_SERVER_DISPATCH_H

#include "proto/packet.h"

struct conn;
struct job;
struct srv;

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
 * dispatch_cancel tells a job's waiting clients WORK_FAIL and removes the
 * job if it is queued or scheduled; a running job is marked cancelled, so
 * that what its worker reports later reaches nobody.
 */
void dispatch_cancel(struct srv *srv, struct job *j);

/* dispatch_fail tells j's waiting clients WORK_FAIL and ends the job. */
void dispatch_fail(struct srv *srv, struct job *j);

/* dispatch_wake sends NOOP to one sleeping worker of j's function, if any. */
void dispatch_wake(struct job *j);

#endif
