/*
 * Fuzz the admin line parser with every line of the input: no word may
 * point outside the line, and a recognised command's arguments must start
 * after its command words.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "proto/textcmd.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *line = (const char *)data;
    const char *end = line + size;

    while (line < end) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t len = nl ? (size_t)(nl - line) : (size_t)(end - line);
        struct textcmd cmd;
        unsigned i;

        textcmd_parse(line, len, &cmd);
        if (cmd.nwords > TEXTCMD_MAX_WORDS)
            abort();
        for (i = 0; i < cmd.nwords; i++)
            if (cmd.word[i] < line || cmd.word[i] + cmd.word_len[i] > line + len ||
                cmd.word_len[i] == 0)
                abort();
        if (cmd.kind != TEXTCMD_EMPTY && cmd.kind != TEXTCMD_UNKNOWN &&
            (cmd.first_arg == 0 || cmd.first_arg > cmd.nwords))
            abort();
        line += len + 1;
    }
    return 0;
}
