/*
 * Dependencies between jobs: a job submitted after OPTION_REQ
 * "after=H1,H2,..." is held (JOB_PENDING with job->held) until every job
 * it names has succeeded; a parent that fails for good fails, cancels or
 * releases it, as "after-fail=" said. The edges are kept in the store
 * (sqlite) and move in the batch of the parent's end, so a restart never
 * runs a child early nor loses one. doc/protocol.md, "Dependencies".
 */
#ifndef DSJOB_SERVER_DEPS_H
#define DSJOB_SERVER_DEPS_H

#include <stdbool.h>
#include <stddef.h>

#include "job.h"
#include "store.h"

struct conn;
struct srv;
struct deps_child;

/* What a child does when a parent fails for good (dead, failed, cancelled, expired). */
enum deps_policy {
    DEPS_FAIL,   /* it fails too, "parent H failed" (the default) */
    DEPS_CANCEL, /* it is cancelled: gone, nothing kept */
    DEPS_RUN,    /* that parent counts as done */
};

/* deps_policy_name names a policy ("fail", "cancel", "run"); static text. */
const char *deps_policy_name(int policy);

/* deps_policy_named returns the policy named by len bytes of name, or -1. */
int deps_policy_named(const char *name, size_t len);

/*
 * deps_option takes an OPTION_REQ of c's (len bytes of opt): "after=LIST"
 * (handles, comma separated; empty clears) or "after-fail=POLICY", both
 * for c's next submit. 1: taken; 0: not one of these; -1: a bad value
 * (out of memory included).
 */
int deps_option(struct conn *c, const char *opt, size_t len);

/*
 * deps_prepare reads and clears c's after= list for the submit being
 * made. 0 with *out NULL: nothing to wait for (no list, or every parent
 * has already succeeded); 0 with *out set: the new job waits, hand *out
 * to deps_attach (or deps_discard); -1: refuse the submit with the text
 * (len bytes of room) written to why (an unknown handle, a parent that
 * failed for good, a store that keeps no dependencies, --max-after).
 */
int deps_prepare(struct srv *srv, struct conn *c, struct deps_child **out, char *why, size_t len);

/*
 * deps_attach makes j (indexed, JOB_PENDING, stored or not) wait as d
 * says; takes d. On a store that keeps dependencies its edges go in the
 * open batch, after j's add.
 */
void deps_attach(struct srv *srv, struct deps_child *d, struct job *j);

/* deps_discard frees a d deps_attach did not take; NULL is a no-op. */
void deps_discard(struct deps_child *d);

/*
 * deps_committed: held job j's add has committed (durable.c): it stays
 * JOB_PENDING until released. true if j is held; false: queue it.
 */
bool deps_committed(struct srv *srv, struct job *j);

/*
 * deps_ended: j ends (lifecycle.c's end, before its settle goes in the
 * batch). As a child it stops waiting; as a parent its outcome goes in
 * the same batch as its end, and its children move once that commits (at
 * once without a store).
 */
void deps_ended(struct srv *srv, struct job *j, enum job_outcome outcome);

/* deps_show prints, for admin "show job", what held j waits for. */
void deps_show(struct conn *c, const struct job *j);

/*
 * deps_show_stored answers admin "show job HANDLE" (len bytes), or with
 * func (func_len bytes, not NULL) "show job unique FUNC UNIQUE" (handle
 * then the unique key), for c about a job this server does not hold, on a
 * shared store (storage_deps_shared): a child held in the store is shown,
 * with its parents; another is ERR UNKNOWN_JOB. The answer goes once the
 * store has read it.
 */
void deps_show_stored(struct conn *c, const char *func, size_t func_len, const char *handle,
                      size_t len);

/* deps_replay_edge is the store's replay of an edge, before the jobs (arg: the srv). */
int deps_replay_edge(const struct store_dep *sd, void *arg);

/* deps_replay_held: replayed live job j has stored edges: it is held (marked so). */
bool deps_replay_held(struct srv *srv, struct job *j);

/*
 * deps_replayed, after the replay: each replayed child waits for parents
 * still live, runs if all succeeded, and fails (or is cancelled, or runs)
 * for a parent that failed or was lost in the restart (a foreground one).
 */
void deps_replayed(struct srv *srv);

/* deps_held_count says how many jobs are held. */
unsigned deps_held_count(const struct srv *srv);

/* deps_close frees what deps keeps (after the store closed, before the queue goes). */
void deps_close(struct srv *srv);

#endif
