/*
 * The life of a job once it is in the queue: who waits for it, the worker
 * that runs it and its CAN_DO_TIMEOUT, and how it ends (done, failed,
 * cancelled, requeued, or given up after --job-retries). The packet
 * handlers (dispatch.c), the admin commands (admin.c), the store's commits
 * (durable.c), the epoch timer (srv.c) and closing connections (conn.c)
 * all end or move jobs through here, so the rules live in one place.
 *
 * Everything runs on the loop thread. Packets to other connections (results
 * to waiting clients, NOOPs to sleepers) are queued on those connections'
 * output within the same loop turn.
 */
#ifndef DSJOB_SERVER_LIFECYCLE_H
#define DSJOB_SERVER_LIFECYCLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "proto/packet.h"

struct conn;
struct func;
struct job;
struct qworker;
struct srv;

/*
 * LIFECYCLE_LOG logs job event (see log_job in log.h) of the job j at
 * level lvl, by peer (NULL if none) for why (NULL, or the server's own
 * text). The one way job events are logged; when lvl is off it compares
 * two numbers and formats nothing. Needs srv.h and job.h where it is used.
 */
#define LIFECYCLE_LOG(srv, lvl, event, peer, j, why)                                               \
    LOG_JOB(&(srv)->log, (lvl), (event), (peer), job_handle(j), (j)->func->name,                   \
            (j)->func->name_len, (why))

/*
 * lifecycle_attach makes client c wait for j's result: c is sent every
 * packet lifecycle_tell sends for j until j ends or c goes. j gets its
 * job_ext if it had none. Returns 0, or -1 if out of memory (nothing is
 * changed).
 */
int lifecycle_attach(struct conn *c, struct job *j);

/*
 * lifecycle_tell sends a response packet (its arguments copied) to every
 * client waiting for j: WORK_STATUS, WORK_DATA and the like. The waiters
 * stay attached.
 */
void lifecycle_tell(struct job *j, enum packet_type type, unsigned nargs, const void *const *args,
                    const size_t *lens);

/*
 * lifecycle_wake sends NOOP to one sleeping worker that can do j's
 * function, if one sleeps (j was just queued).
 */
void lifecycle_wake(struct job *j);

/*
 * lifecycle_arm_timeout starts the CAN_DO_TIMEOUT of timeout_ms for j,
 * which a worker has just been given (it has its job_ext). If the worker
 * has not finished j by then, j is retried as if the worker had gone. A
 * timer that cannot be made is skipped: the job then has no timeout.
 */
void lifecycle_arm_timeout(struct srv *srv, struct job *j, uint32_t timeout_ms);

/*
 * lifecycle_arm_silence starts --job-timeout for j, just given to a worker
 * that set no CAN_DO_TIMEOUT: it expires as a CAN_DO_TIMEOUT does, unless
 * lifecycle_heard restarts it first.
 */
void lifecycle_arm_silence(struct srv *srv, struct job *j);

/* lifecycle_heard: j's worker sent something about j; --job-timeout starts again. */
void lifecycle_heard(struct srv *srv, struct job *j);

/*
 * lifecycle_sleeping: worker w went to sleep (PRE_SLEEP, nothing for it):
 * the CAN_DO_TIMEOUT of each job it holds ends, as gearmand (1.1.20 and
 * 2.0) deletes the connection's timeout then; --job-timeout's stays.
 */
void lifecycle_sleeping(struct qworker *w);

/*
 * lifecycle_pre_sleep puts worker c to sleep (PRE_SLEEP): a NOOP at once
 * if work it can do waits (it came between NO_JOB and PRE_SLEEP), else
 * asleep until a job wakes it. durable.c calls it when the hold of a
 * worker that sent PRE_SLEEP while held ends (durable_held).
 */
void lifecycle_pre_sleep(struct conn *c);

/*
 * lifecycle_finish ends j: its timeout stops, its waiters are forgotten
 * (the caller has told them whatever they must hear), it is deleted from
 * the store if stored, and the queue drops it. A graceful stop that was
 * waiting for it may end. j may be freed on return.
 */
void lifecycle_finish(struct srv *srv, struct job *j);

/*
 * lifecycle_end ends j as lifecycle_finish does, with outcome (NONE, as a
 * cancel; COMPLETE, FAIL or EXCEPTION as its worker ended it or it
 * failed for good) and its bytes (a result, exception data, or the text of
 * a failure; borrowed). A background job that failed goes to its
 * function's dead set with --max-dead; one that ended otherwise, or failed
 * without a dead set, is kept with --keep-results; anything else is gone.
 * On a durable store the change commits first (storage_settle), so no
 * answer shows it ended before a restart would.
 */
void lifecycle_end(struct srv *srv, struct job *j, enum job_outcome outcome, const void *data,
                   size_t len);

/*
 * lifecycle_settled finishes what lifecycle_end began once the store has
 * committed it: j leaves the queue, or moves to the dead set or the kept
 * results.
 */
void lifecycle_settled(struct srv *srv, struct job *j);

/*
 * lifecycle_work_done ends j after its worker sent WORK_COMPLETE (data is
 * the result) or WORK_FAIL: the waiting clients are told and j ends,
 * unless it is a background job that --retry-on fail runs again.
 */
void lifecycle_work_done(struct srv *srv, struct job *j, enum packet_type type, const void *data,
                         size_t len);

/*
 * lifecycle_attempt_failed notes that an attempt of background job j
 * failed (how is a DSJOB_RETRY_* bit, text says why) and, if --retry-on
 * counts it and j has attempts left, runs it again after its backoff and
 * returns true. Otherwise it returns false and the caller ends j.
 */
bool lifecycle_attempt_failed(struct srv *srv, struct job *j, unsigned how, const void *text,
                              size_t len);

/*
 * lifecycle_warned keeps the text of a WORK_WARNING for background job j
 * (borrowed), with --max-dead: a WORK_FAIL that follows in the same attempt
 * has no text of its own, and the dead set keeps this one instead.
 */
void lifecycle_warned(struct srv *srv, struct job *j, const void *text, size_t len);

/* lifecycle_fail tells j's waiting clients WORK_FAIL and ends the job (lifecycle_finish). */
void lifecycle_fail(struct srv *srv, struct job *j);

/*
 * lifecycle_fail_as ends j as a failure whose text is why (its dead set's,
 * with --max-dead), its clients told WORK_FAIL: a job whose parent failed
 * (deps.c).
 */
void lifecycle_fail_as(struct srv *srv, struct job *j, const char *why);

/*
 * lifecycle_exception ends j after its worker sent WORK_EXCEPTION with
 * data (borrowed): waiting clients that asked for exceptions get
 * WORK_EXCEPTION, the others a clean WORK_FAIL (unlike gearmand's, which
 * has a stray NUL).
 */
void lifecycle_exception(struct srv *srv, struct job *j, const void *data, size_t len);

/*
 * lifecycle_retry takes a RUNNING job back from its worker (the worker
 * left, gave the function up, or passed its CAN_DO_TIMEOUT; why says which,
 * for the log). The job goes back to the head of its queue and a sleeper
 * is woken; or, if it was cancelled or has used its --job-retries
 * attempts, it fails; or, if it is a foreground job nobody waits for any
 * more, it is dropped. j may be freed on return.
 */
void lifecycle_retry(struct srv *srv, struct job *j, const char *why);

/*
 * lifecycle_retry_as is lifecycle_retry for an attempt that ended how (a
 * DSJOB_RETRY_* bit: a crash or a timeout): an outcome --retry-on does not
 * count fails the job at once. A background job runs again after its
 * backoff (--retry-backoff, or its function's "retry" setting).
 */
void lifecycle_retry_as(struct srv *srv, struct job *j, unsigned how, const char *why);

/*
 * lifecycle_unique_window returns the seconds j's unique key stays taken
 * once j ends (its function's "uniquefor", else --unique-for); 0 for none,
 * and for a job with no explicit unique key.
 */
uint32_t lifecycle_unique_window(const struct srv *srv, const struct job *j);

/* lifecycle_keep_replayed puts a replayed DONE job among the kept results. */
void lifecycle_keep_replayed(struct srv *srv, struct job *j);

/*
 * lifecycle_bury_replayed puts a replayed DEAD job in its function's dead
 * set, and trims the set to this run's --max-dead (0: it keeps none).
 */
void lifecycle_bury_replayed(struct srv *srv, struct job *j);

/* lifecycle_drop_ended forgets a dead or kept job, in the store too. j may be freed. */
void lifecycle_drop_ended(struct srv *srv, struct job *j);

/*
 * lifecycle_revive puts a dead job back in its queue with its attempts
 * cleared (admin "retry dead"). 0, -1 if out of memory, -2 if a live job
 * holds its unique key.
 */
int lifecycle_revive(struct srv *srv, struct job *j);

/*
 * lifecycle_expire forgets, at now (epoch seconds), the kept results older
 * than --keep-results (or their unique key's window, if longer) and the
 * dead jobs older than --dead-max-age.
 */
void lifecycle_expire(struct srv *srv, int64_t now);

/*
 * lifecycle_expire_jobs ends every waiting job whose deadline (a submit's
 * expire-in or deadline, or its function's maximum queue age) is at or
 * before now_ms (epoch ms): it is not run; it goes to its function's dead
 * set with the text "expired" (--max-dead), else it is gone, and its
 * clients hear WORK_FAIL. The tick calls it, and every grab before it
 * picks a job, so a job past its deadline is never handed to a worker.
 */
void lifecycle_expire_jobs(struct srv *srv, int64_t now_ms);

/*
 * lifecycle_give_back retries (lifecycle_retry) every job of f that worker
 * connection c holds, or every job it holds if f is NULL: c sent CANT_DO or
 * RESET_ABILITIES, as gearmand does it.
 */
void lifecycle_give_back(struct conn *c, const struct func *f, const char *why);

/*
 * lifecycle_detach undoes everything c took part in, as when it
 * disconnects: the store answers it is owed are dropped, its foreground
 * waits end (a queued job nobody waits for is dropped), its abilities go,
 * and the jobs it was running are retried.
 */
void lifecycle_detach(struct conn *c);

/*
 * lifecycle_cancel tells j's waiting clients WORK_FAIL and ends j, unless
 * it is running: then it is marked cancelled and loses its waiters, so
 * that what its worker reports later reaches nobody and it is never run
 * again.
 */
void lifecycle_cancel(struct srv *srv, struct job *j);

#endif
