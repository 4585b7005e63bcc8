/*
 * variables.c - trainable tensors (ngraph's variables()): the flag, kept on
 * the memory a tensor views so that every view of a trainable tensor counts
 * as that tensor, and the listing of a tree's trainable leaves.
 */
#include "front.h"

int ot_tensor_set_trainable(ot_tensor *t, bool on)
{
    const char *fn = "tensor_set_trainable";
    if (!t) return ot__err_set(OT_ENULL, NULL, 0, fn, "tensor is NULL");
    ot_clear_error();
    ot_buffer *b = t->buf;
    if (!on) {
        if (b->var == t || (b->var && ot__same_view(b->var, t))) b->var = NULL;
        return 0;
    }
    if (t->leaf.dtype == OT_I32)
        return ot__err_set(OT_EDTYPE, NULL, 0, fn, "%s is an integer tensor: it has no gradient",
                           t->name ? t->name : "the tensor");
    if (t->readonly)
        return ot__err_set(OT_EINVAL, NULL, 0, fn, "%s is a read-only (broadcast) view: an "
                           "optimizer cannot write it; mark the tensor it broadcasts",
                           t->name ? t->name : "the tensor");
    /* One variable per buffer: two would update shared memory twice. */
    if (b->var && b->var != t && !ot__same_view(b->var, t))
        return ot__err_set(OT_EINVAL, NULL, 0, fn, "%s shares its memory with the trainable "
                           "tensor %s: mark one tensor per buffer",
                           t->name ? t->name : "the tensor",
                           b->var->name ? b->var->name : "(unnamed)");
    b->var = t;
    return 0;
}

/* The trainable tensor whose elements t reads some of, or NULL: a slice of
 * the buffer that misses the marked tensor's elements is not it. */
static ot_tensor *variable_of(const ot_tensor *t)
{
    ot_tensor *v = t->buf->var;
    return v && ot__overlap(t, v) != OT_OVERLAP_NONE ? v : NULL;
}

bool ot_tensor_trainable(const ot_tensor *t)
{
    return t && variable_of(t) != NULL;
}

typedef struct listing {
    int n, count;
    ot_tensor **out;
    const ot_buffer **seen;     /* one per listed variable */
    int cap;
} listing;

static bool listed(const listing *l, const ot_buffer *b)
{
    for (int i = 0; i < l->count; i++)
        if (l->seen[i] == b) return true;
    return false;
}

static int visit(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    (void)index;
    (void)operand;
    listing *l = w->ctx;
    if (n->kind != OT_NODE_LEAF) return 0;
    const ot_tensor *t = ot__leaf_tensor(n);
    const ot_buffer *b = t->buf;
    if (!variable_of(t) || listed(l, b)) return 0;
    if (l->count == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        const ot_buffer **s = ot__realloc(l->seen, (size_t)cap * sizeof *s);
        if (!s) return OT_ENOMEM;
        l->seen = s;
        l->cap = cap;
    }
    if (l->count < l->n) l->out[l->count] = b->var;
    l->seen[l->count++] = b;
    return 0;
}

int ot_variables(const ot_node *tree, int n, ot_tensor *out[])
{
    const char *fn = "variables";
    if (!tree) return ot__err_set(OT_ENULL, NULL, 0, fn, "tree is NULL");
    if (n < 0) return ot__err_set(OT_EINVAL, NULL, 0, fn, "negative count %d", n);
    if (n > 0 && !out) return ot__err_set(OT_ENULL, NULL, 0, fn, "out is NULL");
    int rc = ot__node_check(fn, NULL, 0, "the tree", tree);
    if (rc) return rc;
    ot_clear_error();
    listing l = {.n = n, .out = out};
    ot__walker w = {.visit = visit, .ctx = &l};
    rc = ot__walker_run(&w, tree);
    ot__walker_free(&w);
    free(l.seen);
    if (rc < 0) return ot__err_set(OT_ENOMEM, NULL, 0, fn, "out of memory");
    return l.count;
}
