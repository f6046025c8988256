/*
 * What a commit means, for the server above storage.c: a background submit
 * on a durable store is answered only after the batch holding it commits,
 * and a job's end shows only once it is durable. This module keeps the
 * answers owed to each connection until then (struct ack, the waiters it
 * gives storage), in the order the client asked: once a connection has a
 * background submit waiting for a commit, its later requests other than
 * background submits wait too (conn.c asks durable_must_wait). It also
 * puts the store's rows back into the queue at start (replay) and makes
 * jobs of them (job_from_store).
 */
#ifndef DSJOB_SERVER_DURABLE_H
#define DSJOB_SERVER_DURABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "storage.h"

struct conn;
struct job;
struct srv;
struct store_job;

/* One answer owed to a connection once the batch holding it commits. */
struct ack {
    struct storage_wait w;      /* storage's part (first): w.op is the add of a new job */
    struct job *job;            /* referenced; JOB_CREATED names it; NULL for a hold */
    struct conn *client;        /* who to answer, or NULL once it has gone */
    char *error;                /* "CODE\0text" to send instead of JOB_CREATED, or with
                                   packet its arguments' bytes (behind the ack, in its
                                   allocation), or NULL */
    size_t error_len;           /* its length */
    uint32_t packet;            /* durable_tell's packet type, or 0 */
    unsigned nargs;             /* its arguments: 1 or 2 */
    size_t split;               /* the first one's length */
    bool end;                   /* durable_end's: counted in nends, in nacks only if holds */
    bool holds;                 /* an end's: its worker ended another job meanwhile and
                                   waits for this one's commit; durable_hold's: always.
                                   Counted in the client's nholds */
    bool text;                  /* durable_reply's: error is an admin line to send */
    bool from_op;               /* durable_reply_op's: w.op's text is the reply, error holds
                                   the one sent if it has none, then a tail sent after it */
    TAILQ_ENTRY(ack) by_client; /* in the client's list */
};
TAILQ_HEAD(ack_list, ack);

/*
 * durable_open opens the store (storage_open) with this module's
 * continuations, puts back what it holds, and starts the lease protocol on
 * a shared store. 0, or -1 with srv->errmsg set.
 */
int durable_open(struct srv *srv);

/* durable_close commits what is pending, answers its submitters, and closes the store. */
void durable_close(struct srv *srv);

/*
 * durable_submit answers a background submit on a durable store: j is a
 * new job (the caller's reference is taken over) or, with existing, the
 * job the submit coalesced onto. The answer (JOB_CREATED) waits for the
 * commit. On failure (out of memory) the submitter is sent an ERROR (after
 * the answers it is already owed, if memory allows) and the job is dropped
 * before it reaches the batch: nothing is stored that its client was told
 * failed. c may be NULL (a job the server submits itself): nobody is told.
 */
void durable_submit(struct srv *srv, struct conn *c, struct job *j, bool existing);

/*
 * durable_adopt answers a background submit on a durable store that
 * coalesced onto a live foreground job j, which no store holds: j becomes
 * background and is stored, and the answer (JOB_CREATED) waits for that
 * commit, so the job survives its foreground clients and a restart. On
 * out of memory the submitter is sent an ERROR and j is left as it was.
 */
void durable_adopt(struct srv *srv, struct conn *c, struct job *j);

/*
 * durable_reply sends c the admin line text (with its CRLF) once the open
 * batch, which holds the change the line answers, commits; if it fails,
 * "ERR STORE_ERROR why" instead. c's later requests wait behind it. Sent
 * at once on a store that is not durable or without memory.
 */
void durable_reply(struct srv *srv, struct conn *c, const char *text);

/*
 * durable_reply_op sends c, once the open batch commits, the text that op
 * (a batch op of a shared store, storage_batch) wrote on the writer, or
 * none if it wrote nothing, and then tail; if op or the batch failed,
 * "ERR STORE_ERROR why" instead. c's later requests wait behind it.
 */
void durable_reply_op(struct srv *srv, struct conn *c, struct store_op *op, const char *none,
                      const char *tail);

/* durable_refuse queues an ERROR for c behind the answers it is owed. */
void durable_refuse(struct srv *srv, struct conn *c, const char *code, const char *text);

/*
 * durable_hold makes worker's next request wait for the commit of the open
 * batch, which holds the end of the job it finished, so that a worker sees
 * its result durable before it is given more. Skipped if worker is closing
 * or without memory.
 */
void durable_hold(struct srv *srv, struct conn *worker);

/*
 * durable_end notes that worker's job ended in the open batch, which holds
 * that end's store change. The worker goes on at once: its next job may
 * start while the end commits. If it ends another job before then, it is
 * held (its requests wait, as behind an answer owed, but a GRAB_JOB, which
 * gets NO_JOB, and PRE_SLEEP: durable_held) until the first end has
 * committed. So a worker has at most two ends not yet durable, and
 * with two it runs nothing: a crash runs again at most two jobs of each
 * worker, and no end that an answer has shown (a settling job shows as
 * running until its commit, its clients hear of it after: durable_tell).
 * A failed commit keeps the note for the next one, as the change is tried
 * again. Without memory it holds the worker until this end is durable
 * (durable_hold). Skipped if worker is closing. With lazy, an end that
 * holds nobody does not hurry its batch (storage_wait_lazy): it commits
 * with the next waiter's batch, at the worker's next end at the latest
 * (which holds it), or after 10 ms; so ends share commits, not one each.
 */
void durable_end(struct srv *srv, struct conn *worker, bool lazy);

/*
 * durable_tell sends c a packet that tells of a stored job's end
 * (WORK_COMPLETE, WORK_FAIL or WORK_EXCEPTION to a foreground client of a
 * job that a background submit made durable) once the open batch commits:
 * the caller has put the change that settles the job in it, so the client
 * hears of the end only once it is durable, and its later requests wait
 * behind it. Without memory, or on a closing connection, it is sent at
 * once.
 */
void durable_tell(struct srv *srv, struct conn *c, uint32_t type, unsigned nargs,
                  const void *const *args, const size_t *lens);

/* durable_forget_client drops the answers owed to a connection that is closing. */
void durable_forget_client(struct conn *c);

/*
 * durable_held tells whether worker c is held (durable_end, durable_hold):
 * it may have no job until its last end has committed. Its GRAB_JOB waits
 * for that commit --store-grab-wait at most (mostly a commit comes first:
 * JOB_ASSIGN then), then is answered, as gearmand answers at once: NO_JOB.
 * A libgearman worker with a timeout gives up on a GRAB_JOB that waits past
 * it and sends another, then reads each answer as that of the next one and
 * spins GRAB_JOB, NO_JOB, PRE_SLEEP once the queue is empty. A PRE_SLEEP
 * while held (hold_slept) is taken when the hold ends (lifecycle_pre_sleep):
 * a NOOP then if there is work, so no wake-up is spent on it meanwhile.
 */
bool durable_held(const struct conn *c);

/*
 * durable_must_wait tells whether c's next request, of packet type type
 * (0 for an admin line), must wait for c's pending answers first. A
 * GRAB_JOB or PRE_SLEEP of a worker that is only held (durable_held), no
 * answer owed, waits only --store-grab-wait (a timer that resumes c).
 */
bool durable_must_wait(struct conn *c, uint32_t type);

/*
 * durable_replay puts one stored job (arg: the srv) back where it was: its
 * queue, its dead set or the kept results. 0, or -1 (memory). storage_open
 * calls it at start, storage_lease.c for what it takes of servers gone.
 */
int durable_replay(const struct store_job *sj, void *arg);

/*
 * job_from_store makes a job of a stored row: its bytes, id, order,
 * priority, run-at time, attempts and failures, status, and if it ended
 * its outcome and result; background and stored. NULL if out of memory.
 * Its function is the caller's to set (queue_add_as does).
 */
struct job *job_from_store(struct srv *srv, const struct store_job *sj);

#endif
