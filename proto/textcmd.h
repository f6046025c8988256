/*
 * The Gearman text admin protocol, parsed: one line in, a command and its
 * words out. Pure, like packet.h: no I/O and no allocation.
 */
#ifndef DSJOB_PROTO_TEXTCMD_H
#define DSJOB_PROTO_TEXTCMD_H

#include <stddef.h>

#define TEXTCMD_MAX_WORDS 8
#define TEXTCMD_MAX_LINE 8192 /* longest admin line accepted, without its newline */

enum textcmd_kind {
    TEXTCMD_EMPTY,   /* a blank line */
    TEXTCMD_UNKNOWN, /* not a command we know */
    TEXTCMD_STATUS,
    TEXTCMD_WORKERS,
    TEXTCMD_VERSION,
    TEXTCMD_GETPID,
    TEXTCMD_VERBOSE,
    TEXTCMD_MAXQUEUE, /* maxqueue FUNCTION [MAX | HIGH NORMAL LOW] */
    TEXTCMD_SHOW_JOBS,
    TEXTCMD_SHOW_UNIQUE_JOBS,
    TEXTCMD_CANCEL_JOB,      /* cancel job HANDLE */
    TEXTCMD_CREATE_FUNCTION, /* create function NAME */
    TEXTCMD_DROP_FUNCTION,   /* drop function NAME */
    TEXTCMD_PRIORITYSTATUS,
    TEXTCMD_SHUTDOWN,     /* shutdown [graceful] */
    TEXTCMD_SHOW_UNKNOWN, /* show followed by something else */
    TEXTCMD_SHOW_JOB,     /* show job HANDLE | show job unique FUNCTION UNIQUE */
    TEXTCMD_SHOW_DEAD,    /* show dead [FUNCTION] */
    TEXTCMD_SHOW_RESULT,  /* show result HANDLE | show result unique FUNCTION UNIQUE */
    TEXTCMD_RETRY_DEAD,   /* retry dead HANDLE|FUNCTION */
    TEXTCMD_DROP_DEAD,    /* drop dead HANDLE|FUNCTION */
    TEXTCMD_RETRY,        /* retry FUNCTION [N [BASE [MAX]]] */
    TEXTCMD_PRIORITY,     /* priority HANDLE high|normal|low */
    TEXTCMD_STATS,        /* stats: the counters, one sample a line */
    TEXTCMD_LIMIT,        /* limit [FUNCTION [SETTINGS...]]: flow control */
    TEXTCMD_PAUSE,        /* pause FUNCTION */
    TEXTCMD_RESUME,       /* resume FUNCTION */
    TEXTCMD_MAXAGE,       /* maxage FUNCTION [SECONDS] */
    TEXTCMD_UNIQUEFOR,    /* uniquefor FUNCTION [SECONDS] */
    TEXTCMD_SCHEDULE,     /* schedule add|list|pause|resume|rm ... (quoted words: schedule.c) */
    TEXTCMD_BATCH,        /* batch open|close|status|list|drop ... (batch.c) */
};

/* A parsed admin line. Words are borrowed from the line. */
struct textcmd {
    enum textcmd_kind kind;              /* what the line asks */
    unsigned nwords;                     /* words on the line */
    const char *word[TEXTCMD_MAX_WORDS]; /* each word's first byte */
    size_t word_len[TEXTCMD_MAX_WORDS];  /* each word's length */
    unsigned first_arg;                  /* index of the first argument after the command words */
};

/*
 * textcmd_parse splits the len bytes of line (no newline; a trailing CR is
 * ignored) into words separated by blanks and names the command. Words past
 * TEXTCMD_MAX_WORDS are dropped. Command words match regardless of case, as
 * in gearmand.
 */
void textcmd_parse(const char *line, size_t len, struct textcmd *cmd);

/* textcmd_argc returns the number of arguments after the command words. */
unsigned textcmd_argc(const struct textcmd *cmd);

#endif
