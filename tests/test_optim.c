/*
 * test_optim.c - unit tests of the optimizers (src/front/optim.c): SGD (with
 * momentum and weight decay, and plain) and Adam against step-by-step
 * references computed on the host in double from the header's formulas,
 * on the ref and the cpu backend; several parameters of different shapes
 * with gradients given as trees; one fused kernel per parameter on the cpu
 * backend; f32 parameters; clipping by global norm; and every error path.
 */
#include "test.h"

#include <stdlib.h>

enum { STEPS = 10 };

static const char *const backends[] = {"ref", "cpu"};

/* A backend of exactly this name: OT_BACKEND would override it, and these
 * cases compare the two backends and count the cpu backend's kernels. */
static ot_backend *backend(const char *name, int threads)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new(name, &(ot_backend_opts){.threads = threads});
    CHECK(be != NULL);
    return be;
}

/* ---- host helpers ---------------------------------------------------------- */

/* splitmix64, uniform in [lo, hi). */
static double urand(uint64_t *state, double lo, double hi)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return lo + (hi - lo) * ((double)((z ^ (z >> 31)) >> 11) * 0x1p-53);
}

static void fill_rand(double *h, int64_t n, uint64_t *state)
{
    for (int64_t i = 0; i < n; i++) h[i] = urand(state, -1, 1);
}

/* A tensor of dtype dt holding host values (rounded to f32 for OT_F32). */
static ot_tensor *make(ot_backend *be, ot_shape shape, ot_dtype dt, const double *h)
{
    int64_t n = 1;
    for (int d = 0; d < shape.ndim; d++) n *= shape.dims[d];
    if (dt == OT_F64) return ot_array(be, shape, dt, h);
    float *f = malloc(sizeof *f * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) f[i] = (float)h[i];
    ot_tensor *t = ot_array(be, shape, dt, f);
    free(f);
    return t;
}

/* Every element of t within tol of the host values (CHECK_NEAR's
 * relative-or-absolute closeness); reports the first one that is not. */
static void check_values(const ot_tensor *t, const double *want, double tol)
{
    int64_t n = ot_tensor_numel(t);
    double *got = malloc(sizeof *got * (size_t)(n ? n : 1));
    if (ot_tensor_dtype(t) == OT_F64) {
        CHECK_INT(ot_get(t, got), 0);
    } else {
        float *f = malloc(sizeof *f * (size_t)(n ? n : 1));
        CHECK_INT(ot_get(t, f), 0);
        for (int64_t i = 0; i < n; i++) got[i] = f[i];
        free(f);
    }
    for (int64_t i = 0; i < n; i++)
        if (!test__close(got[i], want[i], tol)) {
            CHECK_NEAR(got[i], want[i], tol);
            break;
        }
    free(got);
}

/* ---- references, in double, literally the header's formulas ------------------ */

static void sgd_ref(const ot_sgd *o, int64_t n, double *w, const double *g, double *v)
{
    double gs = o->grad_scale == 0 ? 1 : o->grad_scale;
    for (int64_t i = 0; i < n; i++) {
        double d = gs * g[i] + o->weight_decay * w[i];
        if (v) {
            v[i] = o->momentum * v[i] - o->lr * d;
            w[i] = w[i] + v[i];
        } else {
            w[i] = w[i] - o->lr * d;
        }
    }
}

static void adam_ref(const ot_adam *o, int64_t n, double *w, const double *g, double *m, double *v)
{
    double gs = o->grad_scale == 0 ? 1 : o->grad_scale;
    double t = (double)o->t;
    for (int64_t i = 0; i < n; i++) {
        double d = gs * g[i];
        m[i] = o->beta1 * m[i] + (1 - o->beta1) * d;
        v[i] = o->beta2 * v[i] + (1 - o->beta2) * d * d;
        w[i] = w[i] - o->lr * sqrt(1 - pow(o->beta2, t)) / (1 - pow(o->beta1, t)) * m[i] /
                          (sqrt(v[i]) + o->eps) - o->lr * o->weight_decay * w[i];
    }
}

/* ---- one parameter with its state, on a backend and on the host -------------- */

typedef struct param {
    ot_shape shape;
    int64_t n;
    ot_tensor *w, *s[2];     /* s: vel, or m and v; NULL when unused */
    double *hw, *hs[2], *hg;
} param;

static void param_new(param *p, ot_backend *be, ot_shape shape, ot_dtype dt, int nstate,
                      uint64_t *rng)
{
    memset(p, 0, sizeof *p);
    p->shape = shape;
    p->n = 1;
    for (int d = 0; d < shape.ndim; d++) p->n *= shape.dims[d];
    size_t bytes = sizeof(double) * (size_t)p->n;
    p->hw = malloc(bytes);
    p->hg = malloc(bytes);
    fill_rand(p->hw, p->n, rng);
    p->w = make(be, shape, dt, p->hw);
    /* The host reference starts from the values the tensor really holds. */
    check_values(p->w, p->hw, dt == OT_F64 ? 0 : 1e-7);
    if (dt == OT_F32)
        for (int64_t i = 0; i < p->n; i++) p->hw[i] = (float)p->hw[i];
    for (int k = 0; k < nstate; k++) {
        p->hs[k] = calloc((size_t)p->n, sizeof(double));
        p->s[k] = ot_zeros(be, shape, dt);
    }
}

static void param_free(param *p)
{
    ot_tensor_free(p->w);
    for (int k = 0; k < 2; k++) {
        ot_tensor_free(p->s[k]);
        free(p->hs[k]);
    }
    free(p->hw);
    free(p->hg);
}

/* A fresh random gradient for the step: host values and a tensor of them. */
static ot_tensor *param_grad(param *p, ot_dtype dt, uint64_t *rng)
{
    fill_rand(p->hg, p->n, rng);
    ot_tensor *g = make(ot_tensor_backend(p->w), p->shape, dt, p->hg);
    if (dt == OT_F32)
        for (int64_t i = 0; i < p->n; i++) p->hg[i] = (float)p->hg[i];
    return g;
}

static void param_check(const param *p, double tol)
{
    check_values(p->w, p->hw, tol);
    for (int k = 0; k < 2; k++)
        if (p->s[k]) check_values(p->s[k], p->hs[k], tol);
}

/* ---- SGD and Adam against the references ---------------------------------- */

/* STEPS steps of one f64 parameter on each backend, large enough for the
 * cpu backend to split it into tiles and threads. */
static void run_sgd(const ot_sgd *o, bool with_vel)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(backends[b], 0);
        uint64_t rng = 7;
        param p;
        param_new(&p, be, OT_SHAPE(257, 129), OT_F64, with_vel, &rng);
        for (int s = 0; s < STEPS; s++) {
            ot_tensor *g = param_grad(&p, OT_F64, &rng);
            CHECK_INT(ot_sgd_step(o, 1, &p.w, (ot_node *[]){ot_tensor_node(g)},
                                  with_vel ? &p.s[0] : NULL), 0);
            sgd_ref(o, p.n, p.hw, p.hg, p.hs[0]);
            ot_tensor_free(g);
        }
        param_check(&p, 1e-12);
        param_free(&p);
        ot_backend_free(be);
    }
}

TEST(optim_sgd_momentum_weight_decay)
{
    run_sgd(&(ot_sgd){.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}, true);
    run_sgd(&(ot_sgd){.lr = 0.05, .momentum = 0.5, .grad_scale = 0.25}, true);
}

TEST(optim_sgd_plain)
{
    run_sgd(&(ot_sgd){.lr = 0.1}, false);
    run_sgd(&(ot_sgd){.lr = 0.1, .weight_decay = 0.001, .grad_scale = 2}, false);
    /* Momentum 0 with velocities: v = -lr*d is still written. */
    run_sgd(&(ot_sgd){.lr = 0.1, .weight_decay = 0.001}, true);
}

static void run_adam(ot_adam o)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(backends[b], 0);
        uint64_t rng = 11;
        param p;
        param_new(&p, be, OT_SHAPE(257, 129), OT_F64, 2, &rng);
        for (o.t = 1; o.t <= STEPS; o.t++) {
            ot_tensor *g = param_grad(&p, OT_F64, &rng);
            CHECK_INT(ot_adam_step(&o, 1, &p.w, (ot_node *[]){ot_tensor_node(g)}, &p.s[0],
                                   &p.s[1]), 0);
            adam_ref(&o, p.n, p.hw, p.hg, p.hs[0], p.hs[1]);
            ot_tensor_free(g);
        }
        param_check(&p, 1e-12);
        param_free(&p);
        ot_backend_free(be);
    }
}

TEST(optim_adam)
{
    run_adam(ot_adam_default(1e-2));
    run_adam((ot_adam){.lr = 0.1, .beta1 = 0.5, .beta2 = 0.75, .eps = 1e-3, .grad_scale = 3});
    /* betas of 0 mean the defaults; 1e-300 is as good as a beta of 0 */
    run_adam((ot_adam){.lr = 0.1, .beta1 = 1e-300, .beta2 = 1e-300, .eps = 1e-6, .t = 1});
}

/* AdamW: the decay lr*weight_decay*w is outside the moments (the
 * reference subtracts it from the old w after Adam's term), and a negative
 * or NaN weight_decay is refused before anything is written. */
TEST(optim_adam_weight_decay)
{
    ot_adam o = ot_adam_default(1e-2);
    o.weight_decay = 0.5;
    run_adam(o);
    run_adam((ot_adam){.lr = 0.1, .beta1 = 0.5, .beta2 = 0.75, .eps = 1e-3, .grad_scale = 3,
                       .weight_decay = 0.01});
    ot_backend *be = backend("cpu", 0);
    ot_tensor *w = ot_full(be, OT_SHAPE(3), OT_F32, 1.0), *m = ot_zeros(be, OT_SHAPE(3), OT_F32);
    ot_tensor *v = ot_zeros(be, OT_SHAPE(3), OT_F32);
    ot_node *g = ot_tensor_node(m);
    CHECK_INT(ot_adam_step(&(ot_adam){.weight_decay = -1}, 1, &w, &g, &m, &v), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "adam_step", "weight_decay");
    CHECK_INT(ot_adam_step(&(ot_adam){.weight_decay = NAN}, 1, &w, &g, &m, &v), OT_EINVAL);
    /* a zero gradient leaves only the decay: w = 1 - lr*weight_decay */
    CHECK_INT(ot_adam_step(&(ot_adam){.lr = 0.1, .weight_decay = 0.5}, 1, &w, &g, &m, &v), 0);
    float h[3];
    CHECK_INT(ot_get(w, h), 0);
    for (int i = 0; i < 3; i++) CHECK_NEAR(h[i], 0.95, 1e-7);
    ot_tensor_free(w);
    ot_tensor_free(m);
    ot_tensor_free(v);
    ot_backend_free(be);
}

/* A program's AdamW step (its decay a tree scaled by lr_scale on the
 * backend) tracks the eager step with the same lr_scale. */
TEST(optim_program_adam_weight_decay)
{
    const float h[6] = {0.5f, -1.25f, 2, 0.75f, -0.125f, 3};
    ot_backend *be = backend("cpu", 0);
    ot_program *p = ot_program_new(be);
    ot_tensor *w[2], *m[2], *v[2], *g = ot_array(be, OT_SHAPE(6), OT_F32, h);
    ot_tensor *scale = ot_full(be, OT_SHAPE(), OT_F64, 0.5);
    w[0] = ot_program_variable(p, "w", OT_SHAPE(6), OT_F32, OT_INIT_HOST(h));
    w[1] = ot_array(be, OT_SHAPE(6), OT_F32, h);
    for (int k = 0; k < 2; k++) {
        m[k] = ot_zeros(be, OT_SHAPE(6), OT_F32);
        v[k] = ot_zeros(be, OT_SHAPE(6), OT_F32);
    }
    ot_adam o = {.lr = 0.1, .weight_decay = 0.2, .lr_scale = scale};
    ot_node *gn = ot_tensor_node(g);
    CHECK_INT(ot_program_adam(p, &o, 1, &w[0], &gn, &m[0], &v[0]), 0);
    CHECK_INT(ot_program_compile(p), 0);
    for (o.t = 1; o.t <= 3; o.t++) {
        CHECK_INT(ot_program_run(p, 0, NULL), 0);
        CHECK_INT(ot_adam_step(&o, 1, &w[1], &gn, &m[1], &v[1]), 0);
    }
    float a[6], b[6];
    CHECK_INT(ot_get(w[0], a), 0);
    CHECK_INT(ot_get(w[1], b), 0);
    for (int i = 0; i < 6; i++) CHECK_NEAR(a[i], b[i], 1e-6);
    /* g constant: Adam's term is lr*0.5 a step; the decay lr*0.5*0.2*w:
     * w = 3 -> 2.92 -> 2.8408 -> 2.762392 (plain Adam: 2.85) */
    CHECK_NEAR(a[5], 2.762392, 1e-6);
    ot_program_free(p);
    for (int k = 0; k < 2; k++) {
        ot_tensor_free(m[k]);
        ot_tensor_free(v[k]);
    }
    ot_tensor_free(w[1]);
    ot_tensor_free(g);
    ot_tensor_free(scale);
    ot_backend_free(be);
}

/* One step of each options on a fresh (w, m, v) copy of the same values:
 * the parameters' bits after it. */
static void step_bits(ot_backend *be, bool adam, const void *opts, float out[6])
{
    const float h[6] = {0.5f, -1.25f, 2, 0.75f, -0.125f, 3};
    ot_tensor *w = ot_array(be, OT_SHAPE(6), OT_F32, h), *m = ot_zeros(be, OT_SHAPE(6), OT_F32);
    ot_tensor *v = ot_zeros(be, OT_SHAPE(6), OT_F32);
    ot_pool *pool = ot_pool_push();
    ot_node *g = ot_mul(ot_tensor_node(w), 0.5f);
    CHECK_INT(adam ? ot_adam_step(opts, 1, &w, &g, &m, &v) : ot_sgd_step(opts, 1, &w, &g, NULL), 0);
    ot_pool_pop(pool);
    CHECK_INT(ot_get(w, out), 0);
    ot_tensor_free(w);
    ot_tensor_free(m);
    ot_tensor_free(v);
}

static void same_step(ot_backend *be, bool adam, const void *a, const void *b)
{
    float x[6], y[6];
    step_bits(be, adam, a, x);
    step_bits(be, adam, b, y);
    CHECK(memcmp(x, y, sizeof x) == 0);
}

/* A zero field is its default (issue 31): (ot_adam){.lr = 1e-3} is
 * ot_adam_default(1e-3), (ot_adam){0} is the default lr too, and
 * (ot_sgd){0} steps with OT_SGD_LR; before, eps 0 was refused and lr 0
 * was a step that changed nothing. */
TEST(optim_zero_options_are_defaults)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(backends[b], 0);
        ot_adam def = ot_adam_default(1e-3), lr_only = {.lr = 1e-3}, zero = {0};
        same_step(be, true, &lr_only, &def);
        def = ot_adam_default(OT_ADAM_LR);
        same_step(be, true, &zero, &def);
        same_step(be, false, &(ot_sgd){0}, &(ot_sgd){.lr = OT_SGD_LR, .grad_scale = 1});
        float before[6] = {0.5f, -1.25f, 2, 0.75f, -0.125f, 3}, after[6];
        step_bits(be, false, &(ot_sgd){0}, after);
        CHECK(after[0] != before[0]);
        ot_backend_free(be);
    }
}

/* A schedule through lr_scale: each step reads the tensor's value then, and
 * matches a step whose lr is lr*scale; a bad scale is an error. */
TEST(optim_lr_scale)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(backends[b], 0);
        ot_tensor *scale = ot_empty(be, OT_SHAPE(), OT_F64);
        for (int opt = 0; opt < 3; opt++) {
            uint64_t rng = 5;
            param p;
            param_new(&p, be, OT_SHAPE(33, 17), OT_F64, opt == 2 ? 2 : opt, &rng);
            ot_sgd sgd = {.lr = 0.1, .momentum = opt ? 0.9 : 0, .lr_scale = scale};
            ot_adam adam = ot_adam_default(0.05);
            adam.lr_scale = scale;
            for (int k = 0; k < STEPS; k++) {
                double f = 1.0 - 0.09 * k;
                CHECK_INT(ot_set(scale, &f), 0);
                ot_tensor *g = param_grad(&p, OT_F64, &rng);
                ot_node *gn[] = {ot_tensor_node(g)};
                if (opt < 2) {
                    CHECK_INT(ot_sgd_step(&sgd, 1, &p.w, gn, opt ? &p.s[0] : NULL), 0);
                    ot_sgd ref = sgd;
                    ref.lr *= f;
                    sgd_ref(&ref, p.n, p.hw, p.hg, p.hs[0]);
                } else {
                    adam.t = k + 1;
                    CHECK_INT(ot_adam_step(&adam, 1, &p.w, gn, &p.s[0], &p.s[1]), 0);
                    ot_adam ref = adam;
                    ref.lr *= f;
                    adam_ref(&ref, p.n, p.hw, p.hg, p.hs[0], p.hs[1]);
                }
                ot_tensor_free(g);
            }
            param_check(&p, 1e-12);
            param_free(&p);
        }
        ot_tensor *iscale = ot_zeros(be, OT_SHAPE(), OT_I32);
        ot_tensor *vscale = ot_zeros(be, OT_SHAPE(2), OT_F64);
        ot_tensor *w = ot_zeros(be, OT_SHAPE(2), OT_F64);
        ot_node *g[] = {ot_tensor_node(w)};
        CHECK_INT(ot_sgd_step(&(ot_sgd){.lr = 1, .lr_scale = iscale}, 1, &w, g, NULL), OT_EDTYPE);
        CHECK_ERR(OT_EDTYPE, "sgd_step", "lr_scale is int32");
        ot_adam a = ot_adam_default(1);
        a.lr_scale = vscale;
        CHECK_INT(ot_adam_step(&a, 1, &w, g, &w, &w), OT_ESHAPE);
        CHECK_ERR(OT_ESHAPE, "adam_step", "lr_scale has shape (2,); it must be 0-d");
        ot_tensor_free(iscale);
        ot_tensor_free(vscale);
        ot_tensor_free(w);
        ot_tensor_free(scale);
        ot_backend_free(be);
    }
}

/* A 2-D weight and a 1-D bias in one call, the bias's gradient a tree
 * (2*g), for SGD with momentum and for Adam. */
TEST(optim_several_params)
{
    ot_sgd sgd = {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
    ot_adam adam = ot_adam_default(1e-2);
    for (int b = 0; b < 2; b++) {
        for (int use_adam = 0; use_adam < 2; use_adam++) {
            ot_backend *be = backend(backends[b], 0);
            uint64_t rng = 5;
            param p[2];
            param_new(&p[0], be, OT_SHAPE(4, 5), OT_F64, 1 + use_adam, &rng);
            param_new(&p[1], be, OT_SHAPE(5), OT_F64, 1 + use_adam, &rng);
            for (int s = 1; s <= STEPS; s++) {
                ot_pool *pool = ot_pool_push();
                ot_tensor *g0 = param_grad(&p[0], OT_F64, &rng), *g1 = param_grad(&p[1], OT_F64, &rng);
                for (int64_t i = 0; i < p[1].n; i++) p[1].hg[i] *= 2;
                ot_node *g[2] = {ot_tensor_node(g0), ot_mul(g1, 2.0)};
                ot_tensor *w[2] = {p[0].w, p[1].w};
                if (use_adam) {
                    adam.t = s;
                    CHECK_INT(ot_adam_step(&adam, 2, w, g, (ot_tensor *[]){p[0].s[0], p[1].s[0]},
                                           (ot_tensor *[]){p[0].s[1], p[1].s[1]}), 0);
                    for (int k = 0; k < 2; k++)
                        adam_ref(&adam, p[k].n, p[k].hw, p[k].hg, p[k].hs[0], p[k].hs[1]);
                } else {
                    CHECK_INT(ot_sgd_step(&sgd, 2, w, g, (ot_tensor *[]){p[0].s[0], p[1].s[0]}), 0);
                    for (int k = 0; k < 2; k++) sgd_ref(&sgd, p[k].n, p[k].hw, p[k].hg, p[k].hs[0]);
                }
                ot_pool_pop(pool);
                ot_tensor_free(g0);
                ot_tensor_free(g1);
            }
            for (int k = 0; k < 2; k++) {
                param_check(&p[k], 1e-12);
                param_free(&p[k]);
            }
            ot_backend_free(be);
        }
    }
}

/* A gradient tree from autodiff that reads w itself (the loss sum(w*w)/2,
 * whose gradient is w): the step's trees read w while it is written. */
TEST(optim_autodiff_gradient)
{
    ot_sgd sgd = {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(backends[b], 0);
        uint64_t rng = 19;
        param p;
        param_new(&p, be, OT_SHAPE(6, 7), OT_F64, 1, &rng);
        for (int s = 0; s < STEPS; s++) {
            ot_pool *pool = ot_pool_push();
            ot_autodiff *ad = ot_autodiff_new(ot_mul(ot_sum(ot_mul(p.w, p.w)), 0.5), NULL);
            ot_node *g = ot_autodiff_grad(ad, p.w);
            CHECK_INT(ot_sgd_step(&sgd, 1, &p.w, &g, &p.s[0]), 0);
            memcpy(p.hg, p.hw, sizeof(double) * (size_t)p.n);
            sgd_ref(&sgd, p.n, p.hw, p.hg, p.hs[0]);
            ot_autodiff_free(ad);
            ot_pool_pop(pool);
        }
        param_check(&p, 1e-12);
        param_free(&p);
        ot_backend_free(be);
    }
}

/* f32 parameters, state and gradients stay f32 and follow the f64
 * reference to f32 precision. */
TEST(optim_f32_stays_f32)
{
    for (int b = 0; b < 2; b++) {
        for (int use_adam = 0; use_adam < 2; use_adam++) {
            ot_backend *be = backend(backends[b], 0);
            uint64_t rng = 3;
            param p;
            param_new(&p, be, OT_SHAPE(33), OT_F32, 1 + use_adam, &rng);
            ot_sgd sgd = {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
            ot_adam adam = ot_adam_default(1e-2);
            for (int s = 1; s <= STEPS; s++) {
                ot_tensor *g = param_grad(&p, OT_F32, &rng);
                ot_node *gn = ot_tensor_node(g);
                if (use_adam) {
                    adam.t = s;
                    CHECK_INT(ot_adam_step(&adam, 1, &p.w, &gn, &p.s[0], &p.s[1]), 0);
                    adam_ref(&adam, p.n, p.hw, p.hg, p.hs[0], p.hs[1]);
                } else {
                    CHECK_INT(ot_sgd_step(&sgd, 1, &p.w, &gn, &p.s[0]), 0);
                    sgd_ref(&sgd, p.n, p.hw, p.hg, p.hs[0]);
                }
                ot_tensor_free(g);
            }
            CHECK_INT(ot_tensor_dtype(p.w), OT_F32);
            CHECK_INT(ot_tensor_dtype(p.s[0]), OT_F32);
            param_check(&p, 1e-5);
            param_free(&p);
            ot_backend_free(be);
        }
    }
}

/* ---- fusion on the cpu backend --------------------------------------------- */

enum { N = 1037 };   /* not a multiple of any vector width */

/* Kernels run and bytes moved by one step of a single (N,) parameter with
 * nstate state tensors (SGD without them, SGD with momentum, Adam). */
static void fused_step(ot_dtype dt, int nstate, uint64_t *kernels, uint64_t *bytes)
{
    ot_backend *be = backend("cpu", 1);
    uint64_t rng = 9;
    param p;
    param_new(&p, be, OT_SHAPE(N), dt, nstate, &rng);
    ot_tensor *g = param_grad(&p, dt, &rng);
    ot_node *gn = ot_tensor_node(g);
    ot_stats s0, s1;
    ot_stats(be, &s0);
    if (nstate == 2) {
        ot_adam o = ot_adam_default(1e-3);
        CHECK_INT(ot_adam_step(&o, 1, &p.w, &gn, &p.s[0], &p.s[1]), 0);
    } else {
        ot_sgd o = {.lr = 0.1, .momentum = nstate ? 0.9 : 0, .weight_decay = 0.01};
        CHECK_INT(ot_sgd_step(&o, 1, &p.w, &gn, nstate ? &p.s[0] : NULL), 0);
    }
    ot_stats(be, &s1);
    *kernels = s1.kernels - s0.kernels;
    *bytes = s1.bytes_moved - s0.bytes_moved;
    ot_tensor_free(g);
    param_free(&p);
    ot_backend_free(be);
}

/* Each step reads w, g and the state once and writes w and the state once,
 * in one kernel: the w tree shares its nodes with the state trees. */
TEST(optim_fused_one_kernel)
{
    for (int dt = OT_F32; dt <= OT_F64; dt++) {
        uint64_t es = ot_dtype_size((ot_dtype)dt), kernels, bytes;
        fused_step((ot_dtype)dt, 0, &kernels, &bytes);   /* plain SGD */
        CHECK_INT(kernels, 1);
        CHECK_INT(bytes, (2 + 1) * N * es);
        fused_step((ot_dtype)dt, 1, &kernels, &bytes);   /* SGD with momentum */
        CHECK_INT(kernels, 1);
        CHECK_INT(bytes, (3 + 2) * N * es);
        fused_step((ot_dtype)dt, 2, &kernels, &bytes);   /* Adam */
        CHECK_INT(kernels, 1);
        CHECK_INT(bytes, (4 + 3) * N * es);
    }
}

/* ---- clipping -------------------------------------------------------------- */

TEST(optim_clip_global_norm)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(backends[b], 0);
        uint64_t rng = 13;
        double h0[12], h1[5];
        fill_rand(h0, 12, &rng);
        fill_rand(h1, 5, &rng);
        double want = 0;
        for (int i = 0; i < 12; i++) want += h0[i] * h0[i];
        for (int i = 0; i < 5; i++) want += 4 * h1[i] * h1[i];
        want = sqrt(want);
        ot_tensor *g0 = ot_array(be, OT_SHAPE(3, 4), OT_F64, h0);
        ot_tensor *g1 = ot_array(be, OT_SHAPE(5), OT_F64, h1);
        ot_pool *pool = ot_pool_push();
        ot_node *g[2] = {ot_tensor_node(g0), ot_mul(g1, 2.0)};
        double scale, norm;
        CHECK_INT(ot_clip_global_norm(2, g, want / 4, &scale, &norm), 0);
        CHECK_NEAR(norm, want, 1e-14);
        CHECK_NEAR(scale, 0.25, 1e-14);
        CHECK_INT(ot_clip_global_norm(2, g, want * 2, &scale, NULL), 0);
        CHECK(scale == 1);
        CHECK_INT(ot_clip_global_norm(0, NULL, 1, &scale, &norm), 0);
        CHECK(scale == 1 && norm == 0);
        ot_pool_pop(pool);
        ot_tensor_free(g0);
        ot_tensor_free(g1);
        ot_backend_free(be);
    }
}

/* Zero gradients give scale 1; a NaN or an inf gives a NaN scale; f32
 * gradients are squared in f64, so 1e20 does not overflow. */
TEST(optim_clip_special_values)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(backends[b], 0);
        ot_tensor *z = ot_zeros(be, OT_SHAPE(6), OT_F32);
        ot_tensor *nan = ot_array(be, OT_SHAPE(3), OT_F64, (double[]){1, NAN, 2});
        ot_tensor *inf = ot_array(be, OT_SHAPE(2), OT_F64, (double[]){1, -INFINITY});
        ot_tensor *big = ot_full(be, OT_SHAPE(4), OT_F32, 1e20);
        double scale, norm;
        CHECK_INT(ot_clip_global_norm(1, (ot_node *[]){ot_tensor_node(z)}, 1, &scale, &norm), 0);
        CHECK(scale == 1 && norm == 0);
        CHECK_INT(ot_clip_global_norm(2, (ot_node *[]){ot_tensor_node(z), ot_tensor_node(nan)}, 1,
                                      &scale, &norm), 0);
        CHECK(isnan(scale) && isnan(norm));
        CHECK_INT(ot_clip_global_norm(1, (ot_node *[]){ot_tensor_node(inf)}, 1, &scale, &norm), 0);
        CHECK(isnan(scale) && isinf(norm));
        CHECK_INT(ot_clip_global_norm(1, (ot_node *[]){ot_tensor_node(big)}, 1, &scale, &norm), 0);
        CHECK_NEAR(norm, 2e20, 1e-7);
        CHECK_NEAR(scale, 5e-21, 1e-7);
        ot_tensor_free(z);
        ot_tensor_free(nan);
        ot_tensor_free(inf);
        ot_tensor_free(big);
        ot_backend_free(be);
    }
}

/* A clipped step: the scale goes to grad_scale. A NaN scale poisons w. */
TEST(optim_clipped_sgd_step)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(backends[b], 0);
        uint64_t rng = 17;
        param p;
        param_new(&p, be, OT_SHAPE(4, 6), OT_F64, 1, &rng);
        ot_tensor *g = param_grad(&p, OT_F64, &rng);
        ot_node *gn = ot_tensor_node(g);
        double scale, norm;
        CHECK_INT(ot_clip_global_norm(1, &gn, 0.5, &scale, &norm), 0);
        CHECK(scale < 1);
        ot_sgd o = {.lr = 0.1, .momentum = 0.9, .grad_scale = scale};
        CHECK_INT(ot_sgd_step(&o, 1, &p.w, &gn, &p.s[0]), 0);
        sgd_ref(&o, p.n, p.hw, p.hg, p.hs[0]);
        param_check(&p, 1e-12);
        o.grad_scale = NAN;
        CHECK_INT(ot_sgd_step(&o, 1, &p.w, &gn, &p.s[0]), 0);
        for (int64_t i = 0; i < p.n; i++) p.hw[i] = p.hs[0][i] = NAN;
        param_check(&p, 0);
        ot_tensor_free(g);
        param_free(&p);
        ot_backend_free(be);
    }
}

/* A huge f32 gradient clipped to norm 1 (grad_scale 5e-39) with a small lr:
 * lr*grad_scale/momentum is below f32's smallest value, and the momentum
 * form that folds it into one constant lost the update (v stayed 0). The
 * step must give v = -lr*grad_scale*g = -5e-9, as the formula does. */
TEST(optim_sgd_tiny_lr_times_grad_scale)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(backends[b], 0);
        ot_tensor *w = ot_full(be, OT_SHAPE(4), OT_F32, 1.0);
        ot_tensor *v = ot_zeros(be, OT_SHAPE(4), OT_F32);
        ot_tensor *g = ot_full(be, OT_SHAPE(4), OT_F32, 1e38);
        ot_node *gn = ot_tensor_node(g);
        double scale;
        CHECK_INT(ot_clip_global_norm(1, &gn, 1.0, &scale, NULL), 0);
        CHECK_NEAR(scale, 5e-39, 1e-6);
        ot_sgd o = {.lr = 1e-8, .momentum = 0.9, .grad_scale = scale};
        CHECK_INT(ot_sgd_step(&o, 1, &w, &gn, &v), 0);
        float hv[4];
        CHECK_INT(ot_get(v, hv), 0);
        for (int i = 0; i < 4; i++) CHECK_NEAR(hv[i] * 1e9, -5, 1e-6);   /* relative */
        ot_tensor_free(w);
        ot_tensor_free(v);
        ot_tensor_free(g);
        ot_backend_free(be);
    }
}

/* ---- errors ---------------------------------------------------------------- */

typedef struct errfx {
    ot_backend *be;
    ot_tensor *w, *b, *gw, *gb, *vw, *vb, *mw, *mb, *wi, *gshort;
    ot_tensor *W[2], *V[2], *M[2];
    ot_node *G[2];
    ot_pool *pool;
} errfx;

static void errfx_new(errfx *f)
{
    f->be = backend("cpu", 0);
    f->w = ot_full(f->be, OT_SHAPE(3, 4), OT_F64, 1);
    f->b = ot_full(f->be, OT_SHAPE(4), OT_F64, 2);
    f->gw = ot_full(f->be, OT_SHAPE(3, 4), OT_F64, 0.5);
    f->gb = ot_full(f->be, OT_SHAPE(4), OT_F64, 0.5);
    f->vw = ot_zeros(f->be, OT_SHAPE(3, 4), OT_F64);
    f->vb = ot_zeros(f->be, OT_SHAPE(4), OT_F64);
    f->mw = ot_zeros(f->be, OT_SHAPE(3, 4), OT_F64);
    f->mb = ot_zeros(f->be, OT_SHAPE(4), OT_F64);
    f->wi = ot_zeros(f->be, OT_SHAPE(4), OT_I32);
    f->gshort = ot_zeros(f->be, OT_SHAPE(3), OT_F64);
    f->W[0] = f->w, f->W[1] = f->b;
    f->V[0] = f->vw, f->V[1] = f->vb;
    f->M[0] = f->mw, f->M[1] = f->mb;
    f->G[0] = ot_tensor_node(f->gw), f->G[1] = ot_tensor_node(f->gb);
    f->pool = ot_pool_push();
}

/* Nothing was written: the first parameter and its state are unchanged. */
static void errfx_unchanged(const errfx *f)
{
    double w[12], v[12], m[12], ones[12], zeros[12] = {0};
    for (int i = 0; i < 12; i++) ones[i] = 1;
    CHECK_INT(ot_get(f->w, w), 0);
    CHECK_INT(ot_get(f->vw, v), 0);
    CHECK_INT(ot_get(f->mw, m), 0);
    CHECK(memcmp(w, ones, sizeof w) == 0);
    CHECK(memcmp(v, zeros, sizeof v) == 0);
    CHECK(memcmp(m, zeros, sizeof m) == 0);
}

static void errfx_free(errfx *f)
{
    errfx_unchanged(f);
    ot_pool_pop(f->pool);
    ot_tensor *all[] = {f->w, f->b, f->gw, f->gb, f->vw, f->vb, f->mw, f->mb, f->wi, f->gshort};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ot_tensor_free(all[i]);
    ot_backend_free(f->be);
}

TEST(optim_sgd_errors)
{
    errfx f;
    errfx_new(&f);
    ot_sgd o = {.lr = 0.1, .momentum = 0.9};
    CHECK_INT(ot_sgd_step(NULL, 2, f.W, f.G, f.V), OT_ENULL);
    CHECK_ERR(OT_ENULL, "sgd_step", "options are NULL");
    CHECK_INT(ot_sgd_step(&o, -1, f.W, f.G, f.V), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "sgd_step", "negative count -1");
    CHECK_INT(ot_sgd_step(&o, 2, NULL, f.G, f.V), OT_ENULL);
    CHECK_ERR(OT_ENULL, "w is NULL");
    CHECK_INT(ot_sgd_step(&o, 2, f.W, NULL, f.V), OT_ENULL);
    CHECK_ERR(OT_ENULL, "g is NULL");
    CHECK_INT(ot_sgd_step(&o, 2, f.W, (ot_node *[]){f.G[0], NULL}, f.V), OT_ENULL);
    CHECK_ERR(OT_ENULL, "sgd_step", "g[1] is NULL");
    /* A gradient whose builder failed: its error is kept. */
    ot_node *bad = ot_add(f.gw, f.gshort);
    CHECK(bad == NULL);
    CHECK_INT(ot_sgd_step(&o, 2, f.W, (ot_node *[]){f.G[0], bad}, f.V), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "add", "(3,4)", "(3,)");
    CHECK_INT(ot_sgd_step(&o, 2, (ot_tensor *[]){f.w, NULL}, f.G, f.V), OT_ENULL);
    CHECK_ERR(OT_ENULL, "w[1] is NULL");
    CHECK_INT(ot_sgd_step(&o, 2, f.W, f.G, (ot_tensor *[]){f.vw, NULL}), OT_ENULL);
    CHECK_ERR(OT_ENULL, "vel[1] is NULL");
    CHECK_INT(ot_sgd_step(&o, 2, f.W, f.G, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "vel is NULL but momentum is 0.9");
    const struct { ot_sgd o; const char *msg; } bad_opts[] = {
        {{.lr = -0.1}, "lr must be finite and >= 0, not -0.1"},
        {{.lr = NAN}, "lr must be finite and >= 0, not nan"},
        {{.lr = INFINITY}, "lr must be finite and >= 0, not inf"},
        {{.lr = 0.1, .momentum = INFINITY}, "momentum must be finite and >= 0"},
        {{.lr = 0.1, .momentum = -0.5}, "momentum must be finite and >= 0"},
        {{.lr = 0.1, .weight_decay = -1}, "weight_decay must be finite and >= 0"},
        {{.lr = 0.1, .grad_scale = -2}, "grad_scale must be >= 0 (0 means 1), not -2"},
    };
    for (size_t i = 0; i < sizeof bad_opts / sizeof bad_opts[0]; i++) {
        CHECK_INT(ot_sgd_step(&bad_opts[i].o, 2, f.W, f.G, f.V), OT_EINVAL);
        CHECK_ERR(OT_EINVAL, "sgd_step", bad_opts[i].msg);
    }
    CHECK_INT(ot_sgd_step(&o, 2, (ot_tensor *[]){f.w, f.wi}, f.G, f.V), OT_EDTYPE);
    CHECK_ERR(OT_EDTYPE, "w[1] is int32");
    CHECK_INT(ot_sgd_step(&o, 2, f.W, f.G, (ot_tensor *[]){f.vw, f.wi}), OT_EDTYPE);
    CHECK_ERR(OT_EDTYPE, "vel[1] is int32");
    CHECK_INT(ot_sgd_step(&o, 2, f.W, (ot_node *[]){f.G[0], ot_tensor_node(f.gshort)}, f.V),
              OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "g[1] has shape (3,) but w[1] has shape (4,)");
    /* A gradient that would broadcast is still an error: shapes must match. */
    CHECK_INT(ot_sgd_step(&o, 2, f.W, (ot_node *[]){ot_tensor_node(f.gb), f.G[1]}, f.V), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "g[0] has shape (4,) but w[0] has shape (3,4)");
    CHECK_INT(ot_sgd_step(&o, 2, f.W, f.G, (ot_tensor *[]){f.vw, f.gshort}), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "vel[1] has shape (3,) but w[1] has shape (4,)");
    /* Outputs that overlap: found by ot_assign_many before any write. */
    CHECK_INT(ot_sgd_step(&o, 2, f.W, f.G, (ot_tensor *[]){f.vw, f.b}), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "overlap");
    CHECK_INT(ot_sgd_step(&o, 2, (ot_tensor *[]){f.w, f.w}, (ot_node *[]){f.G[0], f.G[0]},
                          (ot_tensor *[]){f.vw, f.mw}), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "overlap");
    /* Nothing to do is fine, even without arrays. */
    CHECK_INT(ot_sgd_step(&o, 0, NULL, NULL, NULL), 0);
    CHECK_ERR(0, "");
    errfx_free(&f);
}

TEST(optim_adam_errors)
{
    errfx f;
    errfx_new(&f);
    ot_adam o = ot_adam_default(1e-3);
    CHECK_INT(ot_adam_step(NULL, 2, f.W, f.G, f.M, f.V), OT_ENULL);
    CHECK_ERR(OT_ENULL, "adam_step", "options are NULL");
    CHECK_INT(ot_adam_step(&o, -2, f.W, f.G, f.M, f.V), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "adam_step", "negative count -2");
    CHECK_INT(ot_adam_step(&o, 2, NULL, f.G, f.M, f.V), OT_ENULL);
    CHECK_ERR(OT_ENULL, "w is NULL");
    CHECK_INT(ot_adam_step(&o, 2, f.W, NULL, f.M, f.V), OT_ENULL);
    CHECK_ERR(OT_ENULL, "g is NULL");
    CHECK_INT(ot_adam_step(&o, 2, f.W, (ot_node *[]){NULL, f.G[1]}, f.M, f.V), OT_ENULL);
    CHECK_ERR(OT_ENULL, "g[0] is NULL");
    CHECK_INT(ot_adam_step(&o, 2, f.W, f.G, NULL, f.V), OT_ENULL);
    CHECK_ERR(OT_ENULL, "adam_step", "m is NULL");
    CHECK_INT(ot_adam_step(&o, 2, f.W, f.G, f.M, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "adam_step", "v is NULL");
    CHECK_INT(ot_adam_step(&o, 2, f.W, f.G, (ot_tensor *[]){f.mw, NULL}, f.V), OT_ENULL);
    CHECK_ERR(OT_ENULL, "m[1] is NULL");
    CHECK_INT(ot_adam_step(&o, 2, f.W, f.G, f.M, (ot_tensor *[]){NULL, f.vb}), OT_ENULL);
    CHECK_ERR(OT_ENULL, "v[0] is NULL");
    const struct { size_t field; double value; const char *msg; } bad_opts[] = {
        {offsetof(ot_adam, lr), -1, "lr must be finite and >= 0, not -1"},
        {offsetof(ot_adam, lr), INFINITY, "lr must be finite and >= 0, not inf"},
        {offsetof(ot_adam, beta1), 1, "beta1 must be in [0, 1), not 1"},
        {offsetof(ot_adam, beta1), -0.1, "beta1 must be in [0, 1), not -0.1"},
        {offsetof(ot_adam, beta2), 1.5, "beta2 must be in [0, 1), not 1.5"},
        {offsetof(ot_adam, beta2), NAN, "beta2 must be in [0, 1), not nan"},
        {offsetof(ot_adam, eps), -1e-8, "eps must be finite and > 0"},
        {offsetof(ot_adam, eps), INFINITY, "eps must be finite and > 0, not inf"},
        {offsetof(ot_adam, grad_scale), -1, "grad_scale must be >= 0"},
    };
    for (size_t i = 0; i < sizeof bad_opts / sizeof bad_opts[0]; i++) {
        ot_adam b = o;
        *(double *)((char *)&b + bad_opts[i].field) = bad_opts[i].value;
        CHECK_INT(ot_adam_step(&b, 2, f.W, f.G, f.M, f.V), OT_EINVAL);
        CHECK_ERR(OT_EINVAL, "adam_step", bad_opts[i].msg);
    }
    o.t = -1;
    CHECK_INT(ot_adam_step(&o, 2, f.W, f.G, f.M, f.V), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "adam_step", "step count t must be >= 1", "not -1");
    o.t = 1;
    CHECK_INT(ot_adam_step(&o, 2, (ot_tensor *[]){f.w, f.wi}, f.G, f.M, f.V), OT_EDTYPE);
    CHECK_ERR(OT_EDTYPE, "w[1] is int32", "parameters must be float32 or float64");
    CHECK_INT(ot_adam_step(&o, 2, f.W, f.G, (ot_tensor *[]){f.mw, f.wi}, f.V), OT_EDTYPE);
    CHECK_ERR(OT_EDTYPE, "m[1] is int32");
    CHECK_INT(ot_adam_step(&o, 2, f.W, (ot_node *[]){f.G[0], ot_tensor_node(f.gshort)}, f.M, f.V),
              OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "g[1] has shape (3,) but w[1] has shape (4,)");
    CHECK_INT(ot_adam_step(&o, 2, f.W, f.G, f.M, (ot_tensor *[]){f.vw, f.gshort}), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "v[1] has shape (3,) but w[1] has shape (4,)");
    CHECK_INT(ot_adam_step(&o, 2, f.W, f.G, f.M, (ot_tensor *[]){f.mw, f.vb}), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "overlap");
    CHECK_INT(ot_adam_step(&o, 0, NULL, NULL, NULL, NULL), 0);
    CHECK_ERR(0, "");
    errfx_free(&f);
}

/* Gradients, states and lr_scale on another backend than the parameters,
 * and integer gradients: errors at the caller's line, before any tree is
 * built (the builders' mixed-backend error named a line of optim.c), and
 * nothing is written. */
TEST(optim_backend_and_dtype_errors)
{
    errfx f;
    errfx_new(&f);
    ot_backend *other = backend("ref", 0);
    ot_tensor *gw = ot_full(other, OT_SHAPE(3, 4), OT_F64, 0.5);
    ot_tensor *vw = ot_zeros(other, OT_SHAPE(3, 4), OT_F64);
    ot_tensor *lr = ot_full(other, OT_SHAPE(), OT_F64, 1);
    ot_tensor *gi = ot_zeros(f.be, OT_SHAPE(3, 4), OT_I32);
    char site[256];
    ot_sgd s = {.lr = 0.1, .momentum = 0.9};
    int line = __LINE__ + 1;
    CHECK_INT(ot_sgd_step(&s, 2, f.W, (ot_node *[]){ot_tensor_node(gw), f.G[1]}, f.V), OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, TEST_SITE(site, line), "sgd_step: g[0] reads tensors of backend 'ref' but w[0] is on backend 'cpu'");
    CHECK(strstr(ot_errmsg(), "optim.c") == NULL);
    CHECK_INT(ot_sgd_step(&s, 2, f.W, f.G, (ot_tensor *[]){vw, f.vb}), OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, "vel[0] is on backend 'ref' but w[0] is on backend 'cpu'");
    ot_sgd sl = {.lr = 0.1, .lr_scale = lr};
    CHECK_INT(ot_sgd_step(&sl, 2, f.W, f.G, NULL), OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, "lr_scale is on backend 'ref' but w[0] is on backend 'cpu'");
    CHECK_INT(ot_sgd_step(&s, 2, f.W, (ot_node *[]){ot_tensor_node(gi), f.G[1]}, f.V), OT_EDTYPE);
    CHECK_ERR(OT_EDTYPE, "g[0] is int32; a gradient must be float32 or float64");
    ot_adam a = ot_adam_default(1e-3);
    CHECK_INT(ot_adam_step(&a, 2, f.W, f.G, (ot_tensor *[]){vw, f.mb}, f.V), OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, "adam_step: m[0] is on backend 'ref'");
    CHECK_INT(ot_adam_step(&a, 2, f.W, (ot_node *[]){ot_tensor_node(gw), f.G[1]}, f.M, f.V),
              OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, "adam_step: g[0] reads tensors of backend 'ref'");
    ot_tensor *all[] = {gw, vw, lr, gi};
    for (int i = 0; i < 4; i++) ot_tensor_free(all[i]);
    errfx_free(&f);
    ot_backend_free(other);
}

TEST(optim_clip_errors)
{
    errfx f;
    errfx_new(&f);
    double scale = 7, norm = 7;
    CHECK_INT(ot_clip_global_norm(-1, f.G, 1, &scale, &norm), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "clip_global_norm", "negative count -1");
    CHECK_INT(ot_clip_global_norm(2, f.G, 1, NULL, &norm), OT_ENULL);
    CHECK_ERR(OT_ENULL, "scale is NULL");
    CHECK_INT(ot_clip_global_norm(2, NULL, 1, &scale, &norm), OT_ENULL);
    CHECK_ERR(OT_ENULL, "g is NULL");
    CHECK_INT(ot_clip_global_norm(2, (ot_node *[]){f.G[0], NULL}, 1, &scale, &norm), OT_ENULL);
    CHECK_ERR(OT_ENULL, "g[1] is NULL");
    ot_node *bad = ot_mul(f.gw, f.gshort);
    CHECK_INT(ot_clip_global_norm(2, (ot_node *[]){f.G[0], bad}, 1, &scale, &norm), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "mul");
    ot_pool *inner = ot_pool_push();
    ot_node *dead = ot_mul(f.gw, 2.0);
    ot_pool_pop(inner);
    char site[128];
    int line = __LINE__ + 1;
    CHECK_INT(ot_clip_global_norm(2, (ot_node *[]){f.G[0], dead}, 1, &scale, &norm), OT_ESTATE);
    CHECK_ERR(OT_ESTATE, TEST_SITE(site, line), "clip_global_norm: g[1] is a dead node");
    const double bad_max[] = {0, -1, NAN};
    for (int i = 0; i < 3; i++) {
        CHECK_INT(ot_clip_global_norm(2, f.G, bad_max[i], &scale, &norm), OT_EINVAL);
        CHECK_ERR(OT_EINVAL, "max_norm must be > 0");
    }
    /* A gradient with no tensor leaf has no backend to be evaluated on. */
    CHECK_INT(ot_clip_global_norm(2, (ot_node *[]){f.G[0], ot_const(1.0)}, 1, &scale, &norm),
              OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, "eval");
    CHECK(scale == 7 && norm == 7);
    errfx_free(&f);
}
