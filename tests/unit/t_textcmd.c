/*
 * The admin line parser: command words, arguments, blanks, CR, and lines
 * that only look like commands.
 */
#include "config.h"

#include <string.h>

#include "proto/textcmd.h"
#include "tap.h"

static enum textcmd_kind
kind(const char *line)
{
    struct textcmd cmd;

    textcmd_parse(line, strlen(line), &cmd);
    return cmd.kind;
}

int
main(void)
{
    struct textcmd cmd;
    const char *line;

    tap_is_int(kind("status"), TEXTCMD_STATUS, "status");
    tap_is_int(kind("status\r"), TEXTCMD_STATUS, "status with CR");
    tap_is_int(kind("  workers  "), TEXTCMD_WORKERS, "workers with blanks");
    tap_is_int(kind("version"), TEXTCMD_VERSION, "version");
    tap_is_int(kind("getpid"), TEXTCMD_GETPID, "getpid");
    tap_is_int(kind("verbose"), TEXTCMD_VERBOSE, "verbose");
    tap_is_int(kind("show jobs"), TEXTCMD_SHOW_JOBS, "show jobs");
    tap_is_int(kind("show unique jobs"), TEXTCMD_SHOW_UNIQUE_JOBS, "show unique jobs");
    tap_is_int(kind("show unique"), TEXTCMD_SHOW_UNKNOWN,
               "show unique (no jobs): bad show arguments");
    tap_is_int(kind("show foo"), TEXTCMD_SHOW_UNKNOWN, "show foo: bad show arguments");
    tap_is_int(kind("show"), TEXTCMD_UNKNOWN, "show alone is unknown");
    tap_is_int(kind("prioritystatus"), TEXTCMD_PRIORITYSTATUS, "prioritystatus");
    tap_is_int(kind("shutdown graceful"), TEXTCMD_SHUTDOWN, "shutdown graceful");
    tap_is_int(kind("priority H:x:1 high"), TEXTCMD_PRIORITY, "priority HANDLE high");
    tap_is_int(kind("PRIORITY H:x:1 low"), TEXTCMD_PRIORITY, "PRIORITY in any case");
    tap_is_int(kind("stats"), TEXTCMD_STATS, "stats");
    tap_is_int(kind("STATS\r"), TEXTCMD_STATS, "STATS with a CR");
    tap_is_int(kind("statsx"), TEXTCMD_UNKNOWN, "statsx is unknown");
    tap_is_int(kind("STATUS"), TEXTCMD_STATUS, "commands match regardless of case (gearmand)");
    tap_is_int(kind("Show Unique JOBS"), TEXTCMD_SHOW_UNIQUE_JOBS, "two- and three-word ones too");
    tap_is_int(kind("status\tx"), TEXTCMD_UNKNOWN, "a tab is part of a word (gearmand)");
    tap_is_int(kind(""), TEXTCMD_EMPTY, "empty line");
    tap_is_int(kind("  \r"), TEXTCMD_EMPTY, "blank line");
    tap_is_int(kind("statusx"), TEXTCMD_UNKNOWN, "a longer word is not the command");

    line = "maxqueue  reverse 1 2 3";
    textcmd_parse(line, strlen(line), &cmd);
    tap_is_int(cmd.kind, TEXTCMD_MAXQUEUE, "maxqueue with three limits");
    tap_is_int(textcmd_argc(&cmd), 4, "four arguments");
    tap_is_mem(cmd.word[cmd.first_arg], cmd.word_len[cmd.first_arg], "reverse", 7,
               "function first");
    tap_is_mem(cmd.word[cmd.first_arg + 3], cmd.word_len[cmd.first_arg + 3], "3", 1, "low last");

    line = "cancel job H:host:12\r";
    textcmd_parse(line, strlen(line), &cmd);
    tap_is_int(cmd.kind, TEXTCMD_CANCEL_JOB, "cancel job");
    tap_is_int(textcmd_argc(&cmd), 1, "one argument");
    tap_is_mem(cmd.word[cmd.first_arg], cmd.word_len[cmd.first_arg], "H:host:12", 9,
               "the handle, without the CR");

    tap_is_int(kind("show job H:x:1"), TEXTCMD_SHOW_JOB, "show job");
    tap_is_int(kind("show dead"), TEXTCMD_SHOW_DEAD, "show dead");
    tap_is_int(kind("show result H:x:1"), TEXTCMD_SHOW_RESULT, "show result");
    tap_is_int(kind("drop dead f"), TEXTCMD_DROP_DEAD, "drop dead");
    tap_is_int(kind("drop function f"), TEXTCMD_DROP_FUNCTION, "drop function still");
    line = "retry dead H:x:1";
    textcmd_parse(line, strlen(line), &cmd);
    tap_is_int(cmd.kind, TEXTCMD_RETRY_DEAD, "retry dead");
    tap_is_mem(cmd.word[cmd.first_arg], cmd.word_len[cmd.first_arg], "H:x:1", 5,
               "retry dead: the handle");
    line = "retry resize 5 1 60";
    textcmd_parse(line, strlen(line), &cmd);
    tap_is_int(cmd.kind, TEXTCMD_RETRY, "retry FUNCTION N BASE MAX");
    tap_is_int(textcmd_argc(&cmd), 4, "retry: four arguments");
    tap_is_mem(cmd.word[cmd.first_arg], cmd.word_len[cmd.first_arg], "resize", 6,
               "retry: the function first");

    line = "a b c d e f g h i j k";
    textcmd_parse(line, strlen(line), &cmd);
    tap_is_int(cmd.nwords, TEXTCMD_MAX_WORDS, "words past the maximum are dropped");
    return tap_done();
}
