/*
 * Admin line parser. gearmand 1.1.20 splits an admin line on spaces (a tab
 * is part of a word) and compares the first words with its command names
 * regardless of case; so do we, which keeps "show jobs", "show  jobs" and
 * "SHOW JOBS" meaning the same thing to both. Unlike gearmand, a line with
 * many words is not a reason to drop the connection: extra words are
 * ignored (doc/gearmand-observed.md 2.1).
 */
#include "config.h"
#include "textcmd.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

struct textcmd_name {
    const char *w1;         /* first word */
    const char *w2;         /* second word, or NULL */
    enum textcmd_kind kind; /* the command they name */
};

static const struct textcmd_name textcmd_names[] = {
    {"status", NULL, TEXTCMD_STATUS},
    {"workers", NULL, TEXTCMD_WORKERS},
    {"version", NULL, TEXTCMD_VERSION},
    {"getpid", NULL, TEXTCMD_GETPID},
    {"verbose", NULL, TEXTCMD_VERBOSE},
    {"maxqueue", NULL, TEXTCMD_MAXQUEUE},
    {"show", "jobs", TEXTCMD_SHOW_JOBS},
    {"show", "unique", TEXTCMD_SHOW_UNIQUE_JOBS}, /* "show unique jobs" */
    {"cancel", "job", TEXTCMD_CANCEL_JOB},
    {"create", "function", TEXTCMD_CREATE_FUNCTION},
    {"drop", "function", TEXTCMD_DROP_FUNCTION},
    {"prioritystatus", NULL, TEXTCMD_PRIORITYSTATUS},
    {"shutdown", NULL, TEXTCMD_SHUTDOWN},
    {"show", "job", TEXTCMD_SHOW_JOB},
    {"show", "dead", TEXTCMD_SHOW_DEAD},
    {"show", "result", TEXTCMD_SHOW_RESULT},
    {"retry", "dead", TEXTCMD_RETRY_DEAD}, /* before "retry": a function named dead cannot be set */
    {"drop", "dead", TEXTCMD_DROP_DEAD},
    {"retry", NULL, TEXTCMD_RETRY},
    {"priority", NULL, TEXTCMD_PRIORITY},
    {"stats", NULL, TEXTCMD_STATS},
    {"limit", NULL, TEXTCMD_LIMIT},
    {"pause", NULL, TEXTCMD_PAUSE},
    {"resume", NULL, TEXTCMD_RESUME},
    {"maxage", NULL, TEXTCMD_MAXAGE},
    {"uniquefor", NULL, TEXTCMD_UNIQUEFOR},
    {"schedule", NULL, TEXTCMD_SCHEDULE},
    {"batch", NULL, TEXTCMD_BATCH},
};

static bool
word_is(const struct textcmd *cmd, unsigned i, const char *s)
{
    return i < cmd->nwords && cmd->word_len[i] == strlen(s) &&
           strncasecmp(cmd->word[i], s, cmd->word_len[i]) == 0;
}

void
textcmd_parse(const char *line, size_t len, struct textcmd *cmd)
{
    size_t i = 0;
    size_t n;

    memset(cmd, 0, sizeof(*cmd));
    if (len > 0 && line[len - 1] == '\r')
        len--;
    while (i < len && cmd->nwords < TEXTCMD_MAX_WORDS) {
        while (i < len && line[i] == ' ')
            i++;
        if (i == len)
            break;
        cmd->word[cmd->nwords] = line + i;
        while (i < len && line[i] != ' ')
            i++;
        cmd->word_len[cmd->nwords] = (size_t)(line + i - cmd->word[cmd->nwords]);
        cmd->nwords++;
    }
    if (cmd->nwords == 0) {
        cmd->kind = TEXTCMD_EMPTY;
        return;
    }
    cmd->kind = TEXTCMD_UNKNOWN;
    for (n = 0; n < sizeof(textcmd_names) / sizeof(textcmd_names[0]); n++) {
        const struct textcmd_name *name = &textcmd_names[n];

        if (!word_is(cmd, 0, name->w1))
            continue;
        if (name->w2 && !word_is(cmd, 1, name->w2))
            continue;
        cmd->kind = name->kind;
        cmd->first_arg = name->w2 ? 2 : 1;
        if (name->kind == TEXTCMD_SHOW_UNIQUE_JOBS) {
            if (!word_is(cmd, 2, "jobs")) {
                cmd->kind = TEXTCMD_UNKNOWN;
                cmd->first_arg = 0;
                continue;
            }
            cmd->first_arg = 3;
        }
        return;
    }
    if (cmd->nwords >= 2 && word_is(cmd, 0, "show")) {
        cmd->kind = TEXTCMD_SHOW_UNKNOWN; /* gearmand: ERR UNKNOWN_SHOW_ARGUMENTS */
        cmd->first_arg = 1;
    }
}

unsigned
textcmd_argc(const struct textcmd *cmd)
{
    return cmd->nwords > cmd->first_arg ? cmd->nwords - cmd->first_arg : 0;
}
