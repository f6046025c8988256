/*
 * The backends the store contract runs over, each described for
 * tests/unit/store_contract.c, and what their backend-only tests share
 * with that description: sqlite's case directories, and a real memcached
 * that the test starts and meddles with (stop, kill, restart) plus a
 * second client to look at the keys the store wrote.
 */
#ifndef DSJOB_TESTS_STORE_BACKENDS_H
#define DSJOB_TESTS_STORE_BACKENDS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "store_contract.h"

#ifdef HAVE_SQLITE
extern const struct store_backend store_backend_sqlite;

/* case_dir makes a fresh directory for case name; the caller frees it with case_done. */
char *case_dir(const char *name);

/* case_done removes dir and everything in it, and frees the string. */
void case_done(char *dir);

/* path_in returns "dir/name", which the caller frees. */
char *path_in(const char *dir, const char *name);

/* sqlite_rows counts the jobs of id (all, if id < 0) in dir/dsjobd.db from outside; -1 on error. */
long long sqlite_rows(const char *dir, int64_t id);
#endif

#ifdef HAVE_MEMCACHED
extern const struct store_backend store_backend_memcached;

/*
 * mc_flush_again flushes st until a flush works, 20 ms apart, for 30 s at
 * most, and returns the last result: after a failure the store skips the
 * server for its retry timeout (1 s, in whole seconds), failing at once.
 */
int mc_flush_again(const struct store_ops *ops, struct store *st, char *err);

extern pid_t mc_pid;        /* the memcached this test runs, or -1 */
extern int mc_port;         /* its port */
extern char mc_servers[64]; /* "127.0.0.1:port" */

/* mcd_setup starts memcached on a free port; false, with why, if there is no binary. */
bool mcd_setup(char *why, size_t len);

/* mcd_start runs memcached on port; false if it exits or does not listen in time. */
bool mcd_start(int port);

/* mcd_stop kills the memcached this test runs, if any. */
void mcd_stop(void);

/* free_port asks the kernel for a loopback port nobody is using right now. */
int free_port(void);

void sleep_ms(long ms);

/* prefix_for gives case name a key prefix of its own (a static buffer). */
const char *prefix_for(const char *name);

/* raw_exists says whether prefix:what is in memcached. */
bool raw_exists(const char *prefix, const char *what);

/* raw_set sets prefix:what to len bytes of val; bails out on failure. */
void raw_set(const char *prefix, const char *what, const void *val, size_t len);

/* head_chunks gives next - first from prefix:head, or -1. */
long long head_chunks(const char *prefix);
#endif

#endif
