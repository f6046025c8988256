/*
 * async-libevent: the non-blocking client (dsjob_async(3)) driven by a
 * libevent loop. Submits one foreground job per payload given, all at once
 * on one connection, and prints each result as "N<TAB>RESULT" (N the
 * payload's position) as it comes, in whatever order the jobs end, with
 * WORK_DATA chunks as "N data CHUNK" lines. A job that fails prints "N
 * failed: why" and makes the exit status 1.
 *
 *   usage: async-libevent SERVER FUNCTION PAYLOAD...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include <dsjob/async.h>

struct loop {
    struct event_base *base;
    struct event *ev;
    struct dsjob_async *a;
    uint64_t first; /* the id of payload 0; ids count up from it */
    int failed;
    short watching; /* the events ev waits for */
};

static void
on_data(struct dsjob_async *a, uint64_t id, const void *data, size_t len, void *user)
{
    struct loop *lp = user;

    (void)a;
    printf("%llu data %.*s\n", (unsigned long long)(id - lp->first), (int)len, (const char *)data);
}

static void
on_complete(struct dsjob_async *a, uint64_t id, const void *result, size_t len, void *user)
{
    struct loop *lp = user;

    (void)a;
    printf("%llu\t%.*s\n", (unsigned long long)(id - lp->first), (int)len, (const char *)result);
}

static void
on_fail(struct dsjob_async *a, uint64_t id, int err, const char *text, size_t len, void *user)
{
    struct loop *lp = user;

    (void)a;
    printf("%llu failed: %s%s%.*s\n", (unsigned long long)(id - lp->first), dsjob_strerror(err),
           len ? ": " : "", (int)len, text);
    lp->failed = 1;
}

/* Watches for writing only while bytes wait: libevent's persistent event is re-armed to fit. */
static void
rearm(struct loop *lp)
{
    short want = EV_READ | EV_PERSIST | (dsjob_async_want_write(lp->a) ? EV_WRITE : 0);

    if (want == lp->watching)
        return;
    event_del(lp->ev);
    event_assign(lp->ev, lp->base, dsjob_async_fd(lp->a), want, event_get_callback(lp->ev), lp);
    event_add(lp->ev, NULL);
    lp->watching = want;
}

static void
on_ready(evutil_socket_t fd, short what, void *arg)
{
    struct loop *lp = arg;
    int err = dsjob_async_step(lp->a);

    (void)fd;
    (void)what;
    if (err != DSJOB_OK) {
        fprintf(stderr, "async-libevent: %s\n", dsjob_async_errmsg(lp->a));
        lp->failed = 1;
        event_base_loopbreak(lp->base);
        return;
    }
    if (dsjob_async_pending(lp->a) == 0) {
        event_base_loopbreak(lp->base);
        return;
    }
    rearm(lp);
}

int
main(int argc, char **argv)
{
    struct dsjob_async_callbacks cb = {.data = on_data, .complete = on_complete, .fail = on_fail};
    struct loop lp = {0};
    int i;

    if (argc < 4) {
        fputs("usage: async-libevent SERVER FUNCTION PAYLOAD...\n", stderr);
        return 2;
    }
    lp.base = event_base_new();
    lp.a = dsjob_async_new(argv[1], &cb, &lp);
    if (lp.base == NULL || lp.a == NULL) {
        fprintf(stderr, "async-libevent: cannot set up (bad address '%s'?)\n", argv[1]);
        return 2;
    }
    if (dsjob_async_connect(lp.a, 5000) != DSJOB_OK) {
        fprintf(stderr, "async-libevent: %s\n", dsjob_async_errmsg(lp.a));
        return 1;
    }
    for (i = 3; i < argc; i++) {
        uint64_t id;

        if (dsjob_async_submit(lp.a, argv[2], NULL, argv[i], strlen(argv[i]), DSJOB_PRIO_NORMAL, 0,
                               &id) != DSJOB_OK) {
            fprintf(stderr, "async-libevent: %s\n", dsjob_async_errmsg(lp.a));
            return 1;
        }
        if (i == 3)
            lp.first = id;
    }
    lp.watching = EV_READ | EV_PERSIST;
    lp.ev = event_new(lp.base, dsjob_async_fd(lp.a), lp.watching, on_ready, &lp);
    event_add(lp.ev, NULL);
    rearm(&lp);
    if (dsjob_async_pending(lp.a) > 0)
        event_base_dispatch(lp.base);
    event_free(lp.ev);
    dsjob_async_free(lp.a);
    event_base_free(lp.base);
    return lp.failed;
}
