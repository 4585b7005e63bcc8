/*
 * test_program.c - unit tests of programs and sequences (src/front/program.c):
 * results bitwise those of the same steps run as plain ot_assign_many (a
 * 64-element W3 step; an MLP training step over several runs with re-bound
 * inputs; both backends), symbolic dims re-specialised per size, the arena
 * figures and explain text, variables and their initializers, ot_sequential's
 * ordering, and every bad build, compile and binding, checked before
 * anything is written.
 */
#include "test.h"
#include "internal.h"   /* ot__alloc_fail_at, the allocation seam */

#include <math.h>
#include <stdlib.h>

static const char *const backends[] = {"ref", "cpu"};

static ot_backend *backend(const char *name)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new(name, &(ot_backend_opts){.threads = 2});
    CHECK(be != NULL);
    return be;
}

static void fill(float *h, int64_t n, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        h[i] = 0.5f + (float)(seed >> 40) / (float)(1u << 24);
    }
}

static bool same_bits(const ot_tensor *a, const ot_tensor *b)
{
    int64_t n = ot_tensor_numel(a);
    if (n != ot_tensor_numel(b)) return false;
    float *x = malloc(sizeof *x * (size_t)(n ? n : 1)), *y = malloc(sizeof *y * (size_t)(n ? n : 1));
    bool same = ot_get(a, x) == 0 && ot_get(b, y) == 0 && memcmp(x, y, sizeof *x * (size_t)n) == 0;
    free(x);
    free(y);
    return same;
}

static ot_node *w3(ot_node *a, ot_node *b) { return ot_tanh(ot_add(ot_mul(a, b), ot_div(a, b))); }

/* ---- W3 as a program ------------------------------------------------------ */

TEST(program_w3_bitwise_plain_assign)
{
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = backend(backends[bi]);
        ot_program *p = ot_program_new(be);
        ot_tensor *a = ot_program_placeholder(p, "a", OT_SHAPE(64), OT_F32);
        ot_tensor *b = ot_program_placeholder(p, "b", OT_SHAPE(64), OT_F32);
        ot_tensor *out = ot_empty(be, OT_SHAPE(64), OT_F32), *want = ot_empty(be, OT_SHAPE(64), OT_F32);
        ot_pool *pool = ot_pool_push();
        CHECK_INT(ot_program_assign(p, out, w3(ot_tensor_node(a), ot_tensor_node(b))), 0);
        ot_pool_pop(pool);
        CHECK_INT(ot_program_compile(p), 0);
        float ha[64], hb[64];
        for (int run = 0; run < 3; run++) {
            fill(ha, 64, 1 + run);
            fill(hb, 64, 100 + run);
            ot_tensor *ta = ot_array(be, OT_SHAPE(64), OT_F32, ha);
            ot_tensor *tb = ot_array(be, OT_SHAPE(64), OT_F32, hb);
            /* host data for a, a tensor for b: both read in place */
            ot_bind bind[2] = {OT_BIND_DATA("a", ha, sizeof ha), OT_BIND_TENSOR("b", tb)};
            CHECK_INT(ot_program_run(p, 2, bind), 0);
            ot_pool *q = ot_pool_push();
            CHECK_INT(ot_assign(want, w3(ot_tensor_node(ta), ot_tensor_node(tb))), 0);
            ot_pool_pop(q);
            CHECK(same_bits(out, want));
            ot_tensor_free(ta);
            ot_tensor_free(tb);
        }
        ot_program_stats st;
        CHECK_INT(ot_program_stats_get(p, &st), 0);
        CHECK_INT(st.steps, 1);
        CHECK_INT(st.specializations, 1);
        ot_program_free(p);
        ot_tensor_free(out);
        ot_tensor_free(want);
        ot_backend_free(be);
    }
}

/* Small one-kernel steps (run as one call of their generated code where
 * they qualify: constants, a 0-d operand, f64, no tail) and ones that do
 * not (a tail, a strided view), each bitwise a plain assignment's. */
TEST(program_small_kernels_bitwise)
{
    ot_backend *be = backend("cpu");
    const int64_t sizes[] = {64, 16, 48, 7, 1000};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int f64 = 0; f64 < 2; f64++) {
            int64_t n = sizes[si];
            ot_dtype dt = f64 ? OT_F64 : OT_F32;
            ot_program *p = ot_program_new(be);
            ot_tensor *a = ot_program_placeholder(p, "a", OT_SHAPE(2 * n), dt);
            ot_tensor *even = ot_slice(a, OT_RANGE(0, OT_END, 2)), *head = ot_slice(a, OT_RANGE(0, n));
            ot_tensor *s = ot_full(be, OT_SHAPE(), dt, 0.25);
            ot_tensor *o1 = ot_empty(be, OT_SHAPE(n), dt), *o2 = ot_empty(be, OT_SHAPE(n), dt);
            ot_tensor *w1 = ot_empty(be, OT_SHAPE(n), dt), *w2 = ot_empty(be, OT_SHAPE(n), dt);
            ot_pool *pool = ot_pool_push();
            CHECK_INT(ot_program_assign(p, o1, ot_add(ot_mul(ot_exp(head), 2.5), s)), 0);
            CHECK_INT(ot_program_assign(p, o2, ot_sqrt(ot_add(ot_mul(even, even), o1))), 0);
            ot_pool_pop(pool);
            CHECK_INT(ot_program_compile(p), 0);
            double *h = malloc(sizeof *h * (size_t)(2 * n));
            for (int64_t i = 0; i < 2 * n; i++) h[i] = 0.01 * (double)(i % 97) - 0.3;
            ot_tensor *ta = ot_array(be, OT_SHAPE(2 * n), OT_F64, h);
            ot_tensor *tc = ot_empty(be, OT_SHAPE(2 * n), dt);
            CHECK_INT(ot_assign(tc, ta), 0);
            CHECK_INT(ot_program_run(p, 1, &OT_BIND_TENSOR("a", tc)), 0);
            ot_tensor *ce = ot_slice(tc, OT_RANGE(0, OT_END, 2)), *ch = ot_slice(tc, OT_RANGE(0, n));
            pool = ot_pool_push();
            CHECK_INT(ot_assign(w1, ot_add(ot_mul(ot_exp(ch), 2.5), s)), 0);
            CHECK_INT(ot_assign(w2, ot_sqrt(ot_add(ot_mul(ce, ce), w1))), 0);
            ot_pool_pop(pool);
            double *x = malloc(sizeof *x * (size_t)n), *y = malloc(sizeof *y * (size_t)n);
            ot_tensor *pairs[2][2] = {{o1, w1}, {o2, w2}};
            for (int q = 0; q < 2; q++) {
                ot_tensor *g = ot_empty(be, OT_SHAPE(n), OT_F64), *w = ot_empty(be, OT_SHAPE(n), OT_F64);
                CHECK_INT(ot_assign(g, pairs[q][0]), 0);
                CHECK_INT(ot_assign(w, pairs[q][1]), 0);
                CHECK_INT(ot_get(g, x), 0);
                CHECK_INT(ot_get(w, y), 0);
                CHECK(memcmp(x, y, sizeof *x * (size_t)n) == 0);
                ot_tensor_free(g);
                ot_tensor_free(w);
            }
            free(h);
            free(x);
            free(y);
            ot_tensor *ts[] = {even, head, s, o1, o2, w1, w2, ta, tc, ce, ch};
            for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ot_tensor_free(ts[i]);
            ot_program_free(p);
        }
    ot_backend_free(be);
}

/* A leaf that is a view of a placeholder (a slice with an offset) reads the
 * bound memory at the same offset. */
TEST(program_placeholder_views)
{
    ot_backend *be = backend("cpu");
    ot_program *p = ot_program_new(be);
    ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(2, 8), OT_F32);
    ot_tensor *r1 = ot_slice(x, OT_IDX(1)), *r0 = ot_slice(x, OT_IDX(0));
    ot_tensor *out = ot_empty(be, OT_SHAPE(8), OT_F32);
    ot_pool *pool = ot_pool_push();
    CHECK_INT(ot_program_assign(p, out, ot_sub(r1, ot_mul(r0, 2.0f))), 0);
    ot_pool_pop(pool);
    ot_tensor_free(r1);
    ot_tensor_free(r0);
    CHECK_INT(ot_program_compile(p), 0);
    float h[16], got[8];
    for (int i = 0; i < 16; i++) h[i] = (float)i;
    CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA("x", h, sizeof h)), 0);
    CHECK_INT(ot_get(out, got), 0);
    for (int i = 0; i < 8; i++) CHECK_NEAR(got[i], (8 + i) - 2.0 * i, 0);
    ot_program_free(p);
    ot_tensor_free(out);
    ot_backend_free(be);
}

/* ---- an MLP training step ----------------------------------------------------- */

enum { MB = 8, MI = 12, MH = 16, MC = 4, MLP_RUNS = 4 };

typedef struct mlp {
    ot_tensor *w[4], *g[4];
} mlp;

static ot_node *mlp_loss(ot_tensor *x, ot_tensor *y, ot_tensor *const w[4])
{
    ot_node *h = ot_relu(ot_add(ot_dot(x, w[0]), w[1]));
    ot_node *z = ot_add(ot_dot(h, w[2]), w[3]);
    return ot_mean(ot_cross_entropy(ot_softmax(z, .axis = 1), y, .axis = 1));
}

static const ot_shape *mlp_shapes(void)
{
    static ot_shape s[4];
    s[0] = OT_SHAPE(MI, MH);
    s[1] = OT_SHAPE(MH);
    s[2] = OT_SHAPE(MH, MC);
    s[3] = OT_SHAPE(MC);
    return s;
}

static void mlp_init(float *h, int i, int64_t n) { fill(h, n, 7 + (uint64_t)i); for (int64_t k = 0; k < n; k++) h[k] -= 1.0f; }

static void batch(float *x, float *y, int run)
{
    fill(x, MB * MI, 1000 + (uint64_t)run);
    memset(y, 0, sizeof(float) * MB * MC);
    for (int r = 0; r < MB; r++) y[r * MC + (r + run) % MC] = 1;
}

TEST(program_mlp_training_bitwise)
{
    const ot_sgd sgd = {.lr = 0.1, .momentum = 0.0};
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = backend(backends[bi]);
        const ot_shape *sh = mlp_shapes();
        ot_program *p = ot_program_new(be);
        ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(MB, MI), OT_F32);
        ot_tensor *y = ot_program_placeholder(p, "y", OT_SHAPE(MB, MC), OT_F32);
        mlp prog, plain;
        for (int i = 0; i < 4; i++) {
            int64_t n = 1;
            for (int d = 0; d < sh[i].ndim; d++) n *= sh[i].dims[d];
            float *h = malloc(sizeof *h * (size_t)n);
            mlp_init(h, i, n);
            char name[16];
            snprintf(name, sizeof name, "w%d", i);
            prog.w[i] = ot_program_variable(p, name, sh[i], OT_F32, OT_INIT_HOST(h));
            plain.w[i] = ot_array(be, sh[i], OT_F32, h);
            prog.g[i] = ot_zeros(be, sh[i], OT_F32);
            plain.g[i] = ot_zeros(be, sh[i], OT_F32);
            free(h);
        }
        ot_pool *pool = ot_pool_push();
        CHECK_INT(ot_program_backprop(p, mlp_loss(x, y, prog.w), 4, prog.w, prog.g), 0);
        ot_node *g[4];
        for (int i = 0; i < 4; i++) g[i] = ot_tensor_node(prog.g[i]);
        CHECK_INT(ot_program_sgd(p, &sgd, 4, prog.w, g, NULL), 0);
        ot_pool_pop(pool);
        CHECK_INT(ot_program_compile(p), 0);
        ot_tensor *vars[5] = {0};
        CHECK_INT(ot_program_variables(p, 5, vars), 4);
        CHECK(vars[0] == prog.w[0] && vars[3] == prog.w[3] && vars[4] == NULL);

        float hx[MB * MI], hy[MB * MC];
        for (int run = 0; run < MLP_RUNS; run++) {
            batch(hx, hy, run);
            ot_tensor *tx = ot_array(be, OT_SHAPE(MB, MI), OT_F32, hx);
            ot_tensor *ty = ot_array(be, OT_SHAPE(MB, MC), OT_F32, hy);
            CHECK_INT(ot_program_run(p, 2, (ot_bind[]){OT_BIND_DATA("x", hx, sizeof hx), OT_BIND_TENSOR("y", ty)}), 0);
            /* the same steps as plain assignments */
            ot_pool *q = ot_pool_push();
            ot_autodiff *ad = ot_autodiff_new(mlp_loss(tx, ty, plain.w), NULL);
            CHECK_INT(ot_autodiff_backprop(ad, 4, plain.w, plain.g), 0);
            ot_autodiff_free(ad);
            for (int i = 0; i < 4; i++) g[i] = ot_tensor_node(plain.g[i]);
            CHECK_INT(ot_sgd_step(&sgd, 4, plain.w, g, NULL), 0);
            ot_pool_pop(q);
            for (int i = 0; i < 4; i++) {
                CHECK(same_bits(prog.g[i], plain.g[i]));
                CHECK(same_bits(prog.w[i], plain.w[i]));
            }
            ot_tensor_free(tx);
            ot_tensor_free(ty);
        }
        ot_program_free(p);
        for (int i = 0; i < 4; i++) {
            ot_tensor_free(plain.w[i]);
            ot_tensor_free(plain.g[i]);
            ot_tensor_free(prog.g[i]);
        }
        ot_backend_free(be);
    }
}

/* Largest |a - b| / max(|b|, 1e-30) over two f32 tensors of one shape. */
static double max_rel(const ot_tensor *a, const ot_tensor *b)
{
    int64_t n = ot_tensor_numel(a);
    float *ha = malloc(sizeof *ha * (size_t)n), *hb = malloc(sizeof *hb * (size_t)n);
    ot_get(a, ha);
    ot_get(b, hb);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)ha[i] - hb[i]) / fmax(fabs((double)hb[i]), 1e-30);
        if (!(d <= worst)) worst = d;
    }
    free(ha);
    free(hb);
    return worst;
}

/* Adam as a program step: its own step count starts at o->t and goes up
 * per run, so MLP_RUNS runs track ot_adam_step with t = 2, 3, ...; the bias
 * correction is computed on the backend instead of the host, which may
 * round alpha to f32 the other way: weights agree to a few f32 ulps. */
TEST(program_adam_tracks_ot_adam_step)
{
    ot_adam adam = ot_adam_default(0.01);
    adam.t = 2;
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = backend(backends[bi]);
        const ot_shape *sh = mlp_shapes();
        ot_program *p = ot_program_new(be);
        ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(MB, MI), OT_F32);
        ot_tensor *y = ot_program_placeholder(p, "y", OT_SHAPE(MB, MC), OT_F32);
        ot_tensor *w[2][4], *g[2][4], *m[2][4], *v[2][4];
        for (int i = 0; i < 4; i++) {
            int64_t n = 1;
            for (int d = 0; d < sh[i].ndim; d++) n *= sh[i].dims[d];
            float *h = malloc(sizeof *h * (size_t)n);
            mlp_init(h, i, n);
            char name[16];
            snprintf(name, sizeof name, "w%d", i);
            w[0][i] = ot_program_variable(p, name, sh[i], OT_F32, OT_INIT_HOST(h));
            w[1][i] = ot_array(be, sh[i], OT_F32, h);
            for (int k = 0; k < 2; k++) {
                g[k][i] = ot_zeros(be, sh[i], OT_F32);
                m[k][i] = ot_zeros(be, sh[i], OT_F32);
                v[k][i] = ot_zeros(be, sh[i], OT_F32);
            }
            free(h);
        }
        ot_pool *pool = ot_pool_push();
        CHECK_INT(ot_program_backprop(p, mlp_loss(x, y, w[0]), 4, w[0], g[0]), 0);
        ot_node *gn[4];
        for (int i = 0; i < 4; i++) gn[i] = ot_tensor_node(g[0][i]);
        CHECK_INT(ot_program_adam(p, &adam, 4, w[0], gn, m[0], v[0]), 0);
        ot_pool_pop(pool);
        CHECK_INT(ot_program_compile(p), 0);
        ot_program_stats st;
        CHECK_INT(ot_program_stats_get(p, &st), 0);
        CHECK_INT(st.steps, 3);   /* backprop, the step count, the update */
        float hx[MB * MI], hy[MB * MC];
        ot_adam plain = adam;
        for (int run = 0; run < MLP_RUNS; run++, plain.t++) {
            batch(hx, hy, run);
            CHECK_INT(ot_program_run(p, 2, (ot_bind[]){OT_BIND_DATA("x", hx, sizeof hx), OT_BIND_DATA("y", hy, sizeof hy)}), 0);
            ot_tensor *tx = ot_array(be, OT_SHAPE(MB, MI), OT_F32, hx);
            ot_tensor *ty = ot_array(be, OT_SHAPE(MB, MC), OT_F32, hy);
            ot_pool *q = ot_pool_push();
            ot_autodiff *ad = ot_autodiff_new(mlp_loss(tx, ty, w[1]), NULL);
            CHECK_INT(ot_autodiff_backprop(ad, 4, w[1], g[1]), 0);
            ot_autodiff_free(ad);
            for (int i = 0; i < 4; i++) gn[i] = ot_tensor_node(g[1][i]);
            CHECK_INT(ot_adam_step(&plain, 4, w[1], gn, m[1], v[1]), 0);
            ot_pool_pop(q);
            for (int i = 0; i < 4; i++) {
                CHECK(max_rel(w[0][i], w[1][i]) < 1e-5);
                CHECK(max_rel(m[0][i], m[1][i]) < 1e-5);
            }
            ot_tensor_free(tx);
            ot_tensor_free(ty);
        }
        /* bad options are the optimizer's own errors, and add no step */
        ot_program *q = ot_program_new(be);
        ot_adam bad = adam;
        bad.beta1 = 1.5;
        CHECK_INT(ot_program_adam(q, &bad, 4, w[1], gn, m[1], v[1]), OT_EINVAL);
        CHECK_ERR(OT_EINVAL, "beta1");
        CHECK_INT(ot_program_adam(q, NULL, 4, w[1], gn, m[1], v[1]), OT_ENULL);
        CHECK_INT(ot_program_adam(NULL, &adam, 4, w[1], gn, m[1], v[1]), OT_ENULL);
        CHECK_INT(ot_program_compile(q), 0);
        CHECK_INT(ot_program_stats_get(q, &st), 0);
        CHECK_INT(st.steps, 0);
        ot_program_free(q);
        ot_program_free(p);
        for (int i = 0; i < 4; i++) {
            ot_tensor_free(w[1][i]);
            for (int k = 0; k < 2; k++) {
                ot_tensor_free(g[k][i]);
                ot_tensor_free(m[k][i]);
                ot_tensor_free(v[k][i]);
            }
        }
        ot_backend_free(be);
    }
}

/* ---- symbols ---------------------------------------------------------------- */

/* A batch symbol: each size compiled once and kept; the loss (a mean over
 * the batch) and its gradient match plain assignments at every size. */
TEST(program_symbolic_batch)
{
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = backend(backends[bi]);
        ot_program *p = ot_program_new(be);
        int bs = ot_program_symbol(p, "batch", 4);
        CHECK_INT(bs, 0);
        ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(OT_SYM(bs), 3), OT_F32);
        ot_tensor *w = ot_program_variable(p, "w", OT_SHAPE(3), OT_F32, OT_INIT_CONST(0.5));
        ot_tensor *loss = ot_empty(be, OT_SHAPE(), OT_F32), *gw = ot_empty(be, OT_SHAPE(3), OT_F32);
        CHECK_INT(ot_tensor_dim(x, 0), 4);
        ot_pool *pool = ot_pool_push();
        ot_node *l = ot_mean(ot_sqr(ot_sum(ot_mul(x, w), 1)));
        CHECK_INT(ot_program_assign(p, loss, l), 0);
        CHECK_INT(ot_program_backprop(p, l, 1, &w, &gw), 0);
        ot_pool_pop(pool);
        CHECK_INT(ot_program_compile(p), 0);
        const int sizes[] = {4, 6, 4, 1, 6};
        float h[18];
        for (int k = 0; k < 5; k++) {
            int n = sizes[k];
            fill(h, n * 3, (uint64_t)k);
            CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA_SHAPE("x", h, OT_SHAPE(n, 3), sizeof h)), 0);
            ot_tensor *tx = ot_array(be, OT_SHAPE(n, 3), OT_F32, h);
            ot_tensor *wl = ot_empty(be, OT_SHAPE(), OT_F32), *wg = ot_empty(be, OT_SHAPE(3), OT_F32);
            ot_pool *q = ot_pool_push();
            ot_node *lp = ot_mean(ot_sqr(ot_sum(ot_mul(tx, w), 1)));
            CHECK_INT(ot_assign(wl, lp), 0);
            ot_autodiff *ad = ot_autodiff_new(lp, NULL);
            CHECK_INT(ot_autodiff_backprop(ad, 1, &w, &wg), 0);
            ot_autodiff_free(ad);
            ot_pool_pop(q);
            CHECK(same_bits(loss, wl));
            CHECK(same_bits(gw, wg));
            ot_tensor_free(tx);
            ot_tensor_free(wl);
            ot_tensor_free(wg);
        }
        ot_program_stats st;
        CHECK_INT(ot_program_stats_get(p, &st), 0);
        CHECK_INT(st.specializations, 3);
        ot_program_free(p);
        ot_tensor_free(loss);
        ot_tensor_free(gw);
        ot_backend_free(be);
    }
}

/* A program bound to ever new sizes keeps OT_PROG_SPECS_KEPT (16) of
 * them, forgetting the one run least recently: a size forgotten is
 * specialised again and gives the same bits, one still kept compiles
 * nothing. */
TEST(program_keeps_sixteen_specialisations)
{
    ot_backend *be = backend("cpu");
    ot_program *p = ot_program_new(be);
    int bs = ot_program_symbol(p, "batch", 1);
    ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(OT_SYM(bs)), OT_F32);
    ot_tensor *s = ot_empty(be, OT_SHAPE(), OT_F32), *first = ot_empty(be, OT_SHAPE(), OT_F32);
    ot_pool *pool = ot_pool_push();
    CHECK_INT(ot_program_assign(p, s, ot_sum(ot_tanh(x))), 0);
    ot_pool_pop(pool);
    CHECK_INT(ot_program_compile(p), 0);
    float h[40];
    fill(h, 40, 3);
    ot_program_stats st;
    ot_stats before, after;
    for (int n = 1; n <= 40; n++) {
        CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA_SHAPE("x", h, OT_SHAPE(n), sizeof h)), 0);
        if (n == 3) CHECK_INT(ot_assign(first, ot_tensor_node(s)), 0);
        if (n == 10) {   /* 3 is kept: run again, nothing compiled */
            CHECK_INT(ot_stats_get(be, &before), 0);
            CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA_SHAPE("x", h, OT_SHAPE(3), sizeof h)), 0);
            CHECK_INT(ot_stats_get(be, &after), 0);
            CHECK(after.compiles == before.compiles);
            CHECK(same_bits(s, first));
        }
        CHECK_INT(ot_program_stats_get(p, &st), 0);
        CHECK_INT(st.specializations, n < 16 ? n : 16);
    }
    CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA_SHAPE("x", h, OT_SHAPE(3), sizeof h)), 0);
    CHECK(same_bits(s, first));   /* forgotten (37 sizes since), specialised again */
    CHECK(ot_program_stats_get(p, &st) == 0 && st.specializations == 16);
    ot_program_free(p);
    ot_tensor *all[] = {s, first};
    for (int i = 0; i < 2; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

/* What cannot be re-specialised says so, and writes nothing. */
TEST(program_symbolic_limits)
{
    ot_backend *be = backend("cpu");
    ot_program *p = ot_program_new(be);
    int bs = ot_program_symbol(p, "batch", 4);
    ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(OT_SYM(bs)), OT_F32);
    ot_tensor *out = ot_zeros(be, OT_SHAPE(4), OT_F32);
    ot_pool *pool = ot_pool_push();
    CHECK_INT(ot_program_assign(p, out, ot_exp(x)), 0);
    ot_pool_pop(pool);
    CHECK_INT(ot_program_compile(p), 0);
    float h[6] = {0};
    CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA_SHAPE("x", h, OT_SHAPE(6), sizeof h)), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "step 0");
    float got[4];
    CHECK_INT(ot_get(out, got), 0);
    CHECK(got[0] == 0);
    CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA("x", h, sizeof h)), 0);   /* the nominal size still runs */
    ot_program_free(p);

    p = ot_program_new(be);
    bs = ot_program_symbol(p, "batch", 4);
    x = ot_program_placeholder(p, "x", OT_SHAPE(OT_SYM(bs)), OT_F32);
    ot_tensor *head = ot_slice(x, OT_RANGE(0, 2));
    ot_tensor *o2 = ot_zeros(be, OT_SHAPE(), OT_F32);
    pool = ot_pool_push();
    CHECK_INT(ot_program_assign(p, o2, ot_sum(ot_add(head, 1.0f))), 0);
    ot_pool_pop(pool);
    ot_tensor_free(head);
    CHECK_INT(ot_program_compile(p), 0);
    CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA_SHAPE("x", h, OT_SHAPE(6), sizeof h)), OT_EUNSUPPORTED);
    CHECK_ERR(OT_EUNSUPPORTED, "step 0", "view", "symbolic placeholder");
    ot_program_free(p);
    /* A view mixed with the placeholder itself: the same error whatever
     * size is bound (substituting the placeholder first met the view's
     * shape, an OT_ESHAPE at sizes other than 1). */
    p = ot_program_new(be);
    bs = ot_program_symbol(p, "batch", 3);
    x = ot_program_placeholder(p, "x", OT_SHAPE(OT_SYM(bs), 2), OT_F32);
    ot_tensor *rev = ot_slice(x, OT_RANGE(-1, OT_END, -1));
    ot_tensor *o3 = ot_zeros(be, OT_SHAPE(2), OT_F32);
    pool = ot_pool_push();
    CHECK_INT(ot_program_assign(p, o3, ot_sum(ot_sub(rev, ot_mean(x, .axis = 1, .keepdims = true)), .axis = 0)), 0);
    ot_pool_pop(pool);
    ot_tensor_free(rev);
    CHECK_INT(ot_program_compile(p), 0);
    for (int rows = 1; rows <= 5; rows += 2 + (rows == 1)) {   /* 1, 4: not the nominal 3 */
        float hb[10] = {0};
        CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA_SHAPE("x", hb, OT_SHAPE(rows, 2), sizeof hb)), OT_EUNSUPPORTED);
        CHECK_ERR(OT_EUNSUPPORTED, "step 0", "view", "symbolic placeholder");
    }
    ot_program_free(p);
    ot_tensor_free(o3);
    ot_tensor_free(out);
    ot_tensor_free(o2);
    ot_backend_free(be);
}

/* ---- bad bindings --------------------------------------------------------------- */

/* A program writing sum(a*b, axis 0) into out, a and b placeholders of
 * (batch, 3) f32, batch a symbol (nominal 2); not compiled. */
static ot_program *sum_ab_program(ot_backend *be, ot_tensor *out)
{
    ot_program *p = ot_program_new(be);
    int bs = ot_program_symbol(p, "batch", 2);
    ot_tensor *a = ot_program_placeholder(p, "a", OT_SHAPE(OT_SYM(bs), 3), OT_F32);
    ot_tensor *b = ot_program_placeholder(p, "b", OT_SHAPE(OT_SYM(bs), 3), OT_F32);
    ot_pool *pool = ot_pool_push();
    CHECK_INT(ot_program_assign(p, out, ot_sum(ot_mul(a, b), 0)), 0);
    ot_pool_pop(pool);
    return p;
}

TEST(program_bad_bindings)
{
    ot_backend *be = backend("cpu"), *other = backend("ref");
    ot_tensor *out = ot_zeros(be, OT_SHAPE(3), OT_F32);
    ot_program *p = sum_ab_program(be, out);
    CHECK_INT(ot_program_run(p, 0, NULL), OT_ESTATE);
    CHECK_INT(ot_program_compile(p), 0);
    CHECK_INT(ot_program_compile(p), OT_ESTATE);
    float h[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    ot_tensor *t23 = ot_ones(be, OT_SHAPE(2, 3), OT_F32), *t24 = ot_ones(be, OT_SHAPE(2, 4), OT_F32);
    ot_tensor *d23 = ot_ones(be, OT_SHAPE(2, 3), OT_F64), *o23 = ot_ones(other, OT_SHAPE(2, 3), OT_F32);
    ot_tensor *big = ot_ones(be, OT_SHAPE(3, 2), OT_F32), *tr = ot_transpose(big, NULL);
    ot_bind ok_b = OT_BIND_DATA("b", h, sizeof h);
    struct { ot_bind b[2]; int n, code; const char *msg; } bad[] = {
        {{OT_BIND_TENSOR("a", t24), ok_b}, 2, OT_ESHAPE, "dim 1 is 3"},
        {{OT_BIND_TENSOR("a", d23), ok_b}, 2, OT_EDTYPE, "float64"},
        {{OT_BIND_DATA("a", h, sizeof h)}, 1, OT_EINVAL, "b is not bound"},
        {{OT_BIND_DATA("c", h, sizeof h), ok_b}, 2, OT_EINVAL, "no placeholder named c"},
        {{ok_b, ok_b}, 2, OT_EINVAL, "bound twice"},
        {{OT_BIND_DATA_SHAPE("a", h, OT_SHAPE(4, 3), sizeof h), OT_BIND_TENSOR("b", t23)}, 2, OT_ESHAPE,
         "symbol batch bound two ways"},
        {{{.name = "a"}, ok_b}, 2, OT_ENULL, "neither"},
        {{{.name = "a", .tensor = t23, .data = h}, ok_b}, 2, OT_EINVAL, "both"},
        {{{.data = h}, ok_b}, 2, OT_ENULL, "name is NULL"},
        {{OT_BIND_TENSOR("a", o23), ok_b}, 2, OT_EBACKEND, "another backend"},
        {{OT_BIND_TENSOR("a", tr), ok_b}, 2, OT_EINVAL, "not contiguous"},
        {{OT_BIND_DATA_SHAPE("a", ot_tensor_data(out), OT_SHAPE(1, 3), 3 * sizeof(float)),
          OT_BIND_DATA_SHAPE("b", h, OT_SHAPE(1, 3), sizeof h)}, 2, OT_EALIAS, "step 0 writes"},
        {{OT_BIND_DATA_SHAPE("a", h, OT_SHAPE(2), sizeof h), ok_b}, 2, OT_ESHAPE, "has 2 dims"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_INT(ot_program_run(p, bad[i].n, bad[i].b), bad[i].code);
        CHECK_ERR(bad[i].code, bad[i].msg);
    }
    CHECK_INT(ot_program_run(p, -1, NULL), OT_EINVAL);
    CHECK_INT(ot_program_run(p, 2, NULL), OT_ENULL);
    CHECK_INT(ot_program_run(NULL, 0, NULL), OT_ENULL);
    float got[3];
    CHECK_INT(ot_get(out, got), 0);
    CHECK(got[0] == 0 && got[2] == 0);   /* nothing was written */
    ot_program_stats st;
    CHECK_INT(ot_program_stats_get(p, &st), 0);
    CHECK_INT(st.specializations, 1);   /* nor re-specialised */
    CHECK_INT(ot_program_run(p, 2, (ot_bind[]){OT_BIND_TENSOR("a", t23), ok_b}), 0);
    CHECK_INT(ot_get(out, got), 0);
    CHECK(got[0] == 2 && got[2] == 2);
    ot_program_free(p);
    ot_tensor *ts[] = {out, t23, t24, d23, o23, big, tr};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ot_tensor_free(ts[i]);
    ot_backend_free(be);
    ot_backend_free(other);
}

/* A run binding the tensors of the last run skips their checks: what may
 * have changed since is still checked (the names' text, another tensor at
 * a freed one's address, the sizes bound, another order). */
TEST(program_repeated_bindings_checked)
{
    ot_backend *be = backend("cpu");
    ot_tensor *out = ot_zeros(be, OT_SHAPE(3), OT_F32);
    ot_program *p = sum_ab_program(be, out);
    CHECK_INT(ot_program_compile(p), 0);
    ot_tensor *ta = ot_ones(be, OT_SHAPE(2, 3), OT_F32), *tb = ot_full(be, OT_SHAPE(2, 3), OT_F32, 2);
    char na[2] = "a";
    ot_bind bind[2] = {OT_BIND_TENSOR(na, ta), OT_BIND_TENSOR("b", tb)};
    float got[3];
    for (int i = 0; i < 2; i++) CHECK_INT(ot_program_run(p, 2, bind), 0);
    CHECK_INT(ot_get(out, got), 0);
    CHECK(got[0] == 4 && got[2] == 4);
    na[0] = 'c';   /* the same pointers, another name */
    CHECK_INT(ot_program_run(p, 2, bind), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "no placeholder named c");
    na[0] = 'a';
    CHECK_INT(ot_program_run(p, 2, bind), 0);
    CHECK_INT(ot_program_run(p, 1, bind), OT_EINVAL);   /* fewer bindings */
    CHECK_ERR(OT_EINVAL, "b is not bound");
    CHECK_INT(ot_program_run(p, 2, bind), 0);
    ot_tensor_free(ta);   /* another tensor, maybe at ta's address */
    bind[0].tensor = ta = ot_ones(be, OT_SHAPE(2, 4), OT_F32);
    CHECK_INT(ot_program_run(p, 2, bind), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "dim 1 is 3");
    ot_tensor_free(ta);
    bind[0].tensor = ta = ot_ones(be, OT_SHAPE(4, 3), OT_F32);   /* another batch */
    CHECK_INT(ot_program_run(p, 2, bind), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "bound two ways");
    ot_tensor *tb4 = ot_full(be, OT_SHAPE(4, 3), OT_F32, 3);
    ot_bind swapped[2] = {OT_BIND_TENSOR("b", tb4), OT_BIND_TENSOR("a", ta)};
    for (int i = 0; i < 2; i++) CHECK_INT(ot_program_run(p, 2, swapped), 0);
    CHECK_INT(ot_get(out, got), 0);
    CHECK(got[0] == 12 && got[2] == 12);
    ot_program_stats st;
    CHECK_INT(ot_program_stats_get(p, &st), 0);
    CHECK_INT(st.specializations, 2);
    ot_program_free(p);
    ot_tensor *ts[] = {out, ta, tb, tb4};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ot_tensor_free(ts[i]);
    ot_backend_free(be);
}

TEST(program_run_tensors_binds_by_position)
{
    ot_backend *be = backend("cpu");
    ot_tensor *out = ot_zeros(be, OT_SHAPE(3), OT_F32);
    ot_program *p = sum_ab_program(be, out);
    ot_tensor *ta = ot_ones(be, OT_SHAPE(2, 3), OT_F32), *tb = ot_full(be, OT_SHAPE(2, 3), OT_F32, 2);
    CHECK_INT(ot_program_run_tensors(p, 2, (ot_tensor *[]){ta, tb}), OT_ESTATE);
    CHECK_INT(ot_program_compile(p), 0);
    float got[3];
    for (int i = 0; i < 2; i++)   /* the second run takes the last-run shortcut */
        CHECK_INT(ot_program_run_tensors(p, 2, (ot_tensor *[]){ta, tb}), 0);
    CHECK_INT(ot_get(out, got), 0);
    CHECK(got[0] == 4 && got[2] == 4);
    CHECK_INT(ot_program_run_tensors(p, 2, (ot_tensor *[]){ta, ta}), 0);   /* one tensor twice */
    CHECK_INT(ot_get(out, got), 0);
    CHECK(got[1] == 2);
    CHECK_INT(ot_program_run_tensors(p, 3, (ot_tensor *[]){ta, tb, tb}), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "program_run", "3 tensors for 2 placeholders");
    CHECK_INT(ot_program_run_tensors(p, 1, (ot_tensor *[]){ta}), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "b is not bound");
    CHECK_INT(ot_program_run_tensors(p, 2, (ot_tensor *[]){ta, NULL}), OT_ENULL);
    CHECK_INT(ot_program_run_tensors(p, 2, NULL), OT_ENULL);
    ot_tensor *wide = ot_ones(be, OT_SHAPE(2, 4), OT_F32);
    CHECK_INT(ot_program_run_tensors(p, 2, (ot_tensor *[]){wide, tb}), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "placeholder a", "dim 1 is 3");
    ot_program_free(p);
    ot_tensor *ts[] = {out, ta, tb, wide};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ot_tensor_free(ts[i]);
    ot_backend_free(be);
}

/* ---- bad programs -------------------------------------------------------------- */

TEST(program_bad_build)
{
    CHECK(ot_program_new(NULL) == NULL);
    CHECK_ERR(OT_ENULL, "backend is NULL");
    ot_backend *be = backend("cpu");
    ot_program *p = ot_program_new(be);
    CHECK_INT(ot_program_symbol(p, "n", 2), 0);
    CHECK_INT(ot_program_symbol(p, "n", 2), OT_EINVAL);
    CHECK_INT(ot_program_symbol(p, "m", -1), OT_EINVAL);
    CHECK_INT(ot_program_symbol(p, NULL, 1), OT_ENULL);
    CHECK_INT(ot_program_symbol(NULL, "k", 1), OT_ENULL);
    ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(3), OT_F32);
    CHECK(x != NULL);
    CHECK(ot_program_placeholder(p, "x", OT_SHAPE(3), OT_F32) == NULL);
    CHECK_ERR(OT_EINVAL, "placeholder named x exists");
    CHECK(ot_program_placeholder(p, "z", OT_SHAPE(OT_SYM(5)), OT_F32) == NULL);
    CHECK_ERR(OT_EINVAL, "symbol 5");
    CHECK(ot_program_placeholder(p, "", OT_SHAPE(3), OT_F32) == NULL);
    CHECK(ot_program_variable(p, "v", OT_SHAPE(OT_SYM(0)), OT_F32, OT_INIT_ZERO) == NULL);
    CHECK_ERR(OT_EINVAL, "no symbols");
    CHECK(ot_program_variable(p, "v", OT_SHAPE(3), OT_F32, (ot_init){.kind = 9}) == NULL);
    CHECK_ERR(OT_EINVAL, "initializer kind 9");
    CHECK(ot_program_variable(p, "v", OT_SHAPE(3), OT_F32, OT_INIT_HOST(NULL)) == NULL);
    CHECK_ERR(OT_ENULL, "data is NULL");
    CHECK(ot_program_variable(p, "v", OT_SHAPE(3), OT_F32, OT_INIT_UNIFORM(1, 0, 1)) == NULL);
    CHECK_ERR(OT_EINVAL, "lo <= hi");
    ot_tensor *v = ot_program_variable(p, "v", OT_SHAPE(3), OT_F32, OT_INIT_UNIFORM(-1, 1, 3));
    ot_tensor *c = ot_program_variable(p, "c", OT_SHAPE(3), OT_F32, OT_INIT_CONST(2));
    float hv[3], hc[3];
    CHECK_INT(ot_get(v, hv), 0);
    CHECK_INT(ot_get(c, hc), 0);
    for (int i = 0; i < 3; i++) CHECK(hv[i] >= -1 && hv[i] < 1 && hc[i] == 2);
    CHECK_INT(ot_program_variables(p, 0, NULL), 2);
    CHECK_INT(ot_program_variables(p, -1, NULL), OT_EINVAL);
    CHECK_INT(ot_program_variables(p, 1, NULL), OT_ENULL);

    /* steps: NULLs at once, shapes at compile with the step and file:line */
    ot_tensor *o3 = ot_zeros(be, OT_SHAPE(3), OT_F32), *o4 = ot_zeros(be, OT_SHAPE(4), OT_F32);
    ot_pool *pool = ot_pool_push();
    CHECK_INT(ot_program_assign_node(p, o3, NULL), OT_ENULL);
    CHECK_INT(ot_program_assign_node(p, NULL, ot_tensor_node(x)), OT_ENULL);
    CHECK_INT(ot_program_assign_many(p, -1, NULL, NULL), OT_EINVAL);
    CHECK_INT(ot_program_assign_many(p, 1, NULL, NULL), OT_ENULL);
    CHECK_INT(ot_program_backprop(p, NULL, 0, NULL, NULL), OT_ENULL);
    CHECK_INT(ot_program_sgd(p, NULL, 1, &v, (ot_node *[]){ot_tensor_node(c)}, NULL), OT_ENULL);
    CHECK_INT(ot_program_assign(p, o3, ot_add(x, v)), 0);
    int line = __LINE__ + 1;
    CHECK_INT(ot_program_assign(p, o4, ot_mul(x, c)), 0);
    ot_pool_pop(pool);
    CHECK_INT(ot_program_compile(p), OT_ESHAPE);
    char where[64];
    snprintf(where, sizeof where, "test_program.c:%d", line);
    CHECK_ERR(OT_ESHAPE, where, "step 1", "(3,)", "(4,)");
    ot_program_free(p);

    /* a step writing a placeholder */
    p = ot_program_new(be);
    x = ot_program_placeholder(p, "x", OT_SHAPE(3), OT_F32);
    pool = ot_pool_push();
    CHECK_INT(ot_program_assign(p, x, ot_add(o3, 1.0f)), 0);
    ot_pool_pop(pool);
    CHECK_INT(ot_program_compile(p), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "step 0", "placeholder x");
    ot_program_free(p);

    /* nothing is added once compiled */
    p = ot_program_new(be);
    CHECK_INT(ot_program_compile(p), 0);
    CHECK_INT(ot_program_run(p, 0, NULL), 0);
    CHECK(ot_program_placeholder(p, "y", OT_SHAPE(3), OT_F32) == NULL);
    CHECK_ERR(OT_ESTATE, "compiled");
    CHECK_INT(ot_program_assign(p, o3, o4), OT_ESTATE);
    CHECK_INT(ot_program_stats_get(p, NULL), OT_ENULL);
    CHECK_INT(ot_program_explain(p, NULL), OT_ENULL);
    ot_program_free(p);
    ot_program_free(NULL);
    ot_tensor_free(o3);
    ot_tensor_free(o4);
    ot_backend_free(be);
}

/* ---- the arena and explain ---------------------------------------------------- */

TEST(program_arena_and_explain)
{
    ot_backend *be = backend("cpu");
    ot_program *p = ot_program_new(be);
    ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(64, 64), OT_F32);
    ot_tensor *s1 = ot_empty(be, OT_SHAPE(64), OT_F32), *s2 = ot_empty(be, OT_SHAPE(64), OT_F32);
    ot_pool *pool = ot_pool_push();
    /* a softmax materialises its rows' max and sum: temporaries per step */
    CHECK_INT(ot_program_assign(p, s1, ot_sum(ot_softmax(x, 1), 1)), 0);
    CHECK_INT(ot_program_assign(p, s2, ot_sum(ot_mul(ot_softmax(ot_exp(x), 1), s1), 1)), 0);
    ot_pool_pop(pool);
    ot_program_stats st;
    CHECK_INT(ot_program_stats_get(p, &st), OT_ESTATE);
    CHECK_INT(ot_program_compile(p), 0);
    CHECK_INT(ot_program_stats_get(p, &st), 0);
    CHECK_INT(st.steps, 2);
    CHECK(st.kernels >= 2);
    CHECK(st.arena_bytes > 0 && st.arena_bytes < st.separate_bytes);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK_INT(ot_program_explain(p, f), 0);
    fclose(f);
    CHECK(strstr(text, "step 0") && strstr(text, "step 1") && strstr(text, "one arena of"));
    char *generic = NULL;   /* ot_explain on a program is ot_program_explain */
    f = open_memstream(&generic, &len);
    CHECK_INT(ot_explain(p, f), 0);
    fclose(f);
    CHECK_STR(generic, text);
    free(generic);
    free(text);
    ot_program_free(p);
    ot_tensor_free(s1);
    ot_tensor_free(s2);
    ot_backend_free(be);
}

/* ---- ot_sequential --------------------------------------------------------------- */

TEST(sequential_later_steps_see_earlier_writes)
{
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = backend(backends[bi]);
        ot_tensor *x = ot_full(be, OT_SHAPE(4), OT_F32, 3);
        ot_tensor *h = ot_zeros(be, OT_SHAPE(4), OT_F32), *o = ot_zeros(be, OT_SHAPE(4), OT_F32);
        ot_pool *pool = ot_pool_push();
        ot_node *t1 = ot_mul(x, 2.0f), *t2 = ot_add(h, 1.0f), *t3 = ot_mul(x, h);
        ot_step steps[] = {{1, &h, &t1}, {1, &o, &t2}, {1, &x, &t3}};
        CHECK_INT(ot_sequential(3, steps), 0);
        ot_pool_pop(pool);
        float ho[4], hx[4];
        CHECK_INT(ot_get(o, ho), 0);
        CHECK_INT(ot_get(x, hx), 0);
        CHECK(ho[0] == 7 && ho[3] == 7);    /* h = 6 when step 1 ran */
        CHECK(hx[0] == 18 && hx[3] == 18);  /* x * h, both before step 2 wrote x */
        ot_tensor_free(x);
        ot_tensor_free(h);
        ot_tensor_free(o);
        ot_backend_free(be);
    }
}

TEST(sequential_bad_steps)
{
    ot_backend *be = backend("cpu");
    ot_tensor *a = ot_zeros(be, OT_SHAPE(3), OT_F32), *b = ot_zeros(be, OT_SHAPE(4), OT_F32);
    ot_pool *pool = ot_pool_push();
    ot_node *one = ot_add(a, 1.0f), *bad = ot_mul(b, 2.0f);
    char at[128];
    int line = __LINE__ + 1;
    CHECK_INT(ot_sequential(2, (ot_step[]){{1, &a, &one}, {1, &a, &bad}}), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(at, line), "sequential", "step 1");
    float h[3];
    CHECK_INT(ot_get(a, h), 0);
    CHECK(h[0] == 0);   /* step 0 did not run either */
    ot_node *null_tree = NULL;
    CHECK_INT(ot_sequential(1, (ot_step[]){{1, &a, &null_tree}}), OT_ENULL);
    CHECK_ERR(OT_ENULL, "step 0");
    CHECK_INT(ot_sequential(-1, NULL), OT_EINVAL);
    CHECK_INT(ot_sequential(1, NULL), OT_ENULL);
    CHECK_INT(ot_sequential(0, NULL), 0);
    ot_pool_pop(pool);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_backend_free(be);
}

/* ---- allocation failures ------------------------------------------------------ */

/* Every allocation of building, compiling and running a program (with a
 * symbol re-specialised) fails in turn: each call returns an error and
 * leaks nothing (ASan checks), and nothing crashes. */
static int oom_once(ot_backend *be, ot_tensor *out, long fail_at)
{
    ot__alloc_fail_at(fail_at);
    ot_program *p = ot_program_new(be);
    int bs = p ? ot_program_symbol(p, "batch", 4) : -1;
    ot_tensor *x = bs >= 0 ? ot_program_placeholder(p, "x", OT_SHAPE(OT_SYM(bs), 3), OT_F32) : NULL;
    ot_tensor *w = x ? ot_program_variable(p, "w", OT_SHAPE(3), OT_F32, OT_INIT_UNIFORM(0, 1, 2)) : NULL;
    ot_pool *pool = w ? ot_pool_push() : NULL;
    int rc = pool ? 0 : -1;
    if (pool) {
        ot_node *l = ot_mean(ot_sqr(ot_sum(ot_mul(x, w), 1)));
        rc = ot_program_assign(p, out, l);
        if (!rc) rc = ot_program_backprop(p, l, 1, &w, &out);
        ot_pool_pop(pool);
    }
    float h[18] = {0};
    if (!rc) rc = ot_program_compile(p);
    if (!rc) rc = ot_program_run(p, 1, &OT_BIND_DATA("x", h, sizeof h));
    if (!rc) rc = ot_program_run(p, 1, &OT_BIND_DATA_SHAPE("x", h, OT_SHAPE(6, 3), sizeof h));
    ot__alloc_fail_at(0);
    ot_program_free(p);
    ot_pool_drain();
    return rc;
}

TEST(program_allocation_failures)
{
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = backend(backends[bi]);
        ot_tensor *out = ot_zeros(be, OT_SHAPE(3), OT_F32);
        long n = 1;
        while (oom_once(be, out, n) != 0 && n < 100000) n++;
        CHECK(n > 1 && n < 100000);
        ot_tensor_free(out);
        ot_backend_free(be);
    }
}

/* A backend's rule sets apply to a program's steps as to plain assigns:
 * log(softmax) of logits of +-1000, -inf as written, is finite under the
 * library's "fuse" set, and bitwise the plain assignment's on that backend. */
TEST(program_steps_rewritten_by_backend_rule_sets)
{
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = ot_backend_new(backends[bi], &(ot_backend_opts){.rewrite = "fuse"});
        CHECK(be != NULL);
        if (!be) continue;
        ot_program *p = ot_program_new(be);
        ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(4, 16), OT_F32);
        ot_tensor *out = ot_empty(be, OT_SHAPE(4, 16), OT_F32);
        ot_tensor *want = ot_empty(be, OT_SHAPE(4, 16), OT_F32);
        ot_pool *pool = ot_pool_push();
        CHECK_INT(ot_program_assign(p, out, ot_log(ot_softmax(x, 1))), 0);
        ot_pool_pop(pool);
        CHECK_INT(ot_program_compile(p), 0);
        float hx[64];
        fill(hx, 64, 5);
        for (int i = 0; i < 64; i++) hx[i] = (hx[i] - 0.5f) * 2000;
        CHECK_INT(ot_program_run(p, 1, (ot_bind[]){OT_BIND_DATA("x", hx, sizeof hx)}), 0);
        ot_tensor *tx = ot_array(be, OT_SHAPE(4, 16), OT_F32, hx);
        pool = ot_pool_push();
        CHECK_INT(ot_assign(want, ot_log(ot_softmax(tx, 1))), 0);
        ot_pool_pop(pool);
        CHECK(same_bits(out, want));
        float h[64];
        ot_get(out, h);
        for (int i = 0; i < 64; i++) CHECK(isfinite(h[i]));
        ot_tensor_free(tx);
        ot_program_free(p);
        ot_tensor_free(out);
        ot_tensor_free(want);
        ot_backend_free(be);
    }
}

/* ---- host bindings state their size (issue 31) ------------------------------ */

/* A binding's declared shape larger than the caller's buffer read past it
 * (ASan: heap-buffer-overflow in exec.c). Host data now carries nbytes:
 * fewer than the shape needs, or none, is OT_EINVAL naming the
 * placeholder, the shape and both byte counts, and nothing is written. */
TEST(program_host_binding_byte_count)
{
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = backend(backends[bi]);
        ot_program *p = ot_program_new(be);
        int bs = ot_program_symbol(p, "batch", 2);
        ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(OT_SYM(bs), 3), OT_F32);
        ot_tensor *out = ot_zeros(be, OT_SHAPE(), OT_F32);
        ot_pool *pool = ot_pool_push();
        CHECK_INT(ot_program_assign(p, out, ot_sum(x)), 0);
        ot_pool_pop(pool);
        CHECK_INT(ot_program_compile(p), 0);
        float *h = malloc(4 * sizeof *h);   /* 4 floats: a (4,3) binding would read 12 */
        for (int i = 0; i < 4; i++) h[i] = 1;
        CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA_SHAPE("x", h, OT_SHAPE(4, 3), 4 * sizeof *h)),
                  OT_EINVAL);
        CHECK_ERR(OT_EINVAL, "program_run", "binding x", "shape (4,3) needs 48 bytes",
                  "gives 16");
        CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA("x", h, 4 * sizeof *h)), OT_EINVAL);
        CHECK_ERR(OT_EINVAL, "binding x", "shape (2,3) needs 24 bytes", "gives 16");
        CHECK_INT(ot_program_run(p, 1, &(ot_bind){.name = "x", .data = h}), OT_EINVAL);
        CHECK_ERR(OT_EINVAL, "binding x", "needs 24 bytes", "gives no byte count");
        float got = -1;
        CHECK_INT(ot_get(out, &got), 0);
        CHECK(got == 0);   /* nothing ran */
        CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA_SHAPE("x", h, OT_SHAPE(1, 3), 3 * sizeof *h)), 0);
        CHECK_INT(ot_get(out, &got), 0);
        CHECK(got == 3);
        /* more bytes than needed are fine: the shape says what is read */
        CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA_SHAPE("x", h, OT_SHAPE(1, 2 + 1), 4 * sizeof *h)), 0);
        free(h);
        ot_tensor_free(out);
        ot_program_free(p);
        ot_backend_free(be);
    }
}

/* ---- errors name the caller's file:line and the shapes (issue 31) ---------- */

/* An error a step finds while running (an index out of range) names the
 * run's line, program_run, the step and where its tree was built, on a
 * backend that prepares steps and on one that assigns them. */
TEST(program_run_errors_name_the_step)
{
    for (int b = 0; b < 2; b++) {
        char at[128], built[128];
        ot_backend *be = backend(b ? "cpu" : "ref");
        ot_program *p = ot_program_new(be);
        ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(4), OT_F32);
        ot_tensor *idx = ot_program_placeholder(p, "idx", OT_SHAPE(4), OT_I32);
        ot_tensor *z = ot_zeros(be, OT_SHAPE(4), OT_F32);
        ot_pool *pool = ot_pool_push();
        int tree_line = __LINE__ + 1;
        CHECK_INT(ot_program_assign(p, z, ot_take(x, idx, 0)), 0);
        ot_pool_pop(pool);
        CHECK_INT(ot_program_compile(p), 0);
        float hx[4] = {1, 2, 3, 4};
        int32_t bad[4] = {0, 1, 9, 0};
        int line = __LINE__ + 1;
        CHECK_INT(ot_program_run(p, 2, (ot_bind[]){OT_BIND_DATA("x", hx, sizeof hx), OT_BIND_DATA("idx", bad, sizeof bad)}), OT_EINVAL);
        snprintf(built, sizeof built, "step 0 (tree built at %s:%d): take: index 9", __FILE__, tree_line);
        CHECK_ERR(OT_EINVAL, TEST_SITE(at, line), "program_run", built);
        ot_program_free(p);
        ot_tensor_free(z);
        ot_backend_free(be);
    }
}

/* Order `order`'s program over i32 placeholder i: steps e * 2 into out[0]
 * and e + 3 into out[1], e = exp(i + 1) a value the two share (computed
 * once, in an assignment of its own before them), and an i32 sum that can
 * overflow into out[2], the sum at step 2 (order 0) or step 0 (order 1).
 * *sum_line: where the sum's tree was built. */
static ot_program *shared_then_failing(ot_backend *be, int order, ot_tensor *const out[3],
                                       int *sum_line)
{
    ot_program *p = ot_program_new(be);
    ot_tensor *i = ot_program_placeholder(p, "i", OT_SHAPE(4), OT_I32);
    ot_pool *pool = ot_pool_push();
    for (int k = 0; k < 3; k++) {
        if (k == (order ? 0 : 2)) {
            *sum_line = __LINE__ + 1;
            CHECK_INT(ot_program_assign(p, out[2], ot_sum(i)), 0);
        } else {
            ot_node *e = ot_exp(ot_add(i, 1));   /* kept apart: neither output holds it */
            ot_node *t = k == (order ? 1 : 0) ? ot_mul(e, 2) : ot_add(e, 3);
            CHECK_INT(ot_program_assign(p, out[k == 2 ? 0 : k], t), 0);
        }
    }
    ot_pool_pop(pool);
    CHECK_INT(ot_program_compile(p), 0);
    return p;
}

/* A run's error names the failing step as ot_program_explain numbers the
 * steps, where the program keeps a value shared between steps: the run
 * named the step by its place among the compiled assignments, which count
 * the shared value's own ("step 3" of steps 0 to 2). */
TEST(program_run_error_names_the_step_past_a_shared_value)
{
    for (int b = 0; b < 2; b++)
        for (int order = 0; order < 2; order++) {
            char at[128], built[160], text[4096] = "";
            ot_backend *be = backend(backends[b]);
            ot_tensor *out[3] = {ot_zeros(be, OT_SHAPE(4), OT_F64),
                                 ot_zeros(be, OT_SHAPE(4), OT_F64), ot_zeros(be, OT_SHAPE(), OT_I32)};
            int sum_line = 0, step = order ? 0 : 2;
            ot_program *p = shared_then_failing(be, order, out, &sum_line);
            FILE *f = fmemopen(text, sizeof text - 1, "w");
            CHECK(f && ot_program_explain(p, f) == 0);
            if (f) fclose(f);
            CHECK(strstr(text, "computed once, kept for later steps") != NULL);
            CHECK(strstr(text, "step 3") == NULL);
            int32_t big[4] = {INT32_MAX, 1, 0, 0};
            int line = __LINE__ + 1;
            CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA("i", big, sizeof big)), OT_EOVERFLOW);
            snprintf(built, sizeof built, "program_run: step %d (tree built at %s:%d)", step,
                     __FILE__, sum_line);
            CHECK_ERR(OT_EOVERFLOW, TEST_SITE(at, line), built);
            ot_program_free(p);
            for (int k = 0; k < 3; k++) ot_tensor_free(out[k]);
            ot_backend_free(be);
        }
}

TEST(program_errors_name_the_call_site)
{
    char at[128];
    ot_backend *be = backend("cpu");
    ot_program *p = ot_program_new(be);
    ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(2, 3), OT_F32);
    int line = __LINE__ + 1;
    CHECK(ot_program_placeholder(p, "x", OT_SHAPE(4), OT_F32) == NULL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(at, line), "program_placeholder", "named x exists");
    /* A tensor the call cannot make: its error named as the call's. */
    line = __LINE__ + 1;
    CHECK(ot_program_placeholder(p, "y", OT_SHAPE(2), (ot_dtype)99) == NULL);
    CHECK_ERR(OT_EDTYPE, TEST_SITE(at, line), "program_placeholder: zeros: unknown dtype 99");
    line = __LINE__ + 1;
    CHECK(ot_program_variable(p, "v", OT_SHAPE(INT64_MAX / 2, 4), OT_F32, OT_INIT_ZERO) == NULL);
    CHECK_ERR(OT_EOVERFLOW, TEST_SITE(at, line), "program_variable: zeros: tensor too big");
    line = __LINE__ + 1;
    CHECK(ot_program_variable(p, "v", OT_SHAPE(3), OT_I32, OT_INIT_UNIFORM(0, 10, 1)) == NULL);
    CHECK_ERR(OT_EDTYPE, TEST_SITE(at, line), "program_variable: a uniform initializer draws floats");
    ot_tensor *out = ot_zeros(be, OT_SHAPE(4), OT_F32);
    ot_pool *pool = ot_pool_push();
    int tree_line = __LINE__ + 1;
    ot_node *tree = ot_exp(x);
    CHECK_INT(ot_program_assign(p, out, tree), 0);
    ot_pool_pop(pool);
    line = __LINE__ + 1;
    CHECK_INT(ot_program_compile(p), OT_ESHAPE);
    char built[128];
    snprintf(built, sizeof built, "(tree built at %s:%d)", __FILE__, tree_line);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(at, line), "program_compile: step 0", built, "(2,3)", "(4,)");
    ot_program_free(p);

    p = ot_program_new(be);
    x = ot_program_placeholder(p, "x", OT_SHAPE(2, 3), OT_F32);
    ot_tensor *w = ot_program_variable(p, "w", OT_SHAPE(3), OT_F32, OT_INIT_ZERO);
    line = __LINE__ + 1;
    CHECK_INT(ot_program_sgd(p, &(ot_sgd){.lr = -1}, 1, &w, (ot_node *[]){ot_tensor_node(w)}, NULL), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(at, line), "program_sgd", "lr must be finite and >= 0, not -1");
    ot_program_free(p);

    p = ot_program_new(be);
    x = ot_program_placeholder(p, "x", OT_SHAPE(2, 3), OT_F32);
    ot_tensor *o3 = ot_zeros(be, OT_SHAPE(3), OT_F32);
    pool = ot_pool_push();
    CHECK_INT(ot_program_assign(p, o3, ot_sum(x, .axis = 0)), 0);
    ot_pool_pop(pool);
    CHECK_INT(ot_program_compile(p), 0);
    line = __LINE__ + 1;
    CHECK_INT(ot_program_assign(p, o3, ot_tensor_node(o3)), OT_ESTATE);
    CHECK_ERR(OT_ESTATE, TEST_SITE(at, line), "program_assign", "compiled");
    float h[8] = {0};
    line = __LINE__ + 1;
    CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA_SHAPE("x", h, OT_SHAPE(2, 4), sizeof h)), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(at, line), "program_run", "placeholder x", "(2,4)");
    line = __LINE__ + 1;
    CHECK_INT(ot_program_stats_get(p, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, TEST_SITE(at, line), "program_stats");
    line = __LINE__ + 1;
    CHECK_INT(ot_program_run(NULL, 0, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, TEST_SITE(at, line), "program_run", "program is NULL");
    ot_program_free(p);
    ot_tensor_free(o3);
    ot_tensor_free(out);

    /* ot_reshape and ot_slice, views of a tensor */
    ot_tensor *t = ot_zeros(be, OT_SHAPE(3, 4), OT_F32);
    line = __LINE__ + 1;
    CHECK(ot_reshape(t, OT_SHAPE(5, -1)) == NULL);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(at, line), "reshape", "size 12", "(5,-1)", "shape is (3,4)");
    line = __LINE__ + 1;
    CHECK(ot_reshape(t, OT_SHAPE(5, 3)) == NULL);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(at, line), "reshape", "(5,3)", "shape is (3,4)");
    line = __LINE__ + 1;
    CHECK(ot_slice(t, OT_ALL, OT_ALL, OT_IDX(0)) == NULL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(at, line), "slice", "too many indices", "(3,4)");
    line = __LINE__ + 1;
    CHECK(ot_slice(t, OT_IDX(7)) == NULL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(at, line), "slice", "index 7 is out of bounds", "(3,4)");
    ot_tensor_free(t);
    ot_backend_free(be);
}

/* A program's steps may not read another program's placeholder: that one's
 * binding belongs to its own runs, so the step would read idle memory
 * (zeros) and give a wrong answer without an error. */
TEST(program_refuses_another_programs_placeholder)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_program *p = ot_program_new(be), *q = ot_program_new(be);
    ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(4), OT_F32);
    ot_tensor *y = ot_program_placeholder(q, "y", OT_SHAPE(4), OT_F32);
    ot_tensor *o = ot_empty(be, OT_SHAPE(4), OT_F32);
    ot_tensor *v = ot_slice(x, OT_RANGE(0, 4));
    ot_pool *pool = ot_pool_push();
    CHECK_INT(ot_program_assign(q, o, ot_add(y, ot_exp(x))), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "program_assign", "reads a placeholder of another program");
    CHECK_INT(ot_program_assign(q, o, ot_mul(y, v)), OT_EINVAL);   /* a view of it too */
    CHECK_INT(ot_program_assign(q, o, ot_mul(y, 2.0)), 0);
    CHECK_INT(ot_program_assign(p, o, ot_mul(v, 2.0)), 0);   /* its own, through a view */
    ot_pool_pop(pool);
    ot_tensor_free(v);
    ot_tensor_free(o);
    ot_program_free(p);
    ot_program_free(q);
    ot_backend_free(be);
}

/* A symbolic placeholder through a layout by name follows a new size (a
 * transpose node, not a view); an explicit view of one cannot, and every
 * backend refuses it when the size changes (ref read the nominal zeros),
 * naming the call once. */
static void symbolic_views(const char *bn)
{
    ot_backend *be = ot_backend_new(bn, NULL);
    ot_program *p = ot_program_new(be), *q = ot_program_new(be);
    int s = ot_program_symbol(p, "n", 2), t = ot_program_symbol(q, "n", 2);
    ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(OT_SYM(s), 3), OT_F32);
    ot_tensor *y = ot_program_placeholder(q, "y", OT_SHAPE(OT_SYM(t)), OT_F32);
    CHECK_INT(ot_tensor_set_axes(x, "n,c"), 0);
    ot_tensor *v = ot_array(be, OT_SHAPE(3), OT_F32, (float[]){1, 10, 100});
    ot_tensor *o = ot_zeros(be, OT_SHAPE(3), OT_F32), *o2 = ot_zeros(be, OT_SHAPE(1), OT_F32);
    ot_tensor *ys = ot_slice(y, OT_RANGE(0, 1));
    CHECK_INT(ot_tensor_set_axes(v, "c"), 0);
    ot_pool *pool = ot_pool_push();
    CHECK_INT(ot_program_assign(p, o, ot_sum(ot_add(v, x), .axes = "n")), 0);
    CHECK_INT(ot_program_assign(q, o2, ot_mul(ys, 2.0)), 0);
    ot_pool_pop(pool);
    CHECK_INT(ot_program_compile(p), 0);
    CHECK_INT(ot_program_compile(q), 0);
    float d[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, r[3];
    CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA_SHAPE("x", d, OT_SHAPE(3, 3), sizeof d)), 0);
    CHECK_INT(ot_get(o, r), 0);
    CHECK(r[0] == 15 && r[1] == 45 && r[2] == 318);
    char site[256];
    int line = __LINE__ + 1;
    CHECK_INT(ot_program_run(q, 1, &OT_BIND_DATA_SHAPE("y", d, OT_SHAPE(3), 12)), OT_EUNSUPPORTED);
    CHECK_ERR(OT_EUNSUPPORTED, TEST_SITE(site, line), "program_run: step 0", "a tree reads a view");
    CHECK(strstr(ot_errmsg() + strlen(site), "program_run: program_run") == NULL);
    CHECK(strstr(ot_errmsg() + strlen(site), site) == NULL);   /* the place once */
    ot_tensor *all[] = {v, o, o2, ys};
    for (int i = 0; i < 4; i++) ot_tensor_free(all[i]);
    ot_program_free(p);
    ot_program_free(q);
    ot_backend_free(be);
}

TEST(program_symbolic_placeholder_views)
{
    symbolic_views("ref");
    symbolic_views("cpu");
}
