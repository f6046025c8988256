/*
 * Log lines look like
 *   2026-12-02 17:58:01.123 WARNING conn.c:210 conn_read: 127.0.0.1:40112: bad magic
 * Written with one fprintf on a line-buffered stream, so lines from one
 * process do not interleave.
 */
#include "config.h"
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

static const char *const log_names[] = {
    [DSJOB_LOG_FATAL] = "FATAL", [DSJOB_LOG_ALERT] = "ALERT",     [DSJOB_LOG_CRITICAL] = "CRITICAL",
    [DSJOB_LOG_ERROR] = "ERROR", [DSJOB_LOG_WARNING] = "WARNING", [DSJOB_LOG_NOTICE] = "NOTICE",
    [DSJOB_LOG_INFO] = "INFO",   [DSJOB_LOG_DEBUG] = "DEBUG",
};

const char *
log_level_name(enum dsjob_log_level level)
{
    if ((unsigned)level > DSJOB_LOG_DEBUG)
        return "DEBUG";
    return log_names[level];
}

int
log_level_parse(const char *s)
{
    char *end;
    long n;
    int i;

    for (i = 0; i <= DSJOB_LOG_DEBUG; i++)
        if (strcasecmp(s, log_names[i]) == 0)
            return i;
    n = strtol(s, &end, 10);
    if (*s != '\0' && *end == '\0' && n >= 0 && n <= DSJOB_LOG_DEBUG)
        return (int)n;
    return -1;
}

static int
log_open_path(struct log *lg)
{
    FILE *fp = fopen(lg->path, "a");

    if (fp == NULL)
        return -1;
    setvbuf(fp, NULL, _IOLBF, 0);
    if (lg->fp != NULL && lg->fp != stderr)
        fclose(lg->fp);
    lg->fp = fp;
    return 0;
}

int
log_open(struct log *lg, const char *dest, enum dsjob_log_level level)
{
    lg->level = level;
    lg->path = NULL;
    lg->fp = NULL;
    if (dest == NULL || strcmp(dest, "stderr") == 0) {
        lg->fp = stderr;
        return 0;
    }
    if (strcmp(dest, "none") == 0)
        return 0;
    lg->path = strdup(dest);
    if (lg->path == NULL)
        return -1;
    return log_open_path(lg);
}

int
log_reopen(struct log *lg)
{
    return lg->path ? log_open_path(lg) : 0;
}

void
log_release(struct log *lg)
{
    if (lg->fp != NULL && lg->fp != stderr)
        fclose(lg->fp);
    lg->fp = NULL;
    free(lg->path);
    lg->path = NULL;
}

void
log_write(struct log *lg, enum dsjob_log_level level, const char *file, int line, const char *func,
          const char *fmt, ...)
{
    char msg[1024];
    char when[32];
    struct timeval tv;
    struct tm tm;
    const char *base = strrchr(file, '/');
    int saved = errno;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
    fprintf(lg->fp, "%s.%03ld %s %s:%d %s: %s\n", when, (long)(tv.tv_usec / 1000),
            log_level_name(level), base ? base + 1 : file, line, func, msg);
    errno = saved;
}
