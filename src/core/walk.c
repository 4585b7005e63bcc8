/*
 * walk.c - the out-of-line half of walk.h's walker: the node pointer ->
 * index map its memo moves into once a walk outgrows the inline array,
 * stack growth, the walk calling w->visit (ot__walker_run), reset and free. The
 * walk keeps its stack on the heap (trees may be 100,000 deep) and numbers
 * each distinct node once, so a DAG with heavy sharing costs time linear in
 * its distinct nodes, not in its paths.
 */
#include "internal.h"

/* ---- node pointer -> int ------------------------------------------------- */

static size_t ptr_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

/* The value of key, or -1 when absent. */
static int ptrmap_get(const ot__ptrmap *m, const ot_node *key)
{
    if (!m->cap) return -1;
    for (size_t i = ptr_hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) return m->vals[i];
        if (!m->keys[i]) return -1;
    }
}

static void ptrmap_insert(ot__ptrmap *m, const ot_node *key, int val)
{
    size_t i = ptr_hash(key) & (m->cap - 1);
    while (m->keys[i]) i = (i + 1) & (m->cap - 1);
    m->keys[i] = key;
    m->vals[i] = val;
    m->len++;
}

/* Adds key, which must be absent; false when out of memory, the map then
 * unchanged. At most half full, so a probe ends soon. */
static bool ptrmap_put(ot__ptrmap *m, const ot_node *key, int val)
{
    if (2 * (m->len + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        ot__ptrmap g = {ot__calloc(cap, sizeof *g.keys), ot__malloc(cap * sizeof *g.vals), cap, 0};
        if (!g.keys || !g.vals) {
            free(g.keys);
            free(g.vals);
            return false;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i]) ptrmap_insert(&g, m->keys[i], m->vals[i]);
        free(m->keys);
        free(m->vals);
        *m = g;
    }
    ptrmap_insert(m, key, val);
    return true;
}

static void ptrmap_free(ot__ptrmap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- the walk's out-of-line pieces --------------------------------------- */

int ot__walker_lookup(const ot__walker *w, const ot_node *n)
{
    return ptrmap_get(&w->memo, n);
}

bool ot__walker_spill(ot__walker *w, const ot_node *n)
{
    if (w->count == OT__WALK_SMALL)
        for (int i = 0; i < OT__WALK_SMALL; i++)
            if (!ptrmap_put(&w->memo, w->small[i], i)) return false;
    return ptrmap_put(&w->memo, n, w->count);
}

bool ot__walker_grow(ot__walker *w)
{
    size_t cap = w->cap ? 2 * w->cap : 64, bytes;
    ot__walk_frame *s = ot__mul_size(&bytes, cap, sizeof *s) ? ot__realloc(w->stack, bytes) : NULL;
    if (!s) return false;
    w->stack = s;
    w->cap = cap;
    return true;
}

int ot__walker_run(ot__walker *w, const ot_node *root)
{
    if (w->enter || w->between || w->every_path) return ot__walk_root(w, w->visit, true, root);
    return ot__walk_root(w, w->visit, false, root);
}

void ot__walker_reset(ot__walker *w)
{
    ptrmap_free(&w->memo);
    w->count = 0;
    w->len = 0;
}

void ot__walker_free(ot__walker *w)
{
    ptrmap_free(&w->memo);
    free(w->stack);
    w->stack = NULL;
    w->cap = w->len = 0;
    w->count = 0;
}
