/*
 * An LD_PRELOAD shim for the dsjob tests: with FAILREALLOC_SIZE=N in the
 * environment, the first realloc of a non-NULL block to N bytes fails
 * (ENOMEM), in a program named dsjob (not in the shell of libtool's
 * wrapper). The block it was given must still be freed before the
 * process exits; if it is not, the shim writes "failrealloc: leaked" to
 * standard error at exit. It calls glibc's own functions underneath.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *__libc_realloc(void *p, size_t n);
void __libc_free(void *p);

static void *kept; /* the block of the failed realloc, until freed */
static int failed; /* the one failure is spent */

void *realloc(void *p, size_t n);
void free(void *p);

void *
realloc(void *p, size_t n)
{
    const char *want = failed ? NULL : getenv("FAILREALLOC_SIZE");

    if (want != NULL && strstr(program_invocation_short_name, "dsjob") != NULL && p != NULL &&
        n == (size_t)strtoul(want, NULL, 10)) {
        failed = 1;
        kept = p;
        errno = ENOMEM;
        return NULL;
    }
    return __libc_realloc(p, n);
}

void
free(void *p)
{
    if (p != NULL && p == kept)
        kept = NULL;
    __libc_free(p);
}

__attribute__((destructor)) static void
failrealloc_check(void)
{
    static const char msg[] = "failrealloc: leaked\n";

    if (kept != NULL && write(2, msg, sizeof(msg) - 1) < 0)
        return;
}
