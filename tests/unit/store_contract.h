/*
 * The contract of server/store.h as one suite that every backend runs
 * (tests/unit/t_store_contract.c lists them), and the helpers its cases
 * and the backend-only tests share: jobs to add, replays copied out of
 * their callback, and a field-by-field comparison. A backend describes
 * itself to the suite in a struct store_backend: how to make a fresh,
 * empty store for a case, how to look at its data from outside, and how
 * to make its flushes fail for a while.
 */
#ifndef DSJOB_TESTS_STORE_CONTRACT_H
#define DSJOB_TESTS_STORE_CONTRACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/store.h"

#define CONTRACT_MAX_COPIES 8

/* What the suite needs to know of a backend. */
struct store_backend {
    const char *name;            /* in every check's name */
    const struct store_ops *ops; /* the backend */
    size_t big;                  /* the largest payload it must take */
    int many;                    /* jobs in the one-batch case */
    /* setup: start what the backend needs (a server); false, with why, skips it. */
    bool (*setup)(char *why, size_t len);
    void (*teardown)(void);
    /* begin: the config of a fresh, empty store for case name (borrowed until end). */
    const struct store_config *(*begin)(const char *name);
    void (*end)(void);
    /* where: what an error of this store must name (its file, its server). */
    const char *(*where)(void);
    const char *fail_says; /* what a failed flush's error starts with, or NULL */
    /* outside: whether job id is stored, as another reader sees it: 1, 0, or -1. */
    int (*outside)(uint64_t id);
    /* fail_flushes: make every flush of st fail (on), or work again (off). */
    void (*fail_flushes)(struct store *st, bool on);
    /*
     * flush_again: the first flush after fail_flushes(st, false), tried
     * until the backend is back (bounded); NULL: ops->flush.
     */
    int (*flush_again)(const struct store_ops *ops, struct store *st, char *err);
};

/* store_contract_run runs the contract's cases over b (setup and teardown included). */
void store_contract_run(const struct store_backend *b);

/* A job to add, with the storage its pointers refer to. */
struct tjob {
    struct store_job sj; /* what add sees */
    char handle[64];     /* sj.handle points here */
};

/* A job as replay gave it, copied out of the callback. */
struct copy {
    struct store_job sj; /* pointers into the copies below */
    void *mem[5];        /* handle, func, unique, reducer, data */
};

/* What a replay saw. */
struct seen {
    size_t n;                                /* jobs seen */
    size_t stop_after;                       /* return 1 after this many; 0 never */
    bool seq_sorted;                         /* every seq >= the one before */
    uint64_t last_seq;                       /* of the previous job */
    uint64_t ids[CONTRACT_MAX_COPIES];       /* of the first jobs */
    struct copy copies[CONTRACT_MAX_COPIES]; /* of the first jobs */
};

/* tjob_init fills tj as job id of function "reverse", normal priority (data borrowed). */
void tjob_init(struct tjob *tj, uint64_t id, uint64_t seq, const void *data, size_t len);

/* add_job adds a job with a string payload through ops; the op's result. */
int add_job(const struct store_ops *ops, struct store *st, uint64_t id, uint64_t seq,
            const char *data, char *err);

/* collect is a store_replay_fn that fills the struct seen in arg. */
int collect(const struct store_job *sj, void *arg);

/* seen_release frees the copies and zeroes s. */
void seen_release(struct seen *s);

/* replay_all replays st into s (released first); false, with a diag, if replay failed. */
bool replay_all(const struct store_ops *ops, struct store *st, struct seen *s);

/* check_same_job compares every field of got with want, one check each. */
void check_same_job(const struct store_job *got, const struct store_job *want, const char *what);

/* payload returns len bytes (a NUL every 251) that the caller frees. */
char *payload(size_t len);

/* has tells whether part is in err. */
bool has(const char *err, const char *part);

#endif
