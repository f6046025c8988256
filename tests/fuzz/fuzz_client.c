/*
 * Fuzz the client library's reply handling (libclient: link, client and
 * task set). The first input byte picks a call (submit, submit_bg,
 * submit_epoch, status, status_unique, echo or a task set of three
 * tasks); the rest is what the fake server (fakepeer.c) answers, so the
 * library's own framing and state machines parse arbitrary server bytes.
 * Only the public API is used. A call may fail; it must not crash, leak,
 * hang or hand back what it was not sent.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <dsjob/client.h>

#include "fakepeer.h"
#include "fuzz.h"

#define IO_MS 1000

static size_t nbytes; /* bytes the callbacks saw, so they are read */

static void
on_data(const void *data, size_t len, void *user)
{
    (void)user;
    if (len > 0 && data == NULL)
        abort();
    nbytes += len;
}

static void
on_status(unsigned numerator, unsigned denominator, void *user)
{
    (void)user;
    nbytes += numerator ^ denominator;
}

static void
t_created(struct dsjob_task *t, const char *handle, void *user)
{
    (void)user;
    nbytes += strlen(handle) + strlen(dsjob_task_handle(t));
}

static void
t_status(struct dsjob_task *t, unsigned numerator, unsigned denominator, void *user)
{
    (void)t;
    (void)user;
    nbytes += numerator ^ denominator;
}

static void
t_data(struct dsjob_task *t, const void *data, size_t len, void *user)
{
    (void)t;
    on_data(data, len, user);
}

static void
t_complete(struct dsjob_task *t, const void *result, size_t len, void *user)
{
    (void)t;
    on_data(result, len, user);
}

static void
t_fail(struct dsjob_task *t, void *user)
{
    (void)t;
    (void)user;
    nbytes++;
}

static void
t_exception(struct dsjob_task *t, const char *text, size_t len, void *user)
{
    (void)t;
    on_data(text, len, user);
}

static void
run_taskset(struct dsjob_client *c, unsigned flags)
{
    static const struct dsjob_task_callbacks cb = {
        .created = t_created,
        .status = t_status,
        .data = t_data,
        .warning = t_data,
        .complete = t_complete,
        .fail = t_fail,
        .exception = t_exception,
    };
    struct dsjob_taskset *ts = dsjob_taskset_new(c, &cb);
    size_t i, len;

    if (ts == NULL)
        abort();
    dsjob_taskset_add(ts, "f", NULL, "a", 1, DSJOB_PRIO_NORMAL, 0, NULL, NULL);
    dsjob_taskset_add(ts, "f", "u", "b", 1, DSJOB_PRIO_HIGH, flags & 1, NULL, NULL);
    dsjob_taskset_add(ts, "g", "v", "c", 1, DSJOB_PRIO_LOW, flags & 2 ? 1 : 0, NULL, NULL);
    dsjob_taskset_run(ts, IO_MS);
    if (dsjob_taskset_nfailed(ts) > dsjob_taskset_count(ts))
        abort();
    for (i = 0; i < dsjob_taskset_nfailed(ts); i++) {
        struct dsjob_task *t = dsjob_taskset_failed(ts, i);

        nbytes += strlen(dsjob_task_errmsg(t)) + strlen(dsjob_task_unique(t));
        dsjob_task_result(t, &len);
    }
    dsjob_taskset_free(ts);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct dsjob_client_callbacks cb = {
        .status = on_status,
        .data = on_data,
        .warning = on_data,
    };
    const char *path = fakepeer_start();
    struct dsjob_client *c;
    struct dsjob_status st;
    char handle[64];
    void *result = NULL;
    size_t result_len = 0;
    unsigned op;

    if (size < 1)
        return 0;
    op = data[0];
    fakepeer_arm(data + 1, size - 1, NULL, NULL);
    c = dsjob_client_new();
    if (c == NULL || dsjob_client_add_server(c, path) != DSJOB_OK)
        abort();
    dsjob_client_set_timeout(c, IO_MS, IO_MS);
    dsjob_client_set_callbacks(c, &cb, NULL);
    switch (op % 8) {
    case 0:
        if (dsjob_client_submit(c, "f", op & 8 ? "u" : NULL, "x", 1, DSJOB_PRIO_NORMAL, &result,
                                &result_len) == DSJOB_OK &&
            result_len > 0 && result == NULL)
            abort();
        dsjob_free(result);
        break;
    case 1:
        dsjob_client_submit_bg(c, "f", op & 8 ? "u" : NULL, "x", 1, DSJOB_PRIO_LOW, handle,
                               op & 16 ? 4 : sizeof(handle));
        break;
    case 2:
        dsjob_client_submit_epoch(c, "f", NULL, "x", 1, 1700000000, handle, sizeof(handle));
        break;
    case 3: dsjob_client_status(c, "H:f:1", &st); break;
    case 4: dsjob_client_status_unique(c, "u", &st); break;
    case 5: dsjob_client_echo(c, "ping", 4); break;
    default: run_taskset(c, op >> 3); break;
    }
    nbytes += strlen(dsjob_client_errmsg(c));
    /* A second call on the same client reuses or reopens its link. */
    if (op & 32)
        dsjob_client_echo(c, "ping", 4);
    dsjob_client_free(c);
    fakepeer_finish();
    return 0;
}
