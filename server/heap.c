/*
 * Array-backed binary heap, sifted in place.
 */
#include "config.h"
#include "heap.h"

#include <stdlib.h>

void
heap_init(struct heap *h, heap_less_fn *less, heap_setpos_fn *setpos)
{
    h->elems = NULL;
    h->len = 0;
    h->cap = 0;
    h->less = less;
    h->setpos = setpos;
}

void
heap_release(struct heap *h)
{
    free(h->elems);
    h->elems = NULL;
    h->len = 0;
    h->cap = 0;
}

static void
heap_set(struct heap *h, size_t pos, void *elem)
{
    h->elems[pos] = elem;
    h->setpos(elem, pos);
}

static void
heap_sift_up(struct heap *h, size_t pos)
{
    void *elem = h->elems[pos];

    while (pos > 0) {
        size_t parent = (pos - 1) / 2;

        if (!h->less(elem, h->elems[parent]))
            break;
        heap_set(h, pos, h->elems[parent]);
        pos = parent;
    }
    heap_set(h, pos, elem);
}

static void
heap_sift_down(struct heap *h, size_t pos)
{
    void *elem = h->elems[pos];

    for (;;) {
        size_t child = 2 * pos + 1;

        if (child >= h->len)
            break;
        if (child + 1 < h->len && h->less(h->elems[child + 1], h->elems[child]))
            child++;
        if (!h->less(h->elems[child], elem))
            break;
        heap_set(h, pos, h->elems[child]);
        pos = child;
    }
    heap_set(h, pos, elem);
}

int
heap_insert(struct heap *h, void *elem)
{
    if (h->len == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        void **e = realloc(h->elems, cap * sizeof(*e));

        if (e == NULL)
            return -1;
        h->elems = e;
        h->cap = cap;
    }
    h->elems[h->len++] = elem;
    heap_sift_up(h, h->len - 1);
    return 0;
}

void *
heap_peek(const struct heap *h)
{
    return h->len ? h->elems[0] : NULL;
}

void *
heap_remove(struct heap *h, size_t pos)
{
    void *elem = h->elems[pos];

    h->len--;
    if (pos < h->len) {
        heap_set(h, pos, h->elems[h->len]);
        heap_sift_down(h, pos);
        heap_sift_up(h, pos);
    }
    return elem;
}
