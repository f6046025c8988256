/*
 * The server's side of persistence: it opens the configured store, replays
 * it into the queue at start, and makes the JOB_CREATED promise hold. A
 * background submit on a durable store is answered only after the batch
 * holding it commits; every background submit of a loop turn (up to
 * --store-batch) shares one commit, and so do the deletions of finished
 * jobs. Answers to one connection keep their order: once a connection has
 * a background submit waiting for a commit, its later requests other than
 * background submits wait too (conn.c asks storage_must_wait).
 */
#ifndef DSJOB_SERVER_STORAGE_H
#define DSJOB_SERVER_STORAGE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "store.h"

struct conn;
struct event;
struct job;
struct srv;

/* One answer owed to a submitter once the current batch commits. */
struct ack {
    struct job *job;              /* referenced; JOB_CREATED names it */
    struct conn *client;          /* who to answer, or NULL once it has gone */
    char *error;                  /* "CODE\0text" to send instead of JOB_CREATED, or NULL */
    size_t error_len;             /* its length */
    TAILQ_ENTRY(ack) link;        /* in storage.acks, in submission order */
    TAILQ_ENTRY(ack) by_client;   /* in the client's list */
};
TAILQ_HEAD(ack_list, ack);

struct storage {
    const struct store_ops *ops;  /* the backend; store_null_ops when not durable */
    struct store *st;             /* its state */
    struct ack_list acks;         /* answers waiting for the next commit */
    unsigned nacks;               /* entries in acks */
    unsigned batch_max;           /* --store-batch: commit at once past this many */
    unsigned interval_ms;         /* --store-commit-interval; 0: at the end of the loop turn */
    struct event *flush_ev;       /* commits the batch */
    bool scheduled;               /* flush_ev is pending */
    bool durable;                 /* a backend other than none */
    uint64_t commits;             /* batches committed */
    uint64_t failures;            /* batches that failed */
};

/* storage_open opens and replays the configured store. 0, or -1 with srv->errmsg set. */
int storage_open(struct srv *srv);

/* storage_close commits what is pending, answers its submitters, and closes the store. */
void storage_close(struct srv *srv);

/*
 * storage_submit answers a background submit on a durable store: j is a
 * new job (the caller's reference is taken over) or, with existing, the
 * job the submit coalesced onto. The answer (JOB_CREATED) waits for the
 * commit. On failure the submitter is sent an ERROR (after the answers it
 * is already owed) and the job is dropped.
 */
void storage_submit(struct srv *srv, struct conn *c, struct job *j, bool existing);

/* storage_refuse queues an ERROR for c behind the answers it is owed. */
void storage_refuse(struct srv *srv, struct conn *c, const char *code, const char *text);

/* storage_remove deletes a finished stored job in the next batch. */
void storage_remove(struct srv *srv, struct job *j);

/* storage_flush commits the batch now and sends what it owed. */
void storage_flush(struct srv *srv);

/* storage_forget_client drops the answers owed to a connection that is closing. */
void storage_forget_client(struct srv *srv, struct conn *c);

/*
 * storage_must_wait tells whether c's next request, of packet type type
 * (0 for an admin line), must wait for c's pending answers first.
 */
bool storage_must_wait(const struct conn *c, uint32_t type);

#endif
