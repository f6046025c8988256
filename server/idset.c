/*
 * The id set: an open-addressing hash set of uint64_t with linear probing.
 * Id 0, which marks an empty slot, is kept in a flag of its own. The table
 * doubles at three quarters full; deletion shifts later members of the
 * probe run back into the hole (no tombstones), so lookups never degrade
 * however many ids come and go, as the memcached store's live ids do.
 */
#include "config.h"
#include "idset.h"

#include <stdlib.h>
#include <string.h>

static size_t
id_hash(uint64_t id, size_t cap)
{
    id ^= id >> 30, id *= 0xbf58476d1ce4e5b9ULL; /* splitmix64's finalizer */
    id ^= id >> 27, id *= 0x94d049bb133111ebULL;
    id ^= id >> 31;
    return (size_t)id & (cap - 1);
}

static int
idset_grow(struct idset *s)
{
    size_t cap = s->cap ? s->cap * 2 : 1024, i, k;
    uint64_t *slots = calloc(cap, sizeof(*slots));

    if (slots == NULL)
        return -1;
    for (i = 0; i < s->cap; i++) {
        if (s->slots[i] == 0)
            continue;
        for (k = id_hash(s->slots[i], cap); slots[k] != 0; k = (k + 1) & (cap - 1))
            ;
        slots[k] = s->slots[i];
    }
    free(s->slots);
    s->slots = slots;
    s->cap = cap;
    return 0;
}

/* idset_find gives the slot of id, or of the empty slot where it would go. */
static size_t
idset_find(const struct idset *s, uint64_t id)
{
    size_t k;

    for (k = id_hash(id, s->cap); s->slots[k] != 0 && s->slots[k] != id; k = (k + 1) & (s->cap - 1))
        ;
    return k;
}

bool
idset_has(const struct idset *s, uint64_t id)
{
    if (id == 0)
        return s->has_zero;
    return s->cap != 0 && s->slots[idset_find(s, id)] == id;
}

int
idset_add(struct idset *s, uint64_t id)
{
    size_t k;

    if (id == 0) {
        s->has_zero = true;
        return 0;
    }
    if ((s->n + 1) * 4 > s->cap * 3 && idset_grow(s) != 0)
        return -1;
    k = idset_find(s, id);
    if (s->slots[k] == 0) {
        s->slots[k] = id;
        s->n++;
    }
    return 0;
}

void
idset_del(struct idset *s, uint64_t id)
{
    size_t hole, k, home, mask = s->cap - 1;

    if (id == 0) {
        s->has_zero = false;
        return;
    }
    if (s->cap == 0 || s->slots[hole = idset_find(s, id)] != id)
        return;
    /* Shift later members of the probe run back so no lookup stops early at the hole. */
    for (k = (hole + 1) & mask; s->slots[k] != 0; k = (k + 1) & mask) {
        home = id_hash(s->slots[k], s->cap);
        if (((k - home) & mask) >= ((k - hole) & mask)) {
            s->slots[hole] = s->slots[k];
            hole = k;
        }
    }
    s->slots[hole] = 0;
    s->n--;
}

size_t
idset_count(const struct idset *s)
{
    return s->n + s->has_zero;
}

uint64_t *
idset_list(const struct idset *s)
{
    uint64_t *ids;
    size_t i, n = 0;

    ids = malloc((idset_count(s) + 1) * sizeof(*ids));
    if (ids == NULL)
        return NULL;
    if (s->has_zero)
        ids[n++] = 0;
    for (i = 0; i < s->cap; i++)
        if (s->slots[i] != 0)
            ids[n++] = s->slots[i];
    return ids;
}

void
idset_release(struct idset *s)
{
    free(s->slots);
    memset(s, 0, sizeof(*s));
}
