/*
 * The allocator of the dsjob libraries: dsjob_malloc and dsjob_free, which
 * callers use to free what a library returns, and a process-wide hook to
 * replace them (for tests that fail the Nth allocation, or for embedding in
 * a program with its own allocator). Defined here, in libdsjobclient only:
 * libdsjobworker links libdsjobclient and calls these, so the process has
 * one allocator state whatever the libraries' link order or binding.
 */
#include "config.h"

#include <stdlib.h>

#include <dsjob/common.h>

static void *(*alloc_malloc)(size_t) = malloc; /* current allocator */
static void (*alloc_free)(void *) = free;      /* its matching free */

void *
dsjob_malloc(size_t size)
{
    return alloc_malloc(size == 0 ? 1 : size);
}

void
dsjob_free(void *ptr)
{
    if (ptr != NULL)
        alloc_free(ptr);
}

void
dsjob_set_alloc_funcs(void *(*malloc_fn)(size_t), void (*free_fn)(void *))
{
    if (malloc_fn == NULL || free_fn == NULL) {
        alloc_malloc = malloc;
        alloc_free = free;
        return;
    }
    alloc_malloc = malloc_fn;
    alloc_free = free_fn;
}
