/*
 * An intrusive hash table keyed by byte strings: the node lives inside the
 * object it indexes, so inserting allocates nothing but the occasional
 * bucket array. The node keeps only the key's hash and length; the table's
 * key function finds the key bytes from the node (they live in the indexed
 * object), which keeps a node at 16 bytes, one per queued job and index.
 * The table doubles when it holds more entries than buckets, so lookups
 * stay O(1) however deep a queue gets (gearmand's fixed 991 buckets are what
 * slow its large queues down).
 */
#ifndef DSJOB_SERVER_HMAP_H
#define DSJOB_SERVER_HMAP_H

#include <stddef.h>
#include <stdint.h>

struct hnode {
    struct hnode *next; /* next node in the bucket */
    uint32_t hash;      /* hash of the key, kept to skip compares and rehash */
    uint32_t klen;      /* key length */
};

/*
 * hmap_key_fn returns the key bytes of the object that holds node (borrowed:
 * they must stay put while the node is in the table).
 */
typedef const void *hmap_key_fn(const struct hnode *node);

struct hmap {
    struct hnode **buckets; /* nbuckets chains */
    size_t nbuckets;        /* a power of two, or 0 before the first insert */
    size_t count;           /* nodes held */
    hmap_key_fn *key;       /* finds a node's key bytes */
};

/* hmap_hash hashes len bytes (FNV-1a, 64 bit, folded to 32). */
uint32_t hmap_hash(const void *key, size_t len);

/* hmap_init makes an empty table whose nodes' keys key() finds. */
void hmap_init(struct hmap *m, hmap_key_fn *key);

/* hmap_release frees the bucket array; the nodes belong to their objects. */
void hmap_release(struct hmap *m);

/* hmap_find returns the node whose key is key/len, or NULL. */
struct hnode *hmap_find(const struct hmap *m, const void *key, size_t len);

/*
 * hmap_insert indexes node under key/len, which must be the bytes the
 * table's key function returns for node. The caller makes sure the key is
 * not already there. Returns 0, or -1 if the key is over UINT32_MAX bytes
 * or growing the table failed (the node is not inserted).
 */
int hmap_insert(struct hmap *m, struct hnode *node, const void *key, size_t len);

/* hmap_remove unlinks node, which must be in m. */
void hmap_remove(struct hmap *m, struct hnode *node);

/* hmap_next iterates: pass NULL for the first node; *bucket starts at 0. */
struct hnode *hmap_next(const struct hmap *m, struct hnode *node, size_t *bucket);

#endif
