/*
 * optim.c - the optimizers: SGD with momentum and weight decay
 * (ot_sgd_step), Adam (ot_adam_step) and clipping by global norm
 * (ot_clip_global_norm).
 *
 * A step is written the way you would write your own optimizer with the
 * public API: build every new parameter and state value as an op-tree of
 * the old ones, then write them all with one ot_assign_many. Each tree is
 * evaluated before any output is written, so the state trees and the
 * parameter tree may read the tensors they replace. The parameter's tree
 * reuses the very nodes of its state trees (w + vnew, not w + a rebuilt
 * momentum*v - lr*d), so the cpu backend computes them once and runs a
 * parameter's whole update as one multi-output kernel. Hyperparameters are
 * folded into constants on the host, and terms that are zero are left out
 * of the tree rather than multiplied by 0. Only error reporting needs the
 * library's internals.
 */
#include "front.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* An error of the call at `at` (its function's name and caller's file:line). */
#define FAIL(at, code, ...) ot__err_set((code), (at)->file, (at)->line, (at)->fn, __VA_ARGS__)

/* ---- checks ---------------------------------------------------------------- */

static bool same_shape(ot_shape a, ot_shape b)
{
    if (a.ndim != b.ndim) return false;
    for (int d = 0; d < a.ndim; d++)
        if (a.dims[d] != b.dims[d]) return false;
    return true;
}

static bool is_float(ot_dtype dt) { return dt == OT_F32 || dt == OT_F64; }

/* NULL trees are checked before the slot is cleared, keeping an earlier
 * error: a gradient built from bad operands is NULL, and its builder already
 * said why. Then the slot is cleared, as by every function that does work. */
static int check_grads(const ot__site *at, int n, ot_node *const g[])
{
    if (n > 0 && !g) return FAIL(at, OT_ENULL, "g is NULL");
    for (int i = 0; i < n; i++) {
        if (g[i]) continue;
        char what[32];
        snprintf(what, sizeof what, "g[%d]", i);
        return ot_errcode() ? ot_errcode()
                            : FAIL(at, OT_ENULL, "%s is NULL", what);
    }
    ot_clear_error();
    for (int i = 0; i < n; i++) {   /* a dead gradient, before any tree reads it */
        char what[32];
        snprintf(what, sizeof what, "g[%d]", i);
        int rc = ot__node_check(at->fn, at->file, at->line, what, g[i]);
        if (rc) return rc;
    }
    return 0;
}

static int check_arrays(const ot__site *at, int n, ot_tensor *const w[], ot_node *const g[])
{
    if (n < 0) return FAIL(at, OT_EINVAL, "negative count %d", n);
    if (n > 0 && !w) return FAIL(at, OT_ENULL, "w is NULL");
    return check_grads(at, n, g);
}

/* What reads tensors of backend `be` (NULL: none, a tree of constants) is
 * on w's: the step's trees mix them, and the error then named a line of
 * this file ("optim.c:244: sub: operand 1 reads ..."), not the caller's. */
static int check_backend(const ot__site *at, const char *what, int i, const ot_backend *be,
                         const ot_tensor *w)
{
    const ot_backend *wb = w->leaf.be;
    if (!be || be == wb) return 0;
    char name[32];
    snprintf(name, sizeof name, i >= 0 ? "%s[%d]" : "%s", what, i);
    return FAIL(at, OT_EBACKEND, "%s %s backend '%s' but w[%d] is on backend '%s'", name,
                strcmp(what, "g") ? "is on" : "reads tensors of", ot_backend_name(be),
                i >= 0 ? i : 0, ot_backend_name(wb));
}

/* Parameter i is a float tensor and its gradient has exactly its shape (one
 * that would merely broadcast is a mistake the step should not hide), a
 * float dtype (an integer tree is no gradient) and w's backend. */
static int check_param(const ot__site *at, int i, const ot_tensor *w, const ot_node *g)
{
    char s1[OT__SHAPE_STRLEN], s2[OT__SHAPE_STRLEN];
    if (!w) return FAIL(at, OT_ENULL, "w[%d] is NULL", i);
    if (!is_float(ot_tensor_dtype(w)))
        return FAIL(at, OT_EDTYPE, "w[%d] is %s; parameters must be float32 or float64",
                           i, ot_dtype_name(ot_tensor_dtype(w)));
    ot_shape ws = ot_tensor_shape(w), gs = ot_node_shape(g);
    if (!same_shape(ws, gs))
        return FAIL(at, OT_ESHAPE, "g[%d] has shape %s but w[%d] has shape %s",
                           i, ot__shape_str(&gs, s1), i, ot__shape_str(&ws, s2));
    if (!is_float(ot_node_dtype(g)))
        return FAIL(at, OT_EDTYPE, "g[%d] is %s; a gradient must be float32 or float64", i,
                    ot_dtype_name(ot_node_dtype(g)));
    return check_backend(at, "g", i, g->be, w);
}

/* A state tensor (velocity, moment) of its parameter's shape, in a float
 * dtype, as the step writes a float tree into it. */
static int check_state(const ot__site *at, const char *name, int i, const ot_tensor *t,
                       const ot_tensor *w)
{
    char s1[OT__SHAPE_STRLEN], s2[OT__SHAPE_STRLEN];
    if (!t) return FAIL(at, OT_ENULL, "%s[%d] is NULL", name, i);
    if (!is_float(ot_tensor_dtype(t)))
        return FAIL(at, OT_EDTYPE, "%s[%d] is %s; state must be float32 or float64",
                           name, i, ot_dtype_name(ot_tensor_dtype(t)));
    ot_shape ts = ot_tensor_shape(t), ws = ot_tensor_shape(w);
    if (!same_shape(ts, ws))
        return FAIL(at, OT_ESHAPE, "%s[%d] has shape %s but w[%d] has shape %s",
                           name, i, ot__shape_str(&ts, s1), i, ot__shape_str(&ws, s2));
    return check_backend(at, name, i, t->leaf.be, w);
}

/* Hyperparameters are finite numbers >= 0 (a NaN fails the test, as it
 * should; an infinite lr wrote -inf and NaN into every weight). */
static int check_nonneg(const ot__site *at, const char *name, double x)
{
    if (x >= 0 && isfinite(x)) return 0;
    return FAIL(at, OT_EINVAL, "%s must be finite and >= 0, not %g", name, x);
}

/* grad_scale 0 means 1. A NaN passes: it is what ot_clip_global_norm gives
 * for a NaN gradient, and the step then poisons w so that the caller sees it. */
static int check_grad_scale(const ot__site *at, double s)
{
    if (!(s < 0)) return 0;
    return FAIL(at, OT_EINVAL, "grad_scale must be >= 0 (0 means 1), not %g", s);
}

/* lr_scale, when given, is a 0-d float tensor (on the parameters'
 * backend: checked with them). */
static int check_lr_scale(const ot__site *at, ot_tensor *scale)
{
    if (!scale) return 0;
    if (!is_float(ot_tensor_dtype(scale)))
        return FAIL(at, OT_EDTYPE, "lr_scale is %s; it must be float32 or float64",
                           ot_dtype_name(ot_tensor_dtype(scale)));
    ot_shape s = ot_tensor_shape(scale);
    if (s.ndim != 0) {
        char buf[OT__SHAPE_STRLEN];
        return FAIL(at, OT_ESHAPE, "lr_scale has shape %s; it must be 0-d",
                           ot__shape_str(&s, buf));
    }
    return 0;
}

/* lr times the schedule's scale, if any, as a node of dtype dt; without a
 * scale the constant alone, so an unscheduled step builds the tree it
 * always did. */
static ot_node *scheduled(ot_node *lr, ot_tensor *scale, ot_dtype dt)
{
    return scale ? ot_cast(ot_mul(lr, scale), .dtype = dt) : lr;
}

/* ---- building and writing a step -------------------------------------------- */

/* The outputs of one step and the trees written into them. */
typedef struct step {
    int n;
    ot_tensor **outs;
    ot_node **trees;
    ot_pool *pool;   /* owns every node built for the step */
} step;

static int step_begin(step *s, const ot__site *at, size_t cap)
{
    s->n = 0;
    s->outs = ot__calloc(cap ? cap : 1, sizeof *s->outs);
    s->trees = ot__calloc(cap ? cap : 1, sizeof *s->trees);
    s->pool = s->outs && s->trees ? ot_pool_push() : NULL;
    if (s->pool) return 0;
    free(s->outs);
    free(s->trees);
    return FAIL(at, OT_ENOMEM, "out of memory");
}

static void step_put(step *s, ot_tensor *out, ot_node *tree)
{
    s->outs[s->n] = out;
    s->trees[s->n++] = tree;
}

/* One evaluation of every tree. A builder that failed left a NULL tree and
 * its error in the slot, which ot_assign_many returns; nothing is written.
 * The error then names the step and its caller ("m.c:9: adam_step:
 * assign_many: outputs 1 and 2 overlap", an m that is v). */
static int step_end(step *s, const ot__site *at)
{
    int rc = ot_assign_many_at(s->n, s->outs, s->trees, at->file, at->line);
    ot_pool_pop(s->pool);
    free(s->outs);
    free(s->trees);
    return rc ? ot__err_relabel(rc, at->file, at->line, at->fn) : 0;
}

/* grad_scale*g, with no node when the scale is 1 (or 0, which means 1). */
static ot_node *scaled(ot_node *g, double grad_scale)
{
    return grad_scale == 0 || grad_scale == 1 ? g : ot_mul(grad_scale, g);
}

/* ---- SGD ------------------------------------------------------------------- */

/* Zero fields take their defaults (Keras's: lr 0.01) before the checks,
 * which then see only what the caller set. */
int ot__sgd_opts(const ot__site *at, const ot_sgd *in, ot_sgd *o)
{
    if (!in) return FAIL(at, OT_ENULL, "options are NULL");
    *o = *in;
    if (o->lr == 0) o->lr = OT_SGD_LR;
    int rc = check_nonneg(at, "lr", o->lr);
    if (!rc) rc = check_nonneg(at, "momentum", o->momentum);
    if (!rc) rc = check_nonneg(at, "weight_decay", o->weight_decay);
    if (!rc) rc = check_lr_scale(at, o->lr_scale);
    return rc ? rc : check_grad_scale(at, o->grad_scale);
}

/* The options (defaults filled in, into *o) and arrays checked. */
static int sgd_check(const ot__site *at, const ot_sgd *in, ot_sgd *o, int n, ot_tensor *const w[],
                     ot_node *const g[], ot_tensor *const vel[])
{
    int rc = ot__sgd_opts(at, in, o);
    if (!rc) rc = check_arrays(at, n, w, g);
    if (!rc && n > 0 && !vel && o->momentum != 0)
        rc = FAIL(at, OT_ENULL, "vel is NULL but momentum is %g; "
                         "only plain SGD (momentum 0) runs without velocities", o->momentum);
    for (int i = 0; i < n && !rc; i++) {
        rc = check_param(at, i, w[i], g[i]);
        if (!rc && vel) rc = check_state(at, "vel", i, vel[i], w[i]);
        if (!rc && o->lr_scale) rc = check_backend(at, "lr_scale", -1, o->lr_scale->leaf.be, w[i]);
    }
    return rc;
}

/* v = momentum*(v + k*g) - lr*weight_decay*w, k = -lr*grad_scale/momentum:
 * the same v as momentum*v - lr*d, in the form whose v + k*g the cpu
 * backend runs as one BLAS call over v in place when g is a dot (C =
 * k*A.B + C, beta 1: BLAS reads v inside its kernel, behind the
 * arithmetic, where a pass of its own, or one more stream in the update,
 * waits on memory; W10m). With a scheduled lr, k is no constant, and with
 * a momentum below MOMENTUM_SPLIT, k could overflow: the plain form. */
#define MOMENTUM_SPLIT 1e-3
static ot_node *sgd_momentum(const ot_sgd *o, ot_tensor *w, ot_node *g, ot_tensor *vel)
{
    double gs = o->grad_scale == 0 ? 1 : o->grad_scale;
    ot_node *p = ot_add(vel, ot_mul(-o->lr * gs / o->momentum, g));
    ot_node *vnew = ot_mul(o->momentum, p);
    return o->weight_decay != 0 ? ot_sub(vnew, ot_mul(o->lr * o->weight_decay, w)) : vnew;
}

/* Whether sgd_momentum's k = -lr*grad_scale/momentum is a normal number
 * of w's dtype, as its weak constant is rounded to it. A small lr times
 * the small grad_scale of a clipped huge gradient (lr 1e-8, scale 5e-39)
 * gave a k that rounded to 0 in f32: the update was lost (v = momentum*v),
 * where lr*(grad_scale*g) is the ordinary number it should be. */
static bool split_k_normal(const ot_sgd *o, ot_dtype dt)
{
    double gs = o->grad_scale == 0 ? 1 : o->grad_scale;
    double k = fabs(o->lr * gs / o->momentum);
    return dt == OT_F32 ? k >= FLT_MIN && k <= FLT_MAX : k >= DBL_MIN && k <= DBL_MAX;
}

/* One parameter: v = momentum*v - lr*d, w = w + v, d = grad_scale*g +
 * weight_decay*w. Without a velocity, w = w - lr*d. */
static void sgd_param(const ot_sgd *o, ot_tensor *w, ot_node *g, ot_tensor *vel, step *s)
{
    if (vel && !o->lr_scale && o->momentum >= MOMENTUM_SPLIT &&
        split_k_normal(o, ot_tensor_dtype(w))) {
        ot_node *vnew = sgd_momentum(o, w, g, vel);
        step_put(s, w, ot_add(w, vnew));   /* the same vnew node: computed once */
        step_put(s, vel, vnew);
        return;
    }
    ot_node *d = scaled(g, o->grad_scale);
    if (o->weight_decay != 0) d = ot_add(d, ot_mul(o->weight_decay, w));
    ot_dtype dt = ot_tensor_dtype(w);
    if (!vel) {
        step_put(s, w, ot_sub(w, ot_mul(scheduled(ot_const(o->lr), o->lr_scale, dt), d)));
        return;
    }
    ot_node *vnew = o->momentum == 0
                        ? ot_mul(scheduled(ot_const(-o->lr), o->lr_scale, dt), d)
                        : ot_sub(ot_mul(o->momentum, vel),
                                 ot_mul(scheduled(ot_const(o->lr), o->lr_scale, dt), d));
    step_put(s, w, ot_add(w, vnew));
    step_put(s, vel, vnew);
}

int ot_sgd_step_at(const ot_sgd *opts, int n, ot_tensor *const w[], ot_node *const g[],
                   ot_tensor *const vel[], const char *file, int line)
{
    const ot__site at = {"sgd_step", file, line};
    ot_sgd o;
    int rc = sgd_check(&at, opts, &o, n, w, g, vel);
    step s;
    if (!rc) rc = step_begin(&s, &at, (size_t)n * (vel ? 2 : 1));
    if (rc) return rc;
    for (int i = 0; i < n; i++) sgd_param(&o, w[i], g[i], vel ? vel[i] : NULL, &s);
    return step_end(&s, &at);
}

int(ot_sgd_step)(const ot_sgd *o, int n, ot_tensor *const w[], ot_node *const g[],
                 ot_tensor *const vel[])
{
    return ot_sgd_step_at(o, n, w, g, vel, NULL, 0);
}

/* The count of trees s built, or the error of a builder that failed. */
static int trees_built(const step *s, int *count)
{
    *count = s->n;
    for (int i = 0; i < s->n; i++)
        if (!s->trees[i]) return ot_errcode();   /* the builder said why */
    return 0;
}

int ot__sgd_trees(const ot__site *at, const ot_sgd *opts, int n, ot_tensor *const w[],
                  ot_node *const g[], ot_tensor *const vel[], ot_tensor **outs, ot_node **trees,
                  int *count)
{
    ot_sgd o;
    int rc = sgd_check(at, opts, &o, n, w, g, vel);
    if (rc) return rc;
    step s = {.outs = outs, .trees = trees};
    for (int i = 0; i < n; i++) sgd_param(&o, w[i], g[i], vel ? vel[i] : NULL, &s);
    return trees_built(&s, count);
}

/* ---- Adam ------------------------------------------------------------------ */

static int check_beta(const ot__site *at, const char *name, double beta)
{
    if (beta >= 0 && beta < 1) return 0;
    return FAIL(at, OT_EINVAL, "%s must be in [0, 1), not %g", name, beta);
}

/* Zero fields take their defaults (the paper's, lr Keras's 1e-3) before
 * the checks, which then see only what the caller set. */
int ot__adam_opts(const ot__site *at, const ot_adam *in, ot_adam *o)
{
    if (!in) return FAIL(at, OT_ENULL, "options are NULL");
    ot_adam d = ot_adam_default(OT_ADAM_LR);
    *o = *in;
    if (o->lr == 0) o->lr = d.lr;
    if (o->beta1 == 0) o->beta1 = d.beta1;
    if (o->beta2 == 0) o->beta2 = d.beta2;
    if (o->eps == 0) o->eps = d.eps;
    if (o->t == 0) o->t = d.t;
    int rc = check_nonneg(at, "lr", o->lr);
    if (!rc) rc = check_beta(at, "beta1", o->beta1);
    if (!rc) rc = check_beta(at, "beta2", o->beta2);
    if (!rc && !(o->eps > 0 && isfinite(o->eps)))   /* inf: every step a silent no-op */
        rc = FAIL(at, OT_EINVAL, "eps must be finite and > 0, not %g", o->eps);
    if (!rc) rc = check_grad_scale(at, o->grad_scale);
    if (!rc) rc = check_nonneg(at, "weight_decay", o->weight_decay);
    if (!rc) rc = check_lr_scale(at, o->lr_scale);
    if (!rc && o->t < 1)
        rc = FAIL(at, OT_EINVAL, "step count t must be >= 1 (1 "
                         "for the first step; 0 means 1), not %lld", (long long)o->t);
    return rc;
}

/* The options (defaults filled in, into *o) and arrays checked. */
static int adam_check(const ot__site *at, const ot_adam *in, ot_adam *o, int n,
                      ot_tensor *const w[], ot_node *const g[], ot_tensor *const m[],
                      ot_tensor *const v[])
{
    int rc = ot__adam_opts(at, in, o);
    if (!rc) rc = check_arrays(at, n, w, g);
    if (!rc && n > 0 && (!m || !v))
        rc = FAIL(at, OT_ENULL, "%s is NULL", m ? "v" : "m");
    for (int i = 0; i < n && !rc; i++) {
        rc = check_param(at, i, w[i], g[i]);
        if (!rc) rc = check_state(at, "m", i, m[i], w[i]);
        if (!rc) rc = check_state(at, "v", i, v[i], w[i]);
        if (!rc && o->lr_scale) rc = check_backend(at, "lr_scale", -1, o->lr_scale->leaf.be, w[i]);
    }
    return rc;
}

/* One parameter; alpha = lr*sqrt(1 - beta2^t)/(1 - beta1^t), a constant
 * folded on the host (ot_adam_step) or a 0-d tree (a program's step);
 * decay = lr*weight_decay (times the schedule) in the same form, NULL
 * without weight decay. w's tree reads the new moments through the nodes
 * written to m and v. */
static void adam_param(const ot_adam *o, ot_node *alpha, ot_node *decay, ot_tensor *w,
                       ot_node *g, ot_tensor *m, ot_tensor *v, step *s)
{
    ot_node *d = scaled(g, o->grad_scale);
    ot_node *mnew = ot_add(ot_mul(o->beta1, m), ot_mul(1 - o->beta1, d));
    ot_node *vnew = ot_add(ot_mul(o->beta2, v), ot_mul(ot_mul(1 - o->beta2, d), d));
    ot_node *wnew = ot_sub(w, ot_div(ot_mul(alpha, mnew), ot_add(ot_sqrt(vnew), o->eps)));
    step_put(s, w, decay ? ot_sub(wnew, ot_mul(decay, w)) : wnew);
    step_put(s, m, mnew);
    step_put(s, v, vnew);
}

int ot_adam_step_at(const ot_adam *opts, int n, ot_tensor *const w[], ot_node *const g[],
                    ot_tensor *const m[], ot_tensor *const v[], const char *file, int line)
{
    const ot__site at = {"adam_step", file, line};
    ot_adam o;
    int rc = adam_check(&at, opts, &o, n, w, g, m, v);
    step s;
    if (!rc) rc = step_begin(&s, &at, (size_t)n * 3);
    if (rc) return rc;
    double t = (double)o.t;
    double alpha = o.lr * sqrt(1 - pow(o.beta2, t)) / (1 - pow(o.beta1, t));
    for (int i = 0; i < n; i++) {
        ot_dtype dt = ot_tensor_dtype(w[i]);
        ot_node *decay = o.weight_decay != 0
                             ? scheduled(ot_const(o.lr * o.weight_decay), o.lr_scale, dt)
                             : NULL;
        adam_param(&o, scheduled(ot_const(alpha), o.lr_scale, dt), decay, w[i], g[i], m[i],
                   v[i], &s);
    }
    return step_end(&s, &at);
}

int(ot_adam_step)(const ot_adam *o, int n, ot_tensor *const w[], ot_node *const g[],
                  ot_tensor *const m[], ot_tensor *const v[])
{
    return ot_adam_step_at(o, n, w, g, m, v, NULL, 0);
}

int ot__adam_trees(const ot__site *at, const ot_adam *opts, ot_tensor *count, int n,
                   ot_tensor *const w[], ot_node *const g[], ot_tensor *const m[],
                   ot_tensor *const v[], ot_tensor **outs, ot_node **trees, int *nout)
{
    ot_adam o;
    int rc = adam_check(at, opts, &o, n, w, g, m, v);
    if (rc) return rc;
    step s = {.outs = outs, .trees = trees};
    ot_node *alpha = ot_div(ot_mul(o.lr, ot_sqrt(ot_sub(1.0, ot_pow(o.beta2, count)))),
                            ot_sub(1.0, ot_pow(o.beta1, count)));
    ot_node *decay = o.weight_decay != 0 ? ot_const(o.lr * o.weight_decay) : NULL;
    if (o.lr_scale) alpha = ot_mul(alpha, ot_cast(o.lr_scale, .dtype = OT_F64));
    if (o.lr_scale && decay) decay = ot_mul(decay, ot_cast(o.lr_scale, .dtype = OT_F64));
    for (int i = 0; i < n; i++) {
        ot_dtype dt = ot_tensor_dtype(w[i]);
        adam_param(&o, ot_cast(alpha, .dtype = dt), decay ? ot_cast(decay, .dtype = dt) : NULL,
                   w[i], g[i], m[i], v[i], &s);
    }
    return trees_built(&s, nout);
}

/* ---- clipping ---------------------------------------------------------------- */

/* sum(g*g) on g's backend, squared and summed in float64 (an f32 sum would
 * lose digits, and f32 squares overflow past 1.8e19). */
static int sum_squares(ot_node *g, double *out)
{
    /* Built with no place: an error takes the caller's (clip's site). */
    ot_args f64 = {.axis = OT_AXIS_ALL, .dtype = OT_F64};
    ot_node *g64 = ot_node_dtype(g) == OT_F64 ? g : ot_build_at(OT_OP_CAST, g, NULL, &f64, NULL, 0);
    ot_node *sq = ot_build_at(OT_OP_MUL, g64, g64, NULL, NULL, 0);
    ot_tensor *t = (ot_eval)(ot_build_at(OT_OP_SUM, sq, NULL, NULL, NULL, 0));
    if (!t) return ot_errcode();
    int rc = (ot_get)(t, out);
    ot_tensor_free(t);
    return rc;
}

/* min(1, max_norm/norm): 1 for a zero norm, and NaN for a NaN or infinite
 * norm. fmin would drop the NaN, and min(1, max_norm/inf) = 0 is what a step
 * reads as "no scale": either would run the step unclipped instead of
 * poisoning w, which is how the caller sees a gradient that blew up. */
static double clip_scale(double norm, double max_norm)
{
    if (isnan(norm) || isinf(norm)) return NAN;
    return norm > max_norm ? max_norm / norm : 1;
}

int ot_clip_global_norm_at(int n, ot_node *const g[], double max_norm, double *scale,
                           double *norm, const char *file, int line)
{
    const ot__site site = {"clip_global_norm", file, line}, *at = &site;
    if (n < 0) return FAIL(at, OT_EINVAL, "negative count %d", n);
    if (!scale) return FAIL(at, OT_ENULL, "scale is NULL");
    int rc = check_grads(at, n, g);
    for (int i = 0; i < n && !rc; i++)
        rc = ot__backend_gone(g[i]->be, at->fn, file, line, "a gradient");
    if (rc) return rc;
    /* max_norm 0 would give scale 0, which a step reads as 1: no clipping. */
    if (!(max_norm > 0))
        return FAIL(at, OT_EINVAL, "max_norm must be > 0, not %g", max_norm);
    ot_pool *pool = ot_pool_push();
    if (!pool) return ot_errcode();
    double total = 0;
    ot__callsite outer = ot__site_enter(file, line);
    for (int i = 0; i < n && !rc; i++) {
        double ss = 0;
        rc = sum_squares(g[i], &ss);
        total += ss;
    }
    ot__site_leave(outer);
    ot_pool_pop(pool);
    if (rc) return rc;
    *scale = clip_scale(sqrt(total), max_norm);
    if (norm) *norm = sqrt(total);
    return 0;
}

int(ot_clip_global_norm)(int n, ot_node *const g[], double max_norm, double *scale, double *norm)
{
    return ot_clip_global_norm_at(n, g, max_norm, scale, norm, NULL, 0);
}
