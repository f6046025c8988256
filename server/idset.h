/*
 * A set of 64-bit ids (job ids): open addressing with linear probing and
 * backward-shift deletes, so that it stays compact with no tombstones
 * however many ids come and go. The memcached store keeps the ids its
 * index holds in one. Not thread-safe; the zeroed struct is an empty set.
 */
#ifndef DSJOB_SERVER_IDSET_H
#define DSJOB_SERVER_IDSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct idset {
    uint64_t *slots; /* 0 is an empty slot; id 0 lives in has_zero */
    size_t cap;      /* a power of two, or 0 */
    size_t n;        /* ids in slots, not counting zero */
    bool has_zero;   /* id 0 is in the set */
};

/* idset_has tells whether id is in s. */
bool idset_has(const struct idset *s, uint64_t id);

/* idset_add puts id in s (a no-op if it is there): 0, or -1 if out of memory (s unchanged). */
int idset_add(struct idset *s, uint64_t id);

/* idset_del takes id out of s; an id not in s is not an error. */
void idset_del(struct idset *s, uint64_t id);

/* idset_count is the number of ids in s. */
size_t idset_count(const struct idset *s);

/*
 * idset_list returns the ids of s in no particular order, as an array of
 * idset_count(s) entries that the caller frees; NULL if out of memory.
 */
uint64_t *idset_list(const struct idset *s);

/* idset_release frees s's memory and leaves it empty. */
void idset_release(struct idset *s);

#endif
