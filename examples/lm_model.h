/*
 * lm_model.h - the language model of examples/lm.c: its sizes, parameters,
 * forward pass and training program (loss, backprop, Adam), kept apart from
 * the data and the driver so that bench/w_lm.c (W16) times the very step
 * the demo runs. Included by one .c file each; everything is static.
 */
#ifndef LM_MODEL_H
#define LM_MODEL_H

#include "optree.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The model's sizes (examples/lm.c shrinks them for its valgrind run). */
typedef struct dims {
    int64_t batch, ctx, width, heads, layers, hidden, vocab;
} dims;

/* --------------------------------------------------------------- model */

enum { PER_LAYER = 12 };   /* ln1 w, b; Wq, Wk, Wv, Wo; ln2 w, b; W1, b1, W2, b2 */

typedef struct params {
    ot_tensor *tok, *pos, *layer[8][PER_LAYER], *lnf_w, *lnf_b, *out_w, *out_b;
} params;

/* Every parameter in one list (for backprop and Adam); its length. */
static inline int param_list(params *p, const dims *d, ot_tensor **out)
{
    int n = 0;
    out[n++] = p->tok;
    out[n++] = p->pos;
    for (int64_t l = 0; l < d->layers; l++)
        for (int j = 0; j < PER_LAYER; j++) out[n++] = p->layer[l][j];
    out[n++] = p->lnf_w;
    out[n++] = p->lnf_b;
    out[n++] = p->out_w;
    out[n++] = p->out_b;
    return n;
}

/* A variable initialised as PyTorch's nn.Linear weight: uniform within
 * 1/sqrt(fan_in). */
static inline ot_tensor *linear_var(ot_program *p, const char *name, int64_t in, int64_t out,
                             uint64_t seed)
{
    double s = 1 / sqrt((double)in);
    return ot_program_variable(p, name, OT_SHAPE(in, out), OT_F32, OT_INIT_UNIFORM(-s, s, seed));
}

static inline int make_params(ot_program *p, const dims *d, params *w)
{
    int64_t D = d->width, F = d->hidden;
    w->tok = ot_program_variable(p, "tok", OT_SHAPE(d->vocab, D), OT_F32,
                                 OT_INIT_UNIFORM(-0.05, 0.05, 1));
    w->pos = ot_program_variable(p, "pos", OT_SHAPE(d->ctx, D), OT_F32,
                                 OT_INIT_UNIFORM(-0.05, 0.05, 2));
    for (int64_t l = 0; l < d->layers; l++) {
        ot_tensor **v = w->layer[l];
        char name[32];
        uint64_t s = 10 + 10 * (uint64_t)l;
#define NAMED(fmt) (snprintf(name, sizeof name, fmt, (int)l), name)
        v[0] = ot_program_variable(p, NAMED("ln1w%d"), OT_SHAPE(D), OT_F32, OT_INIT_CONST(1));
        v[1] = ot_program_variable(p, NAMED("ln1b%d"), OT_SHAPE(D), OT_F32, OT_INIT_ZERO);
        v[2] = linear_var(p, NAMED("wq%d"), D, D, s);
        v[3] = linear_var(p, NAMED("wk%d"), D, D, s + 1);
        v[4] = linear_var(p, NAMED("wv%d"), D, D, s + 2);
        v[5] = linear_var(p, NAMED("wo%d"), D, D, s + 3);
        v[6] = ot_program_variable(p, NAMED("ln2w%d"), OT_SHAPE(D), OT_F32, OT_INIT_CONST(1));
        v[7] = ot_program_variable(p, NAMED("ln2b%d"), OT_SHAPE(D), OT_F32, OT_INIT_ZERO);
        v[8] = linear_var(p, NAMED("w1%d"), D, F, s + 4);
        v[9] = ot_program_variable(p, NAMED("b1%d"), OT_SHAPE(F), OT_F32, OT_INIT_ZERO);
        v[10] = linear_var(p, NAMED("w2%d"), F, D, s + 5);
        v[11] = ot_program_variable(p, NAMED("b2%d"), OT_SHAPE(D), OT_F32, OT_INIT_ZERO);
#undef NAMED
        for (int j = 0; j < PER_LAYER; j++)
            if (!v[j]) return -1;
    }
    w->lnf_w = ot_program_variable(p, "lnfw", OT_SHAPE(D), OT_F32, OT_INIT_CONST(1));
    w->lnf_b = ot_program_variable(p, "lnfb", OT_SHAPE(D), OT_F32, OT_INIT_ZERO);
    w->out_w = linear_var(p, "wout", D, d->vocab, 3);
    w->out_b = ot_program_variable(p, "bout", OT_SHAPE(d->vocab), OT_F32, OT_INIT_ZERO);
    return w->tok && w->pos && w->lnf_w && w->lnf_b && w->out_w && w->out_b ? 0 : -1;
}

/* (B*T, D) -> (B, H, T, D/H): each head's columns as a sequence of its own. */
static inline ot_node *split_heads(ot_node *x, const dims *d, int64_t b)
{
    int64_t dh = d->width / d->heads;
    return ot_T(ot_reshape_node(x, OT_SHAPE(b, d->ctx, d->heads, dh)), {0, 2, 1, 3});
}

/* The inverse of split_heads. */
static inline ot_node *merge_heads(ot_node *x, const dims *d, int64_t b)
{
    return ot_reshape_node(ot_T(x, {0, 2, 1, 3}), OT_SHAPE(b * d->ctx, d->width));
}

/* Causal self-attention of a (B*T, D) input, every head at once: one fused
 * attention node (scale 1/sqrt(D/H); the T x T scores never exist). */
static inline ot_node *attend(ot_node *a, ot_tensor *const *v, const dims *d, int64_t b)
{
    ot_node *q = split_heads(ot_dot(a, v[2]), d, b), *k = split_heads(ot_dot(a, v[3]), d, b);
    ot_node *o = ot_attention(q, k, split_heads(ot_dot(a, v[4]), d, b), .causal = true);
    return ot_dot(merge_heads(o, d, b), v[5]);
}

static inline ot_node *lm_norm(ot_node *x, ot_tensor *weight, ot_tensor *bias)
{
    return ot_layer_norm(x, .weight = weight, .bias = bias);
}

/* The logits (B*T, V) of int32 character ids x (B*T), b windows. */
static inline ot_node *forward(ot_node *x, const params *w, const dims *d, int64_t b)
{
    ot_node *e = ot_reshape_node(ot_embedding(w->tok, x), OT_SHAPE(b, d->ctx, d->width));
    ot_node *h = ot_reshape_node(ot_add(e, w->pos), OT_SHAPE(b * d->ctx, d->width));
    for (int64_t l = 0; l < d->layers; l++) {
        ot_tensor *const *v = w->layer[l];
        h = ot_add(h, attend(lm_norm(h, v[0], v[1]), v, d, b));
        ot_node *f = ot_relu(ot_add(ot_dot(lm_norm(h, v[6], v[7]), v[8]), v[9]));
        h = ot_add(h, ot_add(ot_dot(f, v[10]), v[11]));
    }
    return ot_add(ot_dot(lm_norm(h, w->lnf_w, w->lnf_b), w->out_w), w->out_b);
}

/* Mean cross-entropy, nats per character, of logits against one-hot y. */
static inline ot_node *loss_of(ot_node *logits, ot_node *y)
{
    return ot_mean(ot_cross_entropy(ot_softmax(logits, .axis = 1), y, .axis = 1));
}

/* ------------------------------------------------------------ training */

typedef struct trainer {
    ot_program *p;
    params w;
    int n;                          /* parameters */
    ot_tensor *list[8 * PER_LAYER + 6], *grad[8 * PER_LAYER + 6];
    ot_tensor *m[8 * PER_LAYER + 6], *v[8 * PER_LAYER + 6];
    ot_tensor *loss, *lr_scale;
} trainer;

/* The program: loss, gradients, Adam; compiled. */
static inline int trainer_build(trainer *t, ot_backend *be, const dims *d, double lr)
{
    int64_t rows = d->batch * d->ctx;
    t->p = ot_program_new(be);
    if (!t->p || make_params(t->p, d, &t->w)) return -1;
    ot_tensor *x = ot_program_placeholder(t->p, "x", OT_SHAPE(rows), OT_I32);
    ot_tensor *y = ot_program_placeholder(t->p, "y", OT_SHAPE(rows, d->vocab), OT_F32);
    t->loss = ot_zeros(be, OT_SHAPE(), OT_F32);
    t->lr_scale = ot_full(be, OT_SHAPE(), OT_F32, 1.0);
    if (!x || !y || !t->loss || !t->lr_scale) return -1;
    t->n = param_list(&t->w, d, t->list);
    ot_node *g[8 * PER_LAYER + 6];
    for (int i = 0; i < t->n; i++) {
        ot_shape s = ot_tensor_shape(t->list[i]);
        t->grad[i] = ot_zeros(be, s, OT_F32);
        t->m[i] = ot_zeros(be, s, OT_F32);
        t->v[i] = ot_zeros(be, s, OT_F32);
        if (!t->grad[i] || !t->m[i] || !t->v[i]) return -1;
        g[i] = ot_tensor_node(t->grad[i]);
    }
    ot_pool *pool = ot_pool_push();
    ot_node *l = loss_of(forward(ot_tensor_node(x), &t->w, d, d->batch), ot_tensor_node(y));
    int rc = ot_program_assign(t->p, t->loss, l);
    if (!rc) rc = ot_program_backprop(t->p, l, t->n, t->list, t->grad);
    if (!rc)
        rc = ot_program_adam(t->p, &(ot_adam){.lr = lr, .lr_scale = t->lr_scale}, t->n, t->list,
                             g, t->m, t->v);
    ot_pool_pop(pool);
    return rc ? rc : ot_program_compile(t->p);
}

static inline void trainer_free(trainer *t)
{
    ot_program_free(t->p);
    for (int i = 0; i < t->n; i++) {
        ot_tensor_free(t->grad[i]);
        ot_tensor_free(t->m[i]);
        ot_tensor_free(t->v[i]);
    }
    ot_tensor_free(t->loss);
    ot_tensor_free(t->lr_scale);
}

#endif
