/*
 * The lease protocol of a store several servers share (postgres): which
 * ready jobs this server takes from the shared table, and when (see
 * storage_lease.c). Its state is in struct storage; a no-op on other
 * stores.
 */
#ifndef DSJOB_SERVER_STORAGE_LEASE_H
#define DSJOB_SERVER_STORAGE_LEASE_H

#include <stdbool.h>
#include <stdint.h>

struct job;
struct qworker;
struct srv;

/*
 * storage_lease_open starts the protocol on a shared store, once
 * storage_open has opened it: its timers and the notifier thread. 0, or
 * -1 with srv->errmsg set.
 */
int storage_lease_open(struct srv *srv);

/* storage_lease_close stops it (before storage_close); a no-op if it never started. */
void storage_lease_close(struct srv *srv);

/*
 * storage_want_lease asks, on a shared store, for a lease op in the next
 * batch: ready jobs for the functions whose workers here have too few
 * (a worker grabbed, found nothing, went to sleep or said CAN_DO; another
 * server said NOTIFY; the poll timer). A no-op on other stores.
 */
void storage_want_lease(struct srv *srv);

/*
 * storage_lease_runs_here says whether a new job j runs here (under this
 * server's lease from its insert): a worker here can do it now and its
 * function does not hold its share already. Otherwise it is left to
 * whichever server has a worker free.
 */
bool storage_lease_runs_here(struct srv *srv, const struct job *j);

/*
 * storage_lease_fresh says whether the jobs queued here may be handed to
 * a worker: on a shared store, whether the last renewal that committed
 * began less than two thirds of --pg-lease ago, so that no lease of this
 * server's has run out and no other server can have taken (and ended) a
 * queued job. When not, it asks for a renewal; the renewal drops the
 * jobs another server took and wakes the workers for the rest. Always
 * true on other stores.
 */
bool storage_lease_fresh(struct srv *srv);

/*
 * storage_lease_grab is queue_grab for worker w, of the jobs that may be
 * handed out now: all of them while storage_lease_fresh, else only those
 * not stored (foreground jobs need no lease: a PostgreSQL outage past
 * two thirds of --pg-lease holds the stored jobs, not these).
 * storage_lease_has_work is queue_has_work over the same jobs.
 */
struct job *storage_lease_grab(struct srv *srv, struct qworker *w, int64_t now);
bool storage_lease_has_work(struct srv *srv, const struct qworker *w);

#endif
