/*
 * Server logging: a level, a destination (stderr, a file, or nothing), a
 * format (text or JSON) and one line per event with the level, file:line
 * and function; job events (log_job) have fields of their own. One struct
 * log per server, so several in-process servers keep separate logs.
 */
#ifndef DSJOB_SERVER_LOG_H
#define DSJOB_SERVER_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <dsjob/server.h>

struct log {
    FILE *fp;                   /* destination, or NULL to discard */
    char *path;                 /* file to (re)open, or NULL for stderr/none */
    enum dsjob_log_level level; /* most verbose level written */
    bool json;                  /* one JSON object a line (--log-format json) */
};

/*
 * log_open points lg at dest ("stderr", "none" or a file path, appended to).
 * Returns 0, or -1 with errno set if the file cannot be opened.
 */
int log_open(struct log *lg, const char *dest, enum dsjob_log_level level);

/* log_reopen reopens a log file (after rotation); stderr and none are kept. */
int log_reopen(struct log *lg);

/* log_release closes the file and frees the path. */
void log_release(struct log *lg);

/* log_level_name returns "ERROR", "INFO", ... for a level. */
const char *log_level_name(enum dsjob_log_level level);

/* log_level_parse reads a level name (any case) or number; -1 if unknown. */
int log_level_parse(const char *s);

void log_write(struct log *lg, enum dsjob_log_level level, const char *file, int line,
               const char *func, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* LOG_ON is true when lines of level lvl are written: check it before formatting anything. */
#define LOG_ON(lg, lvl) ((lg)->fp != NULL && (lvl) <= (lg)->level)

/*
 * log_job writes one job event (submitted, assigned, completed, failed,
 * requeued, refused) with who caused it (peer, "ip:port", or NULL), the
 * job's handle (NULL when there is none, as for a refused submit), its
 * function (func_len bytes, escaped as needed) and why (NULL or a text of
 * the server's own; never a payload, a result or a worker's text). Call it
 * through LOG_JOB, which costs one comparison when the level is off.
 */
void log_job(struct log *lg, enum dsjob_log_level level, const char *event, const char *peer,
             const char *handle, const char *func, size_t func_len, const char *why);

#define LOG_JOB(lg, lvl, ...)                                                                      \
    do {                                                                                           \
        if (LOG_ON(lg, lvl))                                                                       \
            log_job((lg), (lvl), __VA_ARGS__);                                                     \
    } while (0)

#define LOG_AT(lg, lvl, ...)                                                                       \
    do {                                                                                           \
        if (LOG_ON(lg, lvl))                                                                       \
            log_write((lg), (lvl), __FILE__, __LINE__, __func__, __VA_ARGS__);                     \
    } while (0)
#define log_err(lg, ...) LOG_AT(lg, DSJOB_LOG_ERROR, __VA_ARGS__)
#define log_warn(lg, ...) LOG_AT(lg, DSJOB_LOG_WARNING, __VA_ARGS__)
#define log_notice(lg, ...) LOG_AT(lg, DSJOB_LOG_NOTICE, __VA_ARGS__)
#define log_info(lg, ...) LOG_AT(lg, DSJOB_LOG_INFO, __VA_ARGS__)
#define log_debug(lg, ...) LOG_AT(lg, DSJOB_LOG_DEBUG, __VA_ARGS__)

#endif
