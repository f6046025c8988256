/*
 * A binary min-heap of pointers. Each element knows its own position (the
 * setpos callback records it), so any element can be removed in O(log n),
 * which epoch jobs need when they are cancelled or their function dropped.
 */
#ifndef DSJOB_SERVER_HEAP_H
#define DSJOB_SERVER_HEAP_H

#include <stdbool.h>
#include <stddef.h>

typedef bool heap_less_fn(const void *a, const void *b);
typedef void heap_setpos_fn(void *elem, size_t pos);

struct heap {
    void **elems;           /* elems[0] is the least */
    size_t len;             /* elements held */
    size_t cap;             /* room in elems */
    heap_less_fn *less;     /* the order */
    heap_setpos_fn *setpos; /* told each element's new index */
};

void heap_init(struct heap *h, heap_less_fn *less, heap_setpos_fn *setpos);
void heap_release(struct heap *h);

/* heap_insert adds elem (borrowed). Returns 0, or -1 if out of memory. */
int heap_insert(struct heap *h, void *elem);

/* heap_peek returns the least element, or NULL. */
void *heap_peek(const struct heap *h);

/* heap_remove takes out the element at pos and returns it. */
void *heap_remove(struct heap *h, size_t pos);

#endif
