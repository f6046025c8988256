/*
 * Chained hash table with power-of-two sizing. Chains are singly linked:
 * removal walks the chain, which the load factor keeps at about one node.
 */
#include "config.h"
#include "hmap.h"

#include <stdlib.h>
#include <string.h>

uint32_t
hmap_hash(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t i;

    for (i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return (uint32_t)(h ^ (h >> 32));
}

void
hmap_init(struct hmap *m, hmap_key_fn *key)
{
    m->buckets = NULL;
    m->nbuckets = 0;
    m->count = 0;
    m->key = key;
}

void
hmap_release(struct hmap *m)
{
    free(m->buckets);
    hmap_init(m, m->key);
}

struct hnode *
hmap_find(const struct hmap *m, const void *key, size_t len)
{
    uint32_t h;
    struct hnode *n;

    if (m->nbuckets == 0 || len > UINT32_MAX)
        return NULL;
    h = hmap_hash(key, len);
    for (n = m->buckets[h & (m->nbuckets - 1)]; n != NULL; n = n->next)
        if (n->hash == h && n->klen == len && memcmp(m->key(n), key, len) == 0)
            return n;
    return NULL;
}

static int
hmap_grow(struct hmap *m)
{
    size_t size = m->nbuckets ? m->nbuckets * 2 : 16;
    struct hnode **b = calloc(size, sizeof(*b));
    size_t i;

    if (b == NULL)
        return -1;
    for (i = 0; i < m->nbuckets; i++) {
        struct hnode *n = m->buckets[i];

        while (n != NULL) {
            struct hnode *next = n->next;
            size_t at = n->hash & (size - 1);

            n->next = b[at];
            b[at] = n;
            n = next;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = size;
    return 0;
}

int
hmap_insert(struct hmap *m, struct hnode *node, const void *key, size_t len)
{
    size_t at;

    if (len > UINT32_MAX)
        return -1;
    if (m->count >= m->nbuckets && hmap_grow(m) < 0 && m->nbuckets == 0)
        return -1;
    node->hash = hmap_hash(key, len);
    node->klen = (uint32_t)len;
    at = node->hash & (m->nbuckets - 1);
    node->next = m->buckets[at];
    m->buckets[at] = node;
    m->count++;
    return 0;
}

void
hmap_remove(struct hmap *m, struct hnode *node)
{
    struct hnode **pp = &m->buckets[node->hash & (m->nbuckets - 1)];

    while (*pp != node)
        pp = &(*pp)->next;
    *pp = node->next;
    node->next = NULL;
    m->count--;
}

struct hnode *
hmap_next(const struct hmap *m, struct hnode *node, size_t *bucket)
{
    if (node != NULL && node->next != NULL)
        return node->next;
    if (node != NULL)
        (*bucket)++;
    for (; *bucket < m->nbuckets; (*bucket)++)
        if (m->buckets[*bucket] != NULL)
            return m->buckets[*bucket];
    return NULL;
}
