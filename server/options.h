/*
 * dsjobd's settings: the one table of the numeric ones' bounds (name, least,
 * most, default, unit), and the reading of argv and --config-file. The table
 * is read both by dsjobd's command line and config file (options.c) and by
 * dsjob_server_new, which checks the same bounds for a program that embeds
 * the server (srv.c), so the two cannot drift apart. It is defined here,
 * static, because dsjobd sees only the library's dsjob_ symbols.
 */
#ifndef DSJOB_SERVER_OPTIONS_H
#define DSJOB_SERVER_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <dsjob/server.h>

#include "proto/packet.h"

/* The type of a bounded setting's field in struct dsjob_server_config. */
enum option_kind {
    OPTION_UINT,    /* unsigned */
    OPTION_INT,     /* int */
    OPTION_SIZE,    /* size_t */
    OPTION_NOFIELD, /* dsjobd's alone (checked, then kept by options.c or ignored) */
};

enum option_flags {
    OPTION_SUFFIX = 1 << 0,  /* a size: the command line takes k, M or G after the number */
    OPTION_UNSET = 1 << 1,   /* -1 means the system's value, on the command line too */
    OPTION_OFF_API = 1 << 2, /* -1 turns it off in the config; not written on the command line */
    OPTION_SECONDS = 1 << 3, /* milliseconds, written as SECONDS[.FRACTION] on the command line */
};

/* The bounded settings, indexes of option_bounds[]. */
enum option_id {
    OPTION_PORT,
    OPTION_HTTP_PORT,
    OPTION_BACKLOG,
    OPTION_KEEPALIVE_IDLE,
    OPTION_KEEPALIVE_INTERVAL,
    OPTION_KEEPALIVE_COUNT,
    OPTION_MAX_PACKET,
    OPTION_MAX_OUTPUT,
    OPTION_MAX_CONNECTIONS,
    OPTION_MAX_JOBS,
    OPTION_MAX_QUEUE,
    OPTION_MAX_UNIQUE,
    OPTION_JOB_RETRIES,
    OPTION_IDLE_TIMEOUT,
    OPTION_JOB_TIMEOUT,
    OPTION_RETRY_BACKOFF,
    OPTION_RETRY_BACKOFF_MAX,
    OPTION_MAX_DEAD,
    OPTION_KEEP_RESULTS,
    OPTION_MAX_RESULT,
    OPTION_PRIORITY_AGING,
    OPTION_STORE_BATCH,
    OPTION_STORE_INTERVAL,
    OPTION_STORE_STUCK,
    OPTION_PG_STOP_GRACE,
    OPTION_PG_LEASE,
    OPTION_PG_PREFETCH,
    OPTION_PG_POLL,
    OPTION_PG_TAKE_MAX,
    OPTION_PG_CONFLICT_RETRIES,
    OPTION_HTTP_MAX_CONNECTIONS,
    OPTION_HTTP_TIMEOUT,
    OPTION_SCHEDULE_REFRESH,
    OPTION_FILE_DESCRIPTORS,
    OPTION_THREADS,
    OPTION_WORKER_WAKEUP,
    OPTION_HASHTABLE_BUCKETS,
    OPTION_MAX_QUEUE_AGE,
    OPTION_UNIQUE_FOR,
    OPTION_MAX_KEPT,
    OPTION_DEAD_MAX_AGE,
    OPTION_MAX_AFTER,
    OPTION_STORE_GRAB_WAIT,
    OPTION_NBOUNDS
};

/* One bounded setting. */
struct option_bound {
    const char *name;       /* the long option, without its dashes */
    enum option_kind kind;  /* its field's type */
    size_t offset;          /* its field in struct dsjob_server_config */
    unsigned long long min; /* the least value taken */
    unsigned long long max; /* the most */
    long long def;          /* dsjob_server_config_init's value (-1: off or unset) */
    const char *unit;       /* of the values, for messages; "" for none */
    unsigned flags;         /* enum option_flags */
};

#define OPTION_FIELD(f) offsetof(struct dsjob_server_config, f)
#define OPTION_MIN_PACKET 1024u /* the least --max-packet-size */

/*
 * Every bound of dsjobd(8), once. A field with no entry here (the strings,
 * store_sync, priority, log_format) is checked by its own code in srv.c.
 * Linux takes at most 32767 seconds for TCP_KEEPIDLE and TCP_KEEPINTVL and
 * 127 probes for TCP_KEEPCNT. A change here changes dsjobd(8) too.
 */
static const struct option_bound option_bounds[OPTION_NBOUNDS] = {
    [OPTION_PORT] = {"port", OPTION_INT, OPTION_FIELD(port), 0, 65535, 4730, "", OPTION_OFF_API},
    [OPTION_HTTP_PORT] = {"http-port", OPTION_INT, OPTION_FIELD(http_port), 0, 65535, -1, "",
                          OPTION_OFF_API},
    [OPTION_BACKLOG] = {"backlog", OPTION_INT, OPTION_FIELD(backlog), 1, 65535, 1024, "connections",
                        0},
    [OPTION_KEEPALIVE_IDLE] = {"keepalive-idle", OPTION_INT, OPTION_FIELD(keepalive_idle), 1, 32767,
                               -1, "seconds", OPTION_UNSET},
    [OPTION_KEEPALIVE_INTERVAL] = {"keepalive-interval", OPTION_INT,
                                   OPTION_FIELD(keepalive_interval), 1, 32767, -1, "seconds",
                                   OPTION_UNSET},
    [OPTION_KEEPALIVE_COUNT] = {"keepalive-count", OPTION_INT, OPTION_FIELD(keepalive_count), 1,
                                127, -1, "probes", OPTION_UNSET},
    [OPTION_MAX_PACKET] = {"max-packet-size", OPTION_SIZE, OPTION_FIELD(max_packet_size),
                           OPTION_MIN_PACKET, UINT32_MAX, 64 << 20, "bytes", OPTION_SUFFIX},
    /* At least --max-packet-size's packet too, which srv.c checks. */
    [OPTION_MAX_OUTPUT] = {"max-output-buffer", OPTION_SIZE, OPTION_FIELD(max_output_buffer),
                           OPTION_MIN_PACKET + PACKET_HEADER_SIZE, SIZE_MAX, 256 << 20, "bytes",
                           OPTION_SUFFIX},
    [OPTION_MAX_CONNECTIONS] = {"max-connections", OPTION_UINT, OPTION_FIELD(max_connections), 0,
                                UINT32_MAX, 0, "connections", 0},
    [OPTION_MAX_JOBS] = {"max-jobs", OPTION_UINT, OPTION_FIELD(max_jobs), 0, UINT32_MAX, 0, "jobs",
                         0},
    [OPTION_MAX_QUEUE] = {"max-queue", OPTION_UINT, OPTION_FIELD(max_queue), 0, UINT32_MAX, 0,
                          "jobs", 0},
    [OPTION_MAX_UNIQUE] = {"max-unique-size", OPTION_SIZE, OPTION_FIELD(max_unique_size), 1,
                           UINT32_MAX, 1024, "bytes", OPTION_SUFFIX},
    [OPTION_JOB_RETRIES] = {"job-retries", OPTION_UINT, OPTION_FIELD(job_retries), 0, UINT32_MAX, 0,
                            "attempts", 0},
    [OPTION_IDLE_TIMEOUT] = {"idle-timeout", OPTION_UINT, OPTION_FIELD(idle_timeout), 0, 86400, 60,
                             "seconds", 0},
    [OPTION_JOB_TIMEOUT] = {"job-timeout", OPTION_UINT, OPTION_FIELD(job_timeout), 0, 86400, 0,
                            "seconds", 0},
    /* --retry-backoff B[,M]: B is the first entry, M the second. */
    [OPTION_RETRY_BACKOFF] = {"retry-backoff", OPTION_UINT, OPTION_FIELD(retry_backoff_base_ms), 0,
                              86400 * 1000, 0, "seconds", OPTION_SECONDS},
    [OPTION_RETRY_BACKOFF_MAX] = {"retry-backoff", OPTION_UINT, OPTION_FIELD(retry_backoff_max_ms),
                                  0, 7 * 86400 * 1000, 0, "seconds (its longest wait)",
                                  OPTION_SECONDS},
    [OPTION_MAX_DEAD] = {"max-dead", OPTION_UINT, OPTION_FIELD(max_dead), 0, 100000000, 0, "jobs",
                         0},
    [OPTION_KEEP_RESULTS] = {"keep-results", OPTION_UINT, OPTION_FIELD(keep_results), 0,
                             86400 * 365, 0, "seconds", 0},
    [OPTION_MAX_RESULT] = {"max-result-size", OPTION_SIZE, OPTION_FIELD(max_result_size), 0,
                           UINT32_MAX, 1 << 20, "bytes", OPTION_SUFFIX},
    [OPTION_PRIORITY_AGING] = {"priority-aging", OPTION_UINT, OPTION_FIELD(priority_aging), 0,
                               7 * 86400, 0, "seconds", 0},
    [OPTION_STORE_BATCH] = {"store-batch", OPTION_UINT, OPTION_FIELD(store_batch), 1, 1000000,
                            10000, "submits", 0},
    [OPTION_STORE_INTERVAL] = {"store-commit-interval", OPTION_UINT,
                               OPTION_FIELD(store_commit_interval_ms), 0, 10000, 0, "milliseconds",
                               0},
    [OPTION_STORE_STUCK] = {"store-stuck-after", OPTION_UINT, OPTION_FIELD(store_stuck_secs), 1,
                            86400, 10, "seconds", 0},
    [OPTION_PG_STOP_GRACE] = {"pg-stop-grace-ms", OPTION_UINT, OPTION_FIELD(pg_stop_grace_ms), 0,
                              600000, 3000, "milliseconds", 0},
    [OPTION_PG_LEASE] = {"pg-lease", OPTION_UINT, OPTION_FIELD(pg_lease), 2, 86400, 30, "seconds",
                         0},
    [OPTION_PG_PREFETCH] = {"pg-prefetch", OPTION_UINT, OPTION_FIELD(pg_prefetch), 0, 100000, 8,
                            "jobs", 0},
    [OPTION_PG_POLL] = {"pg-poll-ms", OPTION_UINT, OPTION_FIELD(pg_poll_ms), 10, 3600000, 1000,
                        "milliseconds", 0},
    [OPTION_PG_CONFLICT_RETRIES] = {"pg-conflict-retries", OPTION_UINT,
                                    OPTION_FIELD(pg_conflict_retries), 0, 100, 3, "retries", 0},
    [OPTION_PG_TAKE_MAX] = {"pg-take-max", OPTION_UINT, OPTION_FIELD(pg_take_max), 1, 1000000, 2048,
                            "jobs", 0},
    [OPTION_HTTP_MAX_CONNECTIONS] = {"http-max-connections", OPTION_UINT,
                                     OPTION_FIELD(http_max_connections), 1, 65536, 64,
                                     "connections", 0},
    [OPTION_HTTP_TIMEOUT] = {"http-timeout", OPTION_UINT, OPTION_FIELD(http_timeout), 1, 3600, 10,
                             "seconds", 0},
    [OPTION_SCHEDULE_REFRESH] = {"schedule-refresh", OPTION_UINT, OPTION_FIELD(schedule_refresh), 1,
                                 3600, 5, "seconds", 0},
    [OPTION_FILE_DESCRIPTORS] = {"file-descriptors", OPTION_NOFIELD, 0, 1, 16u << 20, 0,
                                 "descriptors", 0},
    [OPTION_THREADS] = {"threads", OPTION_NOFIELD, 0, 0, 1024, 0, "threads", 0},
    [OPTION_WORKER_WAKEUP] = {"worker-wakeup", OPTION_NOFIELD, 0, 0, 1024, 0, "workers", 0},
    [OPTION_HASHTABLE_BUCKETS] = {"hashtable-buckets", OPTION_NOFIELD, 0, 1, UINT32_MAX, 0,
                                  "buckets", 0},
    [OPTION_MAX_QUEUE_AGE] = {"max-queue-age", OPTION_UINT, OPTION_FIELD(max_queue_age), 0,
                              86400 * 365, 0, "seconds", 0},
    [OPTION_UNIQUE_FOR] = {"unique-for", OPTION_UINT, OPTION_FIELD(unique_for), 0, 86400 * 365, 0,
                           "seconds", 0},
    /* Retention: kept results and the dead set are bounded by default (dsjobd(8) gives bytes). */
    [OPTION_MAX_KEPT] = {"max-kept", OPTION_UINT, OPTION_FIELD(max_kept), 1, 100000000, 100000,
                         "results", 0},
    [OPTION_DEAD_MAX_AGE] = {"dead-max-age", OPTION_UINT, OPTION_FIELD(dead_max_age), 0,
                             86400 * 3650, 604800, "seconds", 0},
    /* Dependencies (deps.c): the parents one submit may name. */
    [OPTION_MAX_AFTER] = {"max-after", OPTION_UINT, OPTION_FIELD(max_after), 1, 100000, 1000,
                          "jobs", 0},
    [OPTION_STORE_GRAB_WAIT] = {"store-grab-wait", OPTION_UINT, OPTION_FIELD(store_grab_wait_ms), 0,
                                1000, 10, "milliseconds", 0},
};

/* option_seconds writes ms as SECONDS[.FRACTION] ("1.5", "86400") into buf; returns buf. */
static inline char *
option_seconds(unsigned long long ms, char *buf, size_t len)
{
    if (ms % 1000 == 0)
        snprintf(buf, len, "%llu", ms / 1000);
    else if (ms % 100 == 0)
        snprintf(buf, len, "%llu.%llu", ms / 1000, ms % 1000 / 100);
    else if (ms % 10 == 0)
        snprintf(buf, len, "%llu.%02llu", ms / 1000, ms % 1000 / 10);
    else
        snprintf(buf, len, "%llu.%03llu", ms / 1000, ms % 1000);
    return buf;
}

/* option_store writes v into b's field of cfg; an int's -1 comes as (unsigned long long)-1. */
static inline void
option_store(struct dsjob_server_config *cfg, const struct option_bound *b, unsigned long long v)
{
    void *field = (char *)cfg + b->offset;

    switch (b->kind) {
    case OPTION_UINT: *(unsigned *)field = (unsigned)v; break;
    case OPTION_INT: *(int *)field = (int)(long long)v; break;
    case OPTION_SIZE: *(size_t *)field = (size_t)v; break;
    case OPTION_NOFIELD: break;
    }
}

/*
 * option_range_error writes why value (its text) is out of b's bounds into
 * buf: "--pg-lease must be between 2 and 86400 seconds, not 1". dsjobd and
 * dsjob_server_new say it in the same words.
 */
static inline void
option_range_error(const struct option_bound *b, const char *value, char *buf, size_t len)
{
    char min[32], max[32];

    if (b->flags & OPTION_SECONDS) {
        option_seconds(b->min, min, sizeof(min));
        option_seconds(b->max, max, sizeof(max));
    } else {
        snprintf(min, sizeof(min), "%llu", b->min);
        snprintf(max, sizeof(max), "%llu", b->max);
    }
    snprintf(buf, len, "--%s must be %sbetween %s and %s%s%s, not %s", b->name,
             b->flags & OPTION_UNSET ? "-1 or " : "", min, max, b->unit[0] ? " " : "", b->unit,
             value);
}

#define OPTION_MAX_TABLE 63 /* the longest name of gearmand's queue table, as PostgreSQL's */

/*
 * option_table_error writes into buf why s is no name of gearmand's queue
 * table for opt ("--libpq-table"), and returns true; false if s is one.
 * SQL quotes the name, but it must be one.
 */
static inline bool
option_table_error(const char *opt, const char *s, char *buf, size_t len)
{
    if (s[0] != '\0' && strlen(s) <= OPTION_MAX_TABLE)
        return false;
    snprintf(buf, len, "%s: '%.*s' must be 1 to %d bytes", opt, 2 * OPTION_MAX_TABLE, s,
             OPTION_MAX_TABLE);
    return true;
}

struct file_opt;

/* What dsjobd needs beside the server's config; the strings are owned here. */
struct opts {
    char *pid_file, *port_file, *log_file, *unix_socket; /* absolute paths, or NULL */
    char *http_port_file;                                /* absolute path, or NULL */
    char *work_dir, *store_db;                           /* absolute paths, or NULL */
    const char *user;                  /* --user, borrowed from argv or config_text */
    uid_t uid;                         /* --user's uid, looked up before binding */
    gid_t gid;                         /* and its group */
    bool daemon_mode;                  /* --daemon */
    bool check_args;                   /* --check-args: check the options, then exit */
    bool syslog;                       /* --syslog was given: warned about, not applied */
    rlim_t file_descriptors;           /* --file-descriptors, or 0 */
    const char *protocol;              /* --protocol: refused after --check-args, as gearmand */
    const char *config_file;           /* --config-file, borrowed from argv */
    char *config_text;                 /* the config file's text, split in place */
    struct file_opt *file_opts;        /* the config file's options, in order */
    size_t nfile_opts;                 /* entries in file_opts */
    size_t next_file_opt;              /* the next one next_option returns */
    char *ssl_cert, *ssl_key, *ssl_ca; /* absolute paths, or NULL */
};

/*
 * options_parse fills cfg and o: from the --config-file first, if one is
 * given, then from argv, so that the command line overrides the file
 * wherever --config-file stands. An option given again keeps its last
 * value; a repeatable one (--listen, --admin-allow) given on the command
 * line replaces the file's list. It exits for --help, --version (0) and a
 * usage error (2, with a message that names the option, and FILE:LINE for
 * the file's). Strings in cfg are borrowed from argv or from o; release o
 * with options_release.
 */
void options_parse(int argc, char **argv, struct dsjob_server_config *cfg, struct opts *o);

/* options_release frees what options_parse kept in o. */
void options_release(struct opts *o);

/* options_die prints "dsjobd: " and the message, points at --help and exits 2. */
void options_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
