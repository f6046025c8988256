/*
 * Batches (see batch.h). Each batch is a struct in a hash by id, with
 * its counters; a member job carries the batch's id in its ext (so the
 * store's add of the job writes the member row in the same op), and its
 * end reaches batch_ended from lifecycle.c before the end's own store
 * op, so the counters' row and the job's end share a commit. A batch's
 * row is written whole (STORE_BATCH_SET); the ends of one loop turn
 * rewrite the op still in the open batch instead of adding one each.
 *
 * Callbacks fire from an event, after the end that made them due has
 * put its own store op in: their "fired" flag and the callback job's add
 * then go in one commit, in that order. A refused callback job (its
 * commit failed) unsets the flag and fires again; one that found no
 * memory leaves the flag unset and fire_ev armed as a timer, so it fires
 * once even if no end comes after it. At start, the rows are
 * read before the jobs; a member row whose job replays live counts as
 * pending, and the counters are made to agree with them.
 */
#include "config.h"
#include "batch.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "clock.h"
#include "conn.h"
#include "durable.h"
#include "hmap.h"
#include "job.h"
#include "lifecycle.h"
#include "queue.h"
#include "srv.h"
#include "stats.h"
#include "storage.h"

#define BATCH_FUNC_MAX 512 /* bytes of a callback's function name */
#define BATCH_OP_ROOM 2048 /* spare bytes in a batch's store op, for handles added in place */
#define BATCH_KEY_MAX (6 + BATCH_ID_MAX + 9) /* "batch:ID:complete" */
/*
 * A callback that found no memory is tried again this soon. Not an option:
 * it bounds nothing a user sizes (no queue, no wait a client sees; an end
 * or a restart fires the callback sooner), only how often a server out of
 * memory tries again, like storage.c's STORAGE_RETRY_SECS for a failed
 * commit; any second-scale value does.
 */
#define BATCH_RETRY_SECS 1

struct jbatch {
    struct hnode node;                      /* in struct batches' map, by id */
    TAILQ_ENTRY(jbatch) link;               /* in struct batches' list, oldest first */
    char id[BATCH_ID_MAX + 1];              /* NUL-terminated */
    size_t id_len;                          /* bytes of id */
    char *on_complete;                      /* owned: its on_complete function, "" none */
    char *on_success;                       /* owned: its on_success function, "" none */
    struct batch_counts c;                  /* its counters and flags */
    char *failed;                           /* owned: failed handles, each ended by '\n', or NULL */
    size_t failed_len;                      /* bytes in failed */
    size_t failed_cap;                      /* room in failed */
    uint64_t nlisted;                       /* handles in failed (at most BATCH_FAILED_MAX) */
    int64_t created;                        /* epoch seconds it was opened */
    struct store_op *op;                    /* its SET op in the open batch, if op_gen is current */
    uint64_t op_gen;                        /* storage_open_gen when op was added */
    uint64_t replayed;                      /* members found live at replay */
    char cb_handle[2][JOB_HANDLE_MAX + 24]; /* its callback jobs' handles here, "" none */
};
TAILQ_HEAD(jbatch_list, jbatch);

/* A member row read at start, until its job replays. */
struct member {
    uint64_t job_id;  /* the job */
    struct jbatch *b; /* its batch, or NULL if the batch row is gone */
};

struct batches {
    struct hmap map;         /* struct jbatch by id */
    struct jbatch_list list; /* oldest first */
    unsigned n;              /* batches held */
    struct event *fire_ev;   /* fires what is due, after the turn's ends went in */
    struct member *members;  /* at start: the member rows, by job id */
    size_t nmembers;         /* entries in members */
    size_t members_cap;      /* room in members */
    uint64_t fires;          /* callback jobs submitted */
};

/* --- pure counting ---------------------------------------------------------------------- */

uint64_t
batch_pending(const struct batch_counts *bc)
{
    uint64_t ended = bc->done + bc->failed + bc->dead;

    return bc->total > ended ? bc->total - ended : 0;
}

void
batch_count_end(struct batch_counts *bc, unsigned outcome)
{
    if (outcome == JOB_OUTCOME_COMPLETE)
        bc->done++;
    else if (outcome == JOB_OUTCOME_DEAD)
        bc->dead++;
    else
        bc->failed++;
}

unsigned
batch_due(const struct batch_counts *bc, bool has_complete, bool has_success)
{
    unsigned due = 0;

    if (!bc->closed || batch_pending(bc) > 0)
        return 0;
    if (has_complete && !bc->fired_complete)
        due |= BATCH_FIRE_COMPLETE;
    if (has_success && !bc->fired_success && bc->done == bc->total)
        due |= BATCH_FIRE_SUCCESS;
    return due;
}

/* --- the table ------------------------------------------------------------------------- */

static const void *
batch_key(const struct hnode *node)
{
    return ((const struct jbatch *)node)->id;
}

static struct jbatch *
find(struct srv *srv, const char *id, size_t len)
{
    if (srv->batches == NULL)
        return NULL;
    return (struct jbatch *)hmap_find(&srv->batches->map, id, len);
}

static bool
id_ok(const char *id, size_t len)
{
    size_t i;

    if (len == 0 || len > BATCH_ID_MAX)
        return false;
    for (i = 0; i < len; i++) {
        char ch = id[i];

        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == ':' || ch == '-'))
            return false;
    }
    return true;
}

static bool
func_ok(const char *f, size_t len)
{
    size_t i;

    if (len > BATCH_FUNC_MAX)
        return false;
    for (i = 0; i < len; i++)
        if ((unsigned char)f[i] <= ' ' || f[i] == 0x7f)
            return false;
    return true;
}

static void
jbatch_free(struct jbatch *b)
{
    if (b == NULL)
        return;
    free(b->on_complete);
    free(b->on_success);
    free(b->failed);
    free(b);
}

static struct jbatch *
jbatch_new(const char *id, size_t id_len, const char *oc, size_t oc_len, const char *os,
           size_t os_len)
{
    struct jbatch *b = calloc(1, sizeof(*b));

    if (b == NULL)
        return NULL;
    memcpy(b->id, id, id_len);
    b->id_len = id_len;
    b->on_complete = strndup(oc, oc_len);
    b->on_success = strndup(os, os_len);
    if (b->on_complete == NULL || b->on_success == NULL) {
        jbatch_free(b);
        return NULL;
    }
    return b;
}

static int
insert(struct srv *srv, struct jbatch *b)
{
    if (hmap_insert(&srv->batches->map, &b->node, b->id, b->id_len) < 0)
        return -1;
    TAILQ_INSERT_TAIL(&srv->batches->list, b, link);
    srv->batches->n++;
    return 0;
}

/* b is dropped: its live members are no member of a batch opened later under its id. */
static void
disown(struct srv *srv, const struct jbatch *b)
{
    size_t bucket = 0;
    struct hnode *n;

    for (n = hmap_next(&srv->queue.jobs, NULL, &bucket); n != NULL;
         n = hmap_next(&srv->queue.jobs, n, &bucket)) {
        struct job *j = (struct job *)((char *)n - offsetof(struct job, by_handle));

        if (j->ext != NULL && j->ext->batch != NULL && strcmp(j->ext->batch, b->id) == 0) {
            free(j->ext->batch);
            j->ext->batch = NULL;
        }
    }
}

static void
forget(struct srv *srv, struct jbatch *b)
{
    hmap_remove(&srv->batches->map, &b->node);
    TAILQ_REMOVE(&srv->batches->list, b, link);
    srv->batches->n--;
    jbatch_free(b);
}

/* Note a failed member's handle, up to BATCH_FAILED_MAX of them. */
static void
list_failed(struct jbatch *b, const char *handle, size_t len)
{
    if (b->nlisted >= BATCH_FAILED_MAX)
        return;
    if (b->failed_len + len + 1 > b->failed_cap) {
        size_t cap = b->failed_cap ? b->failed_cap * 2 : 256;
        char *p;

        while (cap < b->failed_len + len + 1)
            cap *= 2;
        p = realloc(b->failed, cap);
        if (p == NULL)
            return; /* counted, not listed */
        b->failed = p;
        b->failed_cap = cap;
    }
    memcpy(b->failed + b->failed_len, handle, len);
    b->failed[b->failed_len + len] = '\n';
    b->failed_len += len + 1;
    b->nlisted++;
}

/* --- the store -------------------------------------------------------------------------- */

static bool
durable(const struct srv *srv)
{
    return srv->storage.durable;
}

static void
to_store(const struct jbatch *b, struct store_batch *sb)
{
    memset(sb, 0, sizeof(*sb));
    sb->id = b->id;
    sb->id_len = b->id_len;
    sb->on_complete = b->on_complete;
    sb->on_complete_len = strlen(b->on_complete);
    sb->on_success = b->on_success;
    sb->on_success_len = strlen(b->on_success);
    sb->failed = b->failed;
    sb->failed_len = b->failed_len;
    sb->total = b->c.total;
    sb->done = b->c.done;
    sb->failed_n = b->c.failed;
    sb->dead = b->c.dead;
    sb->closed = b->c.closed;
    sb->fired_complete = b->c.fired_complete;
    sb->fired_success = b->c.fired_success;
    sb->created = b->created;
}

static bool store_set(struct srv *srv, struct jbatch *b);

/* A SET op's continuation: it is no longer in the open batch; a failed one is written again. */
static void
set_done(struct srv *srv, struct store_op *op, bool ok)
{
    struct jbatch *b = find(srv, op->sb.id, op->sb.id_len);

    if (b == NULL)
        return; /* dropped meanwhile: its DELETE went after this op */
    if (b->op == op)
        b->op = NULL;
    if (!ok)
        store_set(srv, b); /* its latest state, with the ends tried again */
}

/*
 * Put b's row, as it is now, in the open batch: the op already there if it
 * fits. False if out of memory for it (logged).
 */
static bool
store_set(struct srv *srv, struct jbatch *b)
{
    struct store_batch sb;

    if (!durable(srv))
        return true;
    to_store(b, &sb);
    if (b->op != NULL && b->op_gen == storage_open_gen(srv) && storage_batch_redo(b->op, &sb))
        return true;
    b->op = storage_batch(srv, STORE_BATCH_SET, &sb, BATCH_OP_ROOM, set_done);
    b->op_gen = storage_open_gen(srv);
    if (b->op == NULL)
        log_err(&srv->log, "batch %s: out of memory to store it: a restart may lose its counts",
                b->id);
    return b->op != NULL;
}

/* A DELETE's continuation: a failed one goes again, unless the id was opened anew since. */
static void
deleted_done(struct srv *srv, struct store_op *op, bool ok)
{
    if (!ok && find(srv, op->sb.id, op->sb.id_len) == NULL &&
        storage_batch(srv, STORE_BATCH_DELETE, &op->sb, 0, deleted_done) == NULL)
        log_err(&srv->log, "batch %.*s: out of memory to delete it: it comes back after a restart",
                (int)op->sb.id_len, op->sb.id);
}

/* --- firing ----------------------------------------------------------------------------- */

static void
arm_fire(struct srv *srv)
{
    if (srv->batches != NULL && srv->batches->fire_ev != NULL)
        event_active(srv->batches->fire_ev, EV_TIMEOUT, 0);
}

/* b's summary, the callback's payload (JSON); NULL if out of memory. Caller frees. */
static char *
summary(const struct jbatch *b, const char *which)
{
    json_t *handles = json_array(), *o;
    const char *p = b->failed, *end = b->failed + b->failed_len;
    char *text;

    if (handles == NULL)
        return NULL;
    while (p != NULL && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));

        if (nl == NULL)
            break;
        json_array_append_new(handles, json_stringn(p, (size_t)(nl - p)));
        p = nl + 1;
    }
    o = json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:o,s:I}", "batch", b->id, "callback", which, "total",
                  (json_int_t)b->c.total, "done", (json_int_t)b->c.done, "failed",
                  (json_int_t)b->c.failed, "dead", (json_int_t)b->c.dead, "failed_handles", handles,
                  "failed_handles_omitted", (json_int_t)(b->c.failed + b->c.dead - b->nlisted));
    if (o == NULL)
        return NULL;
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return text;
}

/*
 * Make the callback job of b (which: 0 complete, 1 success): a background
 * job as dispatch.c's submit makes one, past the queue's limits (the
 * batch promised it). NULL if out of memory; *coalesced if its key is
 * already live (fired before).
 */
static struct job *
callback_job(struct srv *srv, struct jbatch *b, int which, bool *coalesced)
{
    const char *fn = which == 0 ? b->on_complete : b->on_success;
    char key[BATCH_KEY_MAX + 1], *handle;
    size_t klen = (size_t)snprintf(key, sizeof(key), "batch:%s:%s", b->id,
                                   which == 0 ? "complete" : "success");
    struct func *f = queue_func(&srv->queue, fn, strlen(fn), true);
    struct job *j;
    char *payload;
    int n;

    *coalesced = false;
    if (f == NULL)
        return NULL;
    if ((j = queue_find_unique(f, key, klen)) != NULL) {
        *coalesced = true;
        snprintf(b->cb_handle[which], sizeof(b->cb_handle[which]), "%s", job_handle(j));
        return NULL;
    }
    /* Through storage's allocator: a test's seam fails it as "callback". */
    handle = storage_alloc(srv, "callback", JOB_HANDLE_MAX + 24);
    payload = handle != NULL ? summary(b, which == 0 ? "complete" : "success") : NULL;
    if (payload == NULL) {
        free(handle);
        return NULL;
    }
    n = job_handle_format(handle, JOB_HANDLE_MAX + 24, srv->handle_prefix, srv->next_job_id);
    j = job_new(handle, (size_t)n, key, klen, NULL, 0, payload, strlen(payload));
    free(payload);
    if (j == NULL || job_set_when(j, 0) < 0) {
        job_unref(j);
        free(handle);
        return NULL;
    }
    j->prio = JOB_PRIO_NORMAL;
    j->background = true;
    j->id = srv->next_job_id;
    j->seq = srv->next_seq++;
    j->func = f;
    f->stats.submitted++;
    stats_queued(srv, j);
    snprintf(b->cb_handle[which], sizeof(b->cb_handle[which]), "%s", handle);
    free(handle);
    return j;
}

/* Fire b's callback which (0 complete, 1 success): the flag, then the job, in one commit. */
static void
fire_one(struct srv *srv, struct jbatch *b, int which)
{
    bool coalesced;
    struct job *j = callback_job(srv, b, which, &coalesced);

    if (j == NULL && !coalesced) {
        unsigned ms =
            srv->storage.seam.retry_ms > 0 ? srv->storage.seam.retry_ms : BATCH_RETRY_SECS * 1000;
        struct timeval retry = {ms / 1000, (ms % 1000) * 1000};

        /* Its flag is not set: this timer, an end or a restart fires it, once. */
        log_err(&srv->log, "batch %s: out of memory for its %s job: tried again in %u ms", b->id,
                which == 0 ? "on_complete" : "on_success", ms);
        event_add(srv->batches->fire_ev, &retry);
        return;
    }
    if (which == 0)
        b->c.fired_complete = true;
    else
        b->c.fired_success = true;
    store_set(srv, b); /* before the add: a handover between them takes both */
    if (j == NULL)
        return;
    srv->batches->fires++;
    log_info(&srv->log, "batch %s: %s job %s submitted", b->id,
             which == 0 ? "on_complete" : "on_success", job_handle(j));
    if (durable(srv)) {
        durable_submit(srv, NULL, j, false);
        return;
    }
    if (queue_add(&srv->queue, j->func, j, clock_now()) < 0) {
        job_unref(j);
        if (which == 0)
            b->c.fired_complete = false;
        else
            b->c.fired_success = false;
        return;
    }
    srv->next_job_id++;
    LIFECYCLE_LOG(srv, DSJOB_LOG_INFO, "submitted", "batch", j, NULL);
    lifecycle_wake(j);
}

static void
fire_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *srv = arg;
    struct jbatch *b;

    (void)fd;
    (void)what;
    if (srv->batches == NULL)
        return;
    TAILQ_FOREACH (b, &srv->batches->list, link) {
        unsigned due = batch_due(&b->c, b->on_complete[0] != '\0', b->on_success[0] != '\0');

        if (due & BATCH_FIRE_COMPLETE)
            fire_one(srv, b, 0);
        if (due & BATCH_FIRE_SUCCESS)
            fire_one(srv, b, 1);
    }
}

/* --- life ------------------------------------------------------------------------------- */

int
batch_init(struct srv *srv)
{
    struct batches *bs = calloc(1, sizeof(*bs));

    if (bs == NULL)
        return -1;
    hmap_init(&bs->map, batch_key);
    TAILQ_INIT(&bs->list);
    bs->fire_ev = event_new(srv->base, -1, 0, fire_cb, srv);
    if (bs->fire_ev == NULL) {
        free(bs);
        return -1;
    }
    srv->batches = bs;
    return 0;
}

void
batch_close(struct srv *srv)
{
    struct batches *bs = srv->batches;
    struct jbatch *b;

    if (bs == NULL)
        return;
    while ((b = TAILQ_FIRST(&bs->list)) != NULL)
        forget(srv, b);
    hmap_release(&bs->map);
    if (bs->fire_ev != NULL)
        event_free(bs->fire_ev);
    free(bs->members);
    free(bs);
    srv->batches = NULL;
}

int
batch_replay_row(const struct store_batch *sb, void *arg)
{
    struct srv *srv = arg;
    struct jbatch *b;

    if (srv->batches == NULL || !id_ok(sb->id, sb->id_len) || find(srv, sb->id, sb->id_len))
        return 0; /* not ours to judge: kept as it is */
    b = jbatch_new(sb->id, sb->id_len, sb->on_complete, sb->on_complete_len, sb->on_success,
                   sb->on_success_len);
    if (b == NULL)
        return -1;
    b->c.total = sb->total;
    b->c.done = sb->done;
    b->c.failed = sb->failed_n;
    b->c.dead = sb->dead;
    b->c.closed = sb->closed;
    b->c.fired_complete = sb->fired_complete;
    b->c.fired_success = sb->fired_success;
    b->created = sb->created;
    if (sb->failed_len > 0) {
        const char *p = sb->failed, *end = sb->failed + sb->failed_len;

        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));

            if (nl == NULL)
                break;
            list_failed(b, p, (size_t)(nl - p));
            p = nl + 1;
        }
    }
    if (insert(srv, b) < 0) {
        jbatch_free(b);
        return -1;
    }
    return 0;
}

int
batch_replay_member(const char *id, size_t id_len, uint64_t job_id, void *arg)
{
    struct srv *srv = arg;
    struct batches *bs = srv->batches;

    if (bs == NULL)
        return 0;
    if (bs->nmembers == bs->members_cap) {
        size_t cap = bs->members_cap ? bs->members_cap * 2 : 64;
        struct member *m = realloc(bs->members, cap * sizeof(*m));

        if (m == NULL)
            return -1;
        bs->members = m;
        bs->members_cap = cap;
    }
    bs->members[bs->nmembers].job_id = job_id;
    bs->members[bs->nmembers].b = find(srv, id, id_len);
    bs->nmembers++;
    return 0;
}

static int
member_cmp(const void *a, const void *b)
{
    uint64_t x = ((const struct member *)a)->job_id, y = ((const struct member *)b)->job_id;

    return x < y ? -1 : x > y;
}

void
batch_replay_job(struct srv *srv, struct job *j)
{
    struct batches *bs = srv->batches;
    struct member key = {j->id, NULL}, *m;

    if (bs == NULL || bs->nmembers == 0)
        return;
    m = bsearch(&key, bs->members, bs->nmembers, sizeof(*m), member_cmp);
    if (m == NULL || m->b == NULL)
        return;
    if (j->ext != NULL && j->ext->outcome != JOB_OUTCOME_NONE)
        return; /* ended: counted when it did */
    if (job_ext(j) == NULL || (j->ext->batch = strdup(m->b->id)) == NULL) {
        log_err(&srv->log, "batch %s: out of memory for member %s: its end is not counted",
                m->b->id, job_handle(j));
        return;
    }
    m->b->replayed++;
}

void
batch_replayed(struct srv *srv)
{
    struct batches *bs = srv->batches;
    struct jbatch *b;

    if (bs == NULL)
        return;
    free(bs->members);
    bs->members = NULL;
    bs->nmembers = bs->members_cap = 0;
    TAILQ_FOREACH (b, &bs->list, link) {
        uint64_t ended = b->c.done + b->c.failed + b->c.dead;

        /*
         * The counters commit with the ends and the member rows with the
         * adds, so they agree; if a store failure made them part, the
         * jobs found are the truth.
         */
        if (b->c.total != ended + b->replayed) {
            log_warn(&srv->log,
                     "batch %s: %" PRIu64 " members still to run, its counters said %" PRIu64
                     ": counted as found",
                     b->id, b->replayed, batch_pending(&b->c));
            b->c.total = ended + b->replayed;
            store_set(srv, b);
        }
        b->replayed = 0;
    }
    if (bs->n > 0)
        log_notice(&srv->log, "store: replayed %u batches", bs->n);
    arm_fire(srv);
}

/* --- members ---------------------------------------------------------------------------- */

int
batch_join(struct srv *srv, const char *id, size_t len, struct job *j, const char **code, char *why,
           size_t whylen)
{
    struct jbatch *b = find(srv, id, len);

    if (storage_batches_shared(srv)) {
        /* The store counts it, or refuses it alone, in the commit of its add. */
        if (job_ext(j) == NULL || (j->ext->batch = strndup(id, len)) == NULL) {
            *code = "MEMORY_ALLOCATION_FAILURE";
            snprintf(why, whylen, "out of memory");
            return -1;
        }
        return 0;
    }
    if (b == NULL) {
        *code = "UNKNOWN_BATCH";
        snprintf(why, whylen, "no batch %.*s (batch open ID first)", (int)len, id);
        return -1;
    }
    if (b->c.closed) {
        *code = "BATCH_CLOSED";
        snprintf(why, whylen, "batch %s is closed: it takes no more jobs", b->id);
        return -1;
    }
    if (job_ext(j) == NULL || (j->ext->batch = strdup(b->id)) == NULL) {
        *code = "MEMORY_ALLOCATION_FAILURE";
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    b->c.total++;
    store_set(srv, b); /* before the job's add: both in one commit */
    return 0;
}

/* A refused callback job of "batch:ID:complete|success": fire it again. */
static void
callback_refused(struct srv *srv, const struct job *j)
{
    const char *u = job_unique(j), *colon;
    struct jbatch *b;

    if (j->unique_len < 8 || memcmp(u, "batch:", 6) != 0)
        return;
    colon = memrchr(u + 6, ':', j->unique_len - 6);
    if (colon == NULL || (b = find(srv, u + 6, (size_t)(colon - u - 6))) == NULL)
        return;
    if ((size_t)(u + j->unique_len - colon) == 9 && memcmp(colon, ":complete", 9) == 0)
        b->c.fired_complete = false;
    else if ((size_t)(u + j->unique_len - colon) == 8 && memcmp(colon, ":success", 8) == 0)
        b->c.fired_success = false;
    else
        return;
    log_warn(&srv->log, "batch %s: its callback job was not stored: submitted again", b->id);
    store_set(srv, b);
    arm_fire(srv);
}

void
batch_ended(struct srv *srv, struct job *j, unsigned outcome)
{
    struct jbatch *b;
    char *id;

    if (j->refused)
        callback_refused(srv, j);
    if (j->ext == NULL || (id = j->ext->batch) == NULL)
        return;
    j->ext->batch = NULL; /* counted once, whatever comes of it */
    b = find(srv, id, strlen(id));
    free(id);
    if (b == NULL)
        return; /* dropped */
    if (j->refused) {
        b->c.total--; /* never stored: never a member */
    } else {
        batch_count_end(&b->c, outcome);
        if (outcome != JOB_OUTCOME_COMPLETE)
            list_failed(b, job_handle(j), j->handle_len);
    }
    store_set(srv, b); /* before the end's own op: both in one commit */
    if (b->c.closed && batch_pending(&b->c) == 0)
        arm_fire(srv);
}

int
batch_option(struct conn *c, const char *value, size_t len, char *why, size_t whylen)
{
    char *id;

    if (len == 0) {
        free(c->batch);
        c->batch = NULL;
        return 0;
    }
    /* The batch is looked up at each submit, which is refused if it is unknown or closed. */
    if (!id_ok(value, len)) {
        snprintf(why, whylen, "a batch id is 1 to %d of [A-Za-z0-9_.:-]", BATCH_ID_MAX);
        return -1;
    }
    id = strndup(value, len);
    if (id == NULL) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    free(c->batch);
    c->batch = id;
    return 0;
}

/* --- admin ------------------------------------------------------------------------------ */

#define ADMIN_MAX_WORDS 8

struct word {
    const char *p; /* first byte */
    size_t len;    /* bytes */
};

static size_t
words(const char *line, size_t len, struct word *w, size_t max)
{
    size_t i = 0, n = 0;

    if (len > 0 && line[len - 1] == '\r')
        len--;
    while (i < len && n < max) {
        while (i < len && (line[i] == ' ' || line[i] == '\t'))
            i++;
        if (i == len)
            break;
        w[n].p = line + i;
        while (i < len && line[i] != ' ' && line[i] != '\t')
            i++;
        w[n].len = (size_t)(line + i - w[n].p);
        n++;
    }
    return n;
}

static bool
word_is(const struct word *w, const char *s)
{
    return w->len == strlen(s) && strncasecmp(w->p, s, w->len) == 0;
}

bool
batch_admin_changes(const char *line, size_t len)
{
    struct word w[ADMIN_MAX_WORDS];
    size_t n = words(line, len, w, ADMIN_MAX_WORDS);

    return n >= 2 && word_is(&w[1], "drop");
}

static const char *
yes(bool b)
{
    return b ? "yes" : "no";
}

static void
status_line(struct conn *c, const struct jbatch *b)
{
    conn_printf(c,
                "OK id=%s total=%" PRIu64 " pending=%" PRIu64 " done=%" PRIu64 " failed=%" PRIu64
                " dead=%" PRIu64 " closed=%s on-complete=%s on-success=%s fired-complete=%s"
                " fired-success=%s\n",
                b->id, b->c.total, batch_pending(&b->c), b->c.done, b->c.failed, b->c.dead,
                yes(b->c.closed), b->on_complete[0] ? b->on_complete : "-",
                b->on_success[0] ? b->on_success : "-", yes(b->c.fired_complete),
                yes(b->c.fired_success));
}

static void
admin_open(struct conn *c, const struct word *w, size_t n)
{
    struct srv *srv = c->srv;
    const char *oc = "", *os = "";
    size_t oc_len = 0, os_len = 0, i;
    struct jbatch *b;

    for (i = 3; i < n; i++) {
        if (w[i].len > 12 && strncasecmp(w[i].p, "on-complete=", 12) == 0) {
            oc = w[i].p + 12;
            oc_len = w[i].len - 12;
        } else if (w[i].len > 11 && strncasecmp(w[i].p, "on-success=", 11) == 0) {
            os = w[i].p + 11;
            os_len = w[i].len - 11;
        } else {
            conn_printf(c,
                        "ERR INVALID_ARGUMENTS unknown+word+'%.*s'+(want+on-complete=FUNC+or+"
                        "on-success=FUNC)\r\n",
                        (int)(w[i].len > 64 ? 64 : w[i].len), w[i].p);
            return;
        }
    }
    if (!func_ok(oc, oc_len) || !func_ok(os, os_len)) {
        conn_printf(c, "ERR INVALID_ARGUMENTS a+callback's+function+name+is+too+long\r\n");
        return;
    }
    if (find(srv, w[2].p, w[2].len) != NULL) {
        conn_printf(c, "ERR BATCH_EXISTS batch+%.*s+exists\r\n", (int)w[2].len, w[2].p);
        return;
    }
    b = jbatch_new(w[2].p, w[2].len, oc, oc_len, os, os_len);
    if (b == NULL || insert(srv, b) < 0) {
        jbatch_free(b);
        conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory\r\n");
        return;
    }
    b->created = clock_now();
    if (!store_set(srv, b)) { /* never acknowledged unstored */
        forget(srv, b);
        conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory+to+store+it\r\n");
        return;
    }
    log_info(&srv->log, "%s: batch %s opened", c->peer, b->id);
    durable_reply(srv, c, "OK\n"); /* once its row is committed */
}

static void
admin_list(struct conn *c)
{
    struct jbatch *b;

    TAILQ_FOREACH (b, &c->srv->batches->list, link) {
        conn_printf(c,
                    "%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64
                    "\t%s\t%s\t%s\t%s\t%s\n",
                    b->id, b->c.total, batch_pending(&b->c), b->c.done, b->c.failed, b->c.dead,
                    b->c.closed ? "closed" : "open", b->on_complete[0] ? b->on_complete : "-",
                    b->on_success[0] ? b->on_success : "-", yes(b->c.fired_complete),
                    yes(b->c.fired_success));
    }
    conn_write(c, ".\n", 2);
}

/* --- a shared store's batches (postgres) ---------------------------------------------- */

#define SHARED_LIST_ROOM (256 * 1024) /* bytes of a "batch list" reply from a shared store */
#define SHARED_LINE_ROOM 1024         /* ... of the other replies */
#define SHARED_JSON_ROOM 8192         /* ... of one batch's row as JSON (GET /api/batch/ID) */

/*
 * On the writer: one row the store found or made for op (a batch admin
 * op), as the line the admin sends for it, behind the op's text. A row
 * past the room is left out of a list.
 */
static int
shared_row(const struct store_batch *sb, void *arg)
{
    struct store_op *op = arg;
    struct batch_counts bc = {0};
    size_t room = op->text_room - op->text_len;
    char *at = op->text + op->text_len;
    int id_len = (int)sb->id_len, n;
    const char *oc = sb->on_complete_len > 0 ? sb->on_complete : "-";
    const char *os = sb->on_success_len > 0 ? sb->on_success : "-";
    int oc_len = sb->on_complete_len > 0 ? (int)sb->on_complete_len : 1;
    int os_len = sb->on_success_len > 0 ? (int)sb->on_success_len : 1;

    bc.total = sb->total;
    bc.done = sb->done;
    bc.failed = sb->failed_n;
    bc.dead = sb->dead;
    if (op->batch_what == STORE_BATCH_STATUS)
        n = snprintf(at, room,
                     "OK id=%.*s total=%" PRIu64 " pending=%" PRIu64 " done=%" PRIu64
                     " failed=%" PRIu64 " dead=%" PRIu64 " closed=%s on-complete=%.*s"
                     " on-success=%.*s fired-complete=%s fired-success=%s\n",
                     id_len, sb->id, bc.total, batch_pending(&bc), bc.done, bc.failed, bc.dead,
                     yes(sb->closed), oc_len, oc, os_len, os, yes(sb->fired_complete),
                     yes(sb->fired_success));
    else if (op->batch_what == STORE_BATCH_LIST)
        n = snprintf(at, room,
                     "%.*s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64
                     "\t%s\t%.*s\t%.*s\t%s\t%s\n",
                     id_len, sb->id, bc.total, batch_pending(&bc), bc.done, bc.failed, bc.dead,
                     sb->closed ? "closed" : "open", oc_len, oc, os_len, os,
                     yes(sb->fired_complete), yes(sb->fired_success));
    else
        n = snprintf(at, room, "OK\n");
    if (n > 0 && (size_t)n < room)
        op->text_len += (size_t)n;
    return 0;
}

/* admin "batch ..." on a shared store: the store answers, once this op is through. */
static void
shared_admin(struct conn *c, const struct word *w, size_t n)
{
    struct store_batch sb = {0};
    struct store_op *op;
    char none[BATCH_ID_MAX + 64];
    int what;
    size_t i;

    if (n == 2) {
        what = STORE_BATCH_LIST;
        sb.id = "";
    } else {
        what = word_is(&w[1], "open")    ? STORE_BATCH_OPEN
               : word_is(&w[1], "close") ? STORE_BATCH_CLOSE
               : word_is(&w[1], "drop")  ? STORE_BATCH_DROP
                                         : STORE_BATCH_STATUS;
        sb.id = w[2].p;
        sb.id_len = w[2].len;
    }
    sb.on_complete = sb.on_success = "";
    for (i = 3; what == STORE_BATCH_OPEN && i < n; i++) {
        if (w[i].len > 12 && strncasecmp(w[i].p, "on-complete=", 12) == 0) {
            sb.on_complete = w[i].p + 12;
            sb.on_complete_len = w[i].len - 12;
        } else if (w[i].len > 11 && strncasecmp(w[i].p, "on-success=", 11) == 0) {
            sb.on_success = w[i].p + 11;
            sb.on_success_len = w[i].len - 11;
        } else {
            conn_printf(c,
                        "ERR INVALID_ARGUMENTS unknown+word+'%.*s'+(want+on-complete=FUNC+or+"
                        "on-success=FUNC)\r\n",
                        (int)(w[i].len > 64 ? 64 : w[i].len), w[i].p);
            return;
        }
    }
    if (what != STORE_BATCH_OPEN && what != STORE_BATCH_LIST && n != 3) {
        conn_printf(c, "ERR INVALID_ARGUMENTS batch+%.*s+takes+only+an+ID\r\n", (int)w[1].len,
                    w[1].p);
        return;
    }
    if (!func_ok(sb.on_complete, sb.on_complete_len) ||
        !func_ok(sb.on_success, sb.on_success_len)) {
        conn_printf(c, "ERR INVALID_ARGUMENTS a+callback's+function+name+is+too+long\r\n");
        return;
    }
    op = storage_batch(c->srv, what, &sb,
                       what == STORE_BATCH_LIST ? SHARED_LIST_ROOM : SHARED_LINE_ROOM, NULL);
    if (op == NULL) {
        conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory\r\n");
        return;
    }
    op->rowfn = shared_row;
    if (what == STORE_BATCH_OPEN)
        snprintf(none, sizeof(none), "ERR BATCH_EXISTS batch+%.*s+exists\r\n", (int)sb.id_len,
                 sb.id);
    else if (what == STORE_BATCH_LIST)
        none[0] = '\0';
    else
        snprintf(none, sizeof(none), "ERR UNKNOWN_BATCH no+batch+%.*s\r\n", (int)sb.id_len, sb.id);
    if (what == STORE_BATCH_OPEN || what == STORE_BATCH_CLOSE || what == STORE_BATCH_DROP)
        log_info(&c->srv->log, "%s: batch %.*s: %.*s", c->peer, (int)sb.id_len, sb.id,
                 (int)w[1].len, w[1].p);
    durable_reply_op(c->srv, c, op, none, what == STORE_BATCH_LIST ? ".\n" : "");
}

void
batch_admin(struct conn *c, const char *line, size_t len)
{
    struct srv *srv = c->srv;
    struct word w[ADMIN_MAX_WORDS];
    size_t n = words(line, len, w, ADMIN_MAX_WORDS);
    struct jbatch *b;

    if (srv->batches == NULL) {
        conn_printf(c, "ERR UNKNOWN_COMMAND batches+are+not+running\r\n");
        return;
    }
    if (n == 2 && word_is(&w[1], "list") && storage_batches_shared(srv)) {
        shared_admin(c, w, n);
        return;
    }
    if (n == 2 && word_is(&w[1], "list")) {
        admin_list(c);
        return;
    }
    if (n < 3 || !(word_is(&w[1], "open") || word_is(&w[1], "close") || word_is(&w[1], "status") ||
                   word_is(&w[1], "drop"))) {
        conn_printf(c,
                    "ERR INVALID_ARGUMENTS usage:+batch+open|close|status|drop+ID,+batch+list\r\n");
        return;
    }
    if (!id_ok(w[2].p, w[2].len)) {
        conn_printf(c, "ERR INVALID_ARGUMENTS a+batch+id+is+1+to+%d+of+[A-Za-z0-9_.:-]\r\n",
                    BATCH_ID_MAX);
        return;
    }
    if (storage_batches_shared(srv)) {
        shared_admin(c, w, n);
        return;
    }
    if (word_is(&w[1], "open")) {
        if (!storage_keeps_batches(srv)) {
            conn_printf(
                c, "ERR STORE_ERROR store+%s+keeps+no+batches+(use+sqlite,+postgres+or+none)\r\n",
                srv->storage.ops->name);
            return;
        }
        admin_open(c, w, n);
        return;
    }
    b = find(srv, w[2].p, w[2].len);
    if (b == NULL) {
        conn_printf(c, "ERR UNKNOWN_BATCH no+batch+%.*s\r\n", (int)w[2].len, w[2].p);
        return;
    }
    if (n != 3) {
        conn_printf(c, "ERR INVALID_ARGUMENTS batch+%.*s+takes+only+an+ID\r\n", (int)w[1].len,
                    w[1].p);
        return;
    }
    if (word_is(&w[1], "status")) {
        status_line(c, b);
        return;
    }
    if (word_is(&w[1], "close")) {
        if (!b->c.closed) {
            b->c.closed = true;
            if (!store_set(srv, b)) { /* never acknowledged unstored */
                b->c.closed = false;
                conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory+to+store+it\r\n");
                return;
            }
            log_info(&srv->log, "%s: batch %s closed with %" PRIu64 " jobs", c->peer, b->id,
                     b->c.total);
            arm_fire(srv);
        }
        durable_reply(srv, c, "OK\n"); /* once the close is committed */
        return;
    }
    /* drop: forget it; its jobs run on, no longer counted. */
    if (durable(srv)) {
        struct store_batch sb;

        to_store(b, &sb);
        if (storage_batch(srv, STORE_BATCH_DELETE, &sb, 0, deleted_done) == NULL) {
            conn_printf(c, "ERR MEMORY_ALLOCATION_FAILURE out+of+memory+to+store+it\r\n");
            return;
        }
    }
    log_notice(&srv->log, "%s: batch %s dropped", c->peer, b->id);
    disown(srv, b);
    forget(srv, b);
    durable_reply(srv, c, "OK\n"); /* once the delete is committed */
}

/* One batch as an object of GET /api/batches; NULL if out of memory. */
static json_t *
jbatch_json(const struct jbatch *b)
{
    return json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:b,s:o,s:o,s:b,s:b,s:o,s:o,s:I}", "id", b->id,
                     "total", (json_int_t)b->c.total, "pending", (json_int_t)batch_pending(&b->c),
                     "done", (json_int_t)b->c.done, "failed", (json_int_t)b->c.failed, "dead",
                     (json_int_t)b->c.dead, "closed", b->c.closed, "on_complete",
                     b->on_complete[0] ? json_string(b->on_complete) : json_null(), "on_success",
                     b->on_success[0] ? json_string(b->on_success) : json_null(), "fired_complete",
                     b->c.fired_complete, "fired_success", b->c.fired_success, "complete_job",
                     b->cb_handle[0][0] ? json_string(b->cb_handle[0]) : json_null(), "success_job",
                     b->cb_handle[1][0] ? json_string(b->cb_handle[1]) : json_null(), "created",
                     (json_int_t)b->created);
}

json_t *
batch_json(struct srv *srv)
{
    json_t *arr = json_array();
    struct jbatch *b;

    if (arr == NULL || srv->batches == NULL)
        return arr;
    TAILQ_FOREACH (b, &srv->batches->list, link) {
        json_t *o = jbatch_json(b);

        if (o == NULL || json_array_append_new(arr, o) < 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

bool
batch_id_ok(const char *id, size_t len)
{
    return id_ok(id, len);
}

json_t *
batch_json_one(struct srv *srv, const char *id, size_t len)
{
    struct jbatch *b = find(srv, id, len);

    return b != NULL ? jbatch_json(b) : NULL;
}

/*
 * On the writer: one row of a shared store's batches as a line of JSON
 * (jbatch_json's fields; the callbacks' handles are the database's, not
 * read) behind the op's text. A row past the room is left out.
 */
static int
json_row(const struct store_batch *sb, void *arg)
{
    struct store_op *op = arg;
    struct batch_counts bc = {0};
    json_t *o;
    char *text;
    size_t len;

    bc.total = sb->total;
    bc.done = sb->done;
    bc.failed = sb->failed_n;
    bc.dead = sb->dead;
    o = json_pack(
        "{s:s%,s:I,s:I,s:I,s:I,s:I,s:b,s:o,s:o,s:b,s:b,s:n,s:n,s:I}", "id", sb->id, sb->id_len,
        "total", (json_int_t)bc.total, "pending", (json_int_t)batch_pending(&bc), "done",
        (json_int_t)bc.done, "failed", (json_int_t)bc.failed, "dead", (json_int_t)bc.dead, "closed",
        sb->closed, "on_complete",
        sb->on_complete_len > 0 ? json_stringn(sb->on_complete, sb->on_complete_len) : json_null(),
        "on_success",
        sb->on_success_len > 0 ? json_stringn(sb->on_success, sb->on_success_len) : json_null(),
        "fired_complete", sb->fired_complete, "fired_success", sb->fired_success, "complete_job",
        "success_job", "created", (json_int_t)sb->created);
    text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (text == NULL)
        return -1;
    len = strlen(text);
    if (len + 1 <= op->text_room - op->text_len) {
        memcpy(op->text + op->text_len, text, len);
        op->text[op->text_len + len] = '\n';
        op->text_len += len + 1;
    }
    free(text);
    return 0;
}

struct store_op *
batch_shared_read(struct srv *srv, const char *id, size_t len)
{
    struct store_batch sb = {0};
    struct store_op *op;

    sb.id = id != NULL ? id : "";
    sb.id_len = id != NULL ? len : 0;
    sb.on_complete = sb.on_success = "";
    op = storage_batch(srv, id != NULL ? STORE_BATCH_STATUS : STORE_BATCH_LIST, &sb,
                       id != NULL ? SHARED_JSON_ROOM : SHARED_LIST_ROOM, NULL);
    if (op != NULL)
        op->rowfn = json_row;
    return op;
}

json_t *
batch_shared_json(const struct store_op *op)
{
    json_t *arr = json_array();
    const char *p = op->text, *end = op->text + op->text_len;

    while (arr != NULL && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        json_t *o;

        if (nl == NULL)
            break;
        o = json_loadb(p, (size_t)(nl - p), 0, NULL);
        if (o == NULL || json_array_append_new(arr, o) < 0) {
            json_decref(arr);
            return NULL;
        }
        p = nl + 1;
    }
    return arr;
}

unsigned
batch_count(const struct srv *srv)
{
    return srv->batches != NULL ? srv->batches->n : 0;
}
