/*
 * Batches: a named group of background jobs. A client opens a batch (the
 * admin line "batch open ID [on-complete=FUNC] [on-success=FUNC]"), joins
 * its later background submits to it (OPTION_REQ "batch=ID"), and closes
 * it ("batch close ID"). Once it is closed and every job in it has ended,
 * the server submits the on_complete job, and if every one succeeded the
 * on_success job, each once, with the batch's summary (JSON) as payload
 * and the unique key "batch:ID:complete" or "batch:ID:success". The
 * counters move in the commit of the member's end; a callback's "fired"
 * flag in the commit of the callback job's add (sqlite), so a crash
 * neither loses nor doubles a callback. Without a store they live in
 * memory; memcached and postgres keep none, and batches are refused.
 */
#ifndef DSJOB_SERVER_BATCH_H
#define DSJOB_SERVER_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "store.h"

struct conn;
struct job;
struct srv;

#define BATCH_ID_MAX 64       /* bytes of a batch's id: [A-Za-z0-9_.:-] */
#define BATCH_FAILED_MAX 1000 /* failed handles a batch lists; the rest are counted */

/* What a batch has counted; the plain data of batch_count_end and batch_due. */
struct batch_counts {
    uint64_t total;      /* jobs that joined */
    uint64_t done;       /* ... that ended with WORK_COMPLETE */
    uint64_t failed;     /* ... that ended otherwise and are gone (failed, cancelled, expired) */
    uint64_t dead;       /* ... that went to the dead set */
    bool closed;         /* takes no more jobs */
    bool fired_complete; /* its on_complete job was submitted */
    bool fired_success;  /* its on_success job was submitted */
};

/* Callbacks due, as batch_due says them. */
enum batch_fire {
    BATCH_FIRE_COMPLETE = 1 << 0, /* the on_complete job */
    BATCH_FIRE_SUCCESS = 1 << 1,  /* the on_success job */
};

/* batch_pending is the number of bc's jobs that have not ended. */
uint64_t batch_pending(const struct batch_counts *bc);

/*
 * batch_count_end counts the end of one of bc's jobs: outcome is an enum
 * job_outcome (JOB_OUTCOME_DEAD: the dead set). Pure.
 */
void batch_count_end(struct batch_counts *bc, unsigned outcome);

/*
 * batch_due says which callbacks (enum batch_fire) are due and not fired:
 * closed, nothing pending; success only if every job completed. Pure.
 */
unsigned batch_due(const struct batch_counts *bc, bool has_complete, bool has_success);

/* batch_init makes srv's batches (before durable_open, which replays them). -1: memory. */
int batch_init(struct srv *srv);

/*
 * batch_replayed is called after the store's replay: it counts the
 * members found live, and fires what is due and was not fired.
 */
void batch_replayed(struct srv *srv);

/* batch_close frees the batches; safe if batch_init was not called. */
void batch_close(struct srv *srv);

/* The store's replay hooks (durable.c's struct storage_hooks), arg the srv. */
int batch_replay_row(const struct store_batch *sb, void *arg);
int batch_replay_member(const char *id, size_t id_len, uint64_t job_id, void *arg);

/* batch_replay_job attaches replayed job j to its batch, if a stored member row names it. */
void batch_replay_job(struct srv *srv, struct job *j);

/*
 * batch_join makes new background job j (not yet queued nor stored) a
 * member of batch id (len bytes): its id goes in j's ext, so the job's
 * store add keeps the membership. 0; else -1 with a code and a text for
 * the submitter in code and why (UNKNOWN_BATCH, BATCH_CLOSED, memory).
 */
int batch_join(struct srv *srv, const char *id, size_t len, struct job *j, const char **code,
               char *why, size_t whylen);

/*
 * batch_ended is lifecycle.c's hook at the end of job j (outcome: enum
 * job_outcome, JOB_OUTCOME_DEAD for the dead set), before its end goes in
 * the open batch: a member is counted in the same commit; a refused
 * callback job fires again.
 */
void batch_ended(struct srv *srv, struct job *j, unsigned outcome);

/*
 * batch_option runs OPTION_REQ "batch=ID" (value, len bytes; empty
 * clears) for c: the id is kept, and looked up at each submit (which is
 * refused if the batch is unknown or closed). 0; else -1 (a bad id) with
 * why (at most whylen bytes) for an ERROR.
 */
int batch_option(struct conn *c, const char *value, size_t len, char *why, size_t whylen);

/*
 * batch_admin runs the admin line "batch ..." (len bytes, without its
 * newline) for c and writes the answer. "drop" needs c->admin_ok,
 * checked by the caller (batch_admin_changes).
 */
void batch_admin(struct conn *c, const char *line, size_t len);

/* batch_admin_changes says whether admin line is a "batch" that needs an admin peer (drop). */
bool batch_admin_changes(const char *line, size_t len);

/* batch_id_ok says whether id (len bytes) is a batch's id: 1 to BATCH_ID_MAX of [A-Za-z0-9_.:-]. */
bool batch_id_ok(const char *id, size_t len);

/* batch_json is the batches as a JSON array (GET /api/batches), or NULL (memory). */
json_t *batch_json(struct srv *srv);

/*
 * batch_json_one is batch id (len bytes) as one object of batch_json's
 * array; NULL if the server holds no such batch (or out of memory).
 */
json_t *batch_json_one(struct srv *srv, const char *id, size_t len);

/*
 * batch_shared_read puts in the open batch the read of a shared store's
 * batches (storage_batches_shared): every one (id NULL), or batch id (len
 * bytes). The op, whose text batch_shared_json reads once its batch is
 * done; NULL if out of memory. The caller waits for it (storage_wait with
 * w.op the op).
 */
struct store_op *batch_shared_read(struct srv *srv, const char *id, size_t len);

/* batch_shared_json is what such an op read, as batch_json's array; NULL (memory). */
json_t *batch_shared_json(const struct store_op *op);

/* batch_count is the number of batches the server holds. */
unsigned batch_count(const struct srv *srv);

#endif
