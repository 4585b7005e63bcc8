/*
 * half_step.c - program steps and ot_explain for trees that involve the
 * 16-bit dtypes (OT_F16, OT_BF16) on the cpu backend. The planner never
 * sees a 16-bit dtype (half_assign.c converts around an f32 assignment),
 * so such a step is not prepared as a plan: it keeps its trees and lists
 * its leaf tensors' first elements as the step's leaf pointers, which
 * program_run.c patches to the memory a run binds; each run points those
 * leaves' buffers there for the while and assigns the trees by
 * ot__half_assign, exactly as ot_assign would. Explain says that route in
 * words, then explains the f32 trees it assigns.
 */
#include "cpu.h"

typedef struct half_step {
    ot_backend *be;
    ot__half_eval eval;            /* the backend's plain f32 assignment */
    ot__half_explain_fn explain;   /* its explain of f32 trees */
    int n;
    ot_node **trees;               /* retained */
    ot_tensor **leaf;              /* the distinct leaf tensors, in s->leaf's order */
    void **saved;                  /* their buffers' own data during a run */
    int nleaf, cap, casts;         /* casts: to f16/bf16 inside the trees */
} half_step;

/* A half step's param (it binds no constants: its trees run whole). */
static const double half_marker;

static int add_leaf(half_step *h, ot_tensor *t)
{
    for (int i = 0; i < h->nleaf; i++)
        if (h->leaf[i] == t) return 0;
    if (h->nleaf == h->cap) {
        int cap = h->cap ? 2 * h->cap : 8;
        ot_tensor **l = realloc(h->leaf, sizeof *l * (size_t)cap);
        if (!l) return OT_ENOMEM;
        h->leaf = l;
        h->cap = cap;
    }
    h->leaf[h->nleaf++] = t;
    return 0;
}

static int visit(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    (void)index, (void)operand;
    half_step *h = w->ctx;
    if (n->kind == OT_NODE_LEAF) return add_leaf(h, ot__leaf_tensor(n));
    h->casts += n->kind == OT_NODE_OP && n->op == OT_OP_CAST &&
                ot__is_half(n->dtype);
    return 0;
}

/* The trees' distinct leaves and their casts to a 16-bit dtype into h. */
static int collect(half_step *h, int n, ot_node *const trees[])
{
    ot__walker w = {.visit = visit, .ctx = h};
    int rc = 0;
    for (int i = 0; i < n && rc >= 0; i++) rc = ot__walker_run(&w, trees[i]);
    ot__walker_free(&w);
    return rc < 0 ? ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory") : 0;
}

/* Bytes from a tensor's buffer start to its element 0. */
static size_t first_at(const ot_tensor *t)
{
    return (size_t)t->offset * ot_dtype_size(t->leaf.dtype);
}

static void step_free(half_step *h)
{
    for (int i = 0; h->trees && i < h->n; i++) ot_release(h->trees[i]);
    free(h->trees);
    free(h->leaf);
    free(h->saved);
    free(h);
}

int ot__half_step_prepare(ot_backend *be, ot__half_eval eval, ot__half_explain_fn explain, int n,
                          ot_tensor *const outs[], ot_node *const trees[], ot__prepared *s)
{
    half_step *h = calloc(1, sizeof *h);
    if (!h) return ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory");
    *h = (half_step){be, eval, explain, n, calloc((size_t)n, sizeof *h->trees), NULL, NULL, 0, 0, 0};
    int rc = h->trees ? collect(h, n, trees) : OT_ENOMEM;
    char **leaf = rc ? NULL : malloc(sizeof *leaf * (size_t)(h->nleaf ? h->nleaf : 1));
    h->saved = rc ? NULL : malloc(sizeof *h->saved * (size_t)(h->nleaf ? h->nleaf : 1));
    if (!rc && (!leaf || !h->saved)) rc = OT_ENOMEM;
    if (rc) {
        free(leaf);
        step_free(h);
        return rc == OT_ENOMEM ? ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory") : rc;
    }
    for (int i = 0; i < n; i++) h->trees[i] = ot_retain(trees[i]);
    for (int i = 0; i < h->nleaf; i++) {
        char *d = h->leaf[i]->buf->data;
        leaf[i] = d ? d + first_at(h->leaf[i]) : NULL;
    }
    *s = (ot__prepared){h, leaf, &half_marker, outs, h->nleaf, 0, 0};
    return 0;
}

bool ot__half_step_is(const ot__prepared *s)
{
    return s->param == &half_marker;
}

/* One run: each leaf's buffer pointed at the memory bound (s->leaf, as
 * patched), the trees assigned by conversion, the buffers put back. */
int ot__half_step_run(const ot__prepared *s)
{
    half_step *h = s->impl;
    for (int i = 0; i < h->nleaf; i++) {
        ot_buffer *b = h->leaf[i]->buf;
        h->saved[i] = b->data;
        if (s->leaf[i]) b->data = s->leaf[i] - first_at(h->leaf[i]);
    }
    int rc = ot__half_assign(h->be, h->eval, h->n, s->outs, h->trees);
    for (int i = h->nleaf - 1; i >= 0; i--) h->leaf[i]->buf->data = h->saved[i];
    return rc;
}

int ot__half_explain_route(ot_backend *be, ot__half_eval eval, ot__half_explain_fn explain,
                           int n, ot_tensor *const outs[], ot_node *const trees[], FILE *f)
{
    half_step h = {0};
    int rc = collect(&h, n, trees), leaves = 0, narrowed = 0;
    for (int i = 0; i < h.nleaf; i++) leaves += ot__is_half(h.leaf[i]->leaf.dtype);
    for (int i = 0; i < n; i++) narrowed += ot__is_half(outs ? outs[i]->leaf.dtype : trees[i]->dtype);
    free(h.leaf);
    if (rc) return rc;
    if (outs && n == 1 && ot__half_native(be, eval, outs[0], trees[0]))
        fprintf(f, "f16/bf16 in generated code (docs/half.md): one kernel over the 16-bit "
                   "tensors, %d lea%s widened to f32 as loaded, the output narrowed as stored "
                   "(round to nearest even); its kernel as the f32 plan has it (whose bytes are "
                   "twice the 16-bit code's):\n",
                leaves, leaves == 1 ? "f" : "ves");
    else fprintf(f, "f16/bf16 by conversion (docs/half.md): %d f16/bf16 lea%s widened to f32, "
               "%d cast%s to f16/bf16 evaluated and rounded apart, %d output%s narrowed "
               "to f16/bf16 (round to nearest even); in f32:\n",
            leaves, leaves == 1 ? "f" : "ves", h.casts, h.casts == 1 ? "" : "s", narrowed,
            narrowed == 1 ? "" : "s");
    return ot__half_explain(be, eval, explain, n, outs, trees, f);
}

int ot__half_step_explain(const ot__prepared *s, FILE *f)
{
    const half_step *h = s->impl;
    return ot__half_explain_route(h->be, h->eval, h->explain, h->n, s->outs, h->trees, f);
}

void ot__half_step_release(ot__prepared *s)
{
    step_free(s->impl);
    free(s->leaf);
    *s = (ot__prepared){0};
}
