/*
 * test_plan_verify.c - the plan verifier (src/cpu/plan_verify.c) catches broken
 * plans: real plans pass it, and the same plans with one invariant broken
 * by hand (a buffer read before it is written, a temporary read or
 * accumulated into before any kernel writes it, or before a later kernel
 * writes part of it, an output BLAS writes written by another kernel too,
 * two live temporaries in the same arena bytes, a walk out of post-order)
 * are OT_EINTERNAL, never an abort. The verifier exists
 * only in builds with -DOT_VERIFY_PLANS (the sanitizer build of make test);
 * elsewhere these cases check nothing.
 */
#include "test.h"
#include "plan.h"

#ifdef OT_VERIFY_PLANS

/* The plan of tree into a fresh output (as ot_eval compiles it), on be. */
static ot_plan *plan_of(ot_backend *be, ot_node *tree, ot_walk **walk)
{
    ot_plan *p = NULL;
    ot_binding bind;
    CHECK_INT(ot__plan_get(be, 1, NULL, &tree, &p, walk, &bind), 0);
    return p;
}

static void expect_broken(const ot_plan *p, const char *what)
{
    ot_clear_error();
    CHECK_INT(ot__verify_plan(p, OT_VERIFY_LAID_OUT), OT_EINTERNAL);
    CHECK_ERR(OT_EINTERNAL, "plan verifier", what);
}

/* An unfused plan: every op its own kernel, each result a temporary. */
/* Frees what a case made: its plan and walk, its input, pool and backend. */
static void release(ot_plan *p, ot_walk *w, ot_tensor *x, ot_pool *pool, ot_backend *be)
{
    ot__plan_release(p);
    ot__walk_done(be, w);
    ot_tensor_free(x);
    ot_pool_pop(pool);
    ot_backend_free(be);
}

static ot_backend *unfused(void)
{
    return ot_backend_new("cpu", &(ot_backend_opts){.threads = 1, .fusion = OT_FUSION_OFF});
}

TEST(plan_verify_buffer_read_before_write)
{
    ot_pool *pool = ot_pool_push();
    ot_backend *be = unfused();
    ot_tensor *x = ot_ones(be, OT_SHAPE(4, 8), OT_F32);
    ot_walk *w;
    ot_plan *p = plan_of(be, ot_exp(x), &w);
    CHECK(p && p->nkernels >= 1);
    CHECK_INT(ot__verify_plan(p, OT_VERIFY_LAID_OUT), 0);
    ot_kernel *k = &p->kernels[0];
    CHECK(k->kind == OT_KER_EW && k->ninsn >= 2 && k->insns[0].code == OT_I_LOAD);
    ot_insn saved = k->insns[0];
    k->insns[0].code = OT_I_UNARY;   /* now reads its own, unwritten buffer */
    k->insns[0].a = k->insns[0].dst;
    expect_broken(p, "before it is written");
    k->insns[0] = saved;
    CHECK_INT(ot__verify_plan(p, OT_VERIFY_LAID_OUT), 0);
    release(p, w, x, pool, be);
}

TEST(plan_verify_temp_order_and_arena)
{
    ot_pool *pool = ot_pool_push();
    ot_backend *be = unfused();
    ot_tensor *x = ot_ones(be, OT_SHAPE(4, 8), OT_F32);
    ot_walk *w;
    ot_plan *p = plan_of(be, ot_mul(ot_add(ot_mul(x, 2.0), 1.0), ot_mul(x, 3.0)), &w);
    CHECK(p && p->nkernels >= 3);
    CHECK_INT(ot__verify_plan(p, OT_VERIFY_LAID_OUT), 0);
    /* A kernel multiplies two temporaries, both alive there. */
    ot_kernel *last = NULL;
    for (int i = 0; i < p->nkernels && !last; i++)
        if (p->kernels[i].nload == 2 && p->kernels[i].loads[0].space == OT_SPACE_TEMP &&
            p->kernels[i].loads[1].space == OT_SPACE_TEMP)
            last = &p->kernels[i];
    CHECK(last != NULL);
    if (!last) {
        release(p, w, x, pool, be);
        return;
    }
    int t = last->loads[0].index, u = last->loads[1].index;
    size_t saved = p->temp_offset[u];
    p->temp_offset[u] = p->temp_offset[t];
    expect_broken(p, "same arena bytes");
    p->temp_offset[u] = saved;
    /* The first kernel reading what only a later kernel writes. */
    ot_view first = p->kernels[0].loads[0];
    p->kernels[0].loads[0] = last->loads[0];
    expect_broken(p, "before any kernel writes it");
    p->kernels[0].loads[0] = first;
    CHECK_INT(ot__verify_plan(p, OT_VERIFY_LAID_OUT), 0);
    release(p, w, x, pool, be);
}

/* A running sum of dots: the first GEMM writes the temporary, the next
 * accumulate into it (beta 1). One that accumulates first is broken. */
TEST(plan_verify_accumulating_dot)
{
    ot_pool *pool = ot_pool_push();
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    ot_tensor *x = ot_ones(be, OT_SHAPE(8, 8), OT_F32);
    ot_walk *w;
    ot_node *sum = ot_add(ot_add(ot_dot(x, x), ot_dot(ot_T(x), x)), ot_dot(x, ot_T(x)));
    ot_plan *p = plan_of(be, ot_tanh(sum), &w);
    CHECK(p != NULL);
    CHECK_INT(ot__verify_plan(p, OT_VERIFY_LAID_OUT), 0);
    ot_kernel *first = NULL;
    for (int i = 0; p && i < p->nkernels && !first; i++)
        if (p->kernels[i].kind == OT_KER_DOT && p->kernels[i].store.space == OT_SPACE_TEMP)
            first = &p->kernels[i];
    CHECK(first != NULL && first->beta.param < 0 && first->beta.mul == 0);
    if (first) {
        ot_scale saved = first->beta;
        first->beta = (ot_scale){-1, 1};
        expect_broken(p, "accumulates into temporary");
        first->beta = saved;
        CHECK_INT(ot__verify_plan(p, OT_VERIFY_LAID_OUT), 0);
    }
    release(p, w, x, pool, be);
}

/* mean(concat(sgn(dot(a, b)), c)): the mean reads the concat whole, so it
 * runs after the kernel writing c's part. Run before it (the bsum move that
 * fuzz seed 11 tree 90853 found), it reads elements not yet written. */
TEST(plan_verify_late_writer)
{
    ot_pool *pool = ot_pool_push();
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    ot_tensor *x = ot_ones(be, OT_SHAPE(3, 4), OT_F64), *y = ot_ones(be, OT_SHAPE(4, 4), OT_F64);
    ot_tensor *c = ot_ones(be, OT_SHAPE(1, 4), OT_F32);
    ot_node *parts[2] = {ot_sgn(ot_dot(x, y)), ot_tensor_node(c)};
    ot_walk *w;
    ot_plan *p = plan_of(be, ot_mean(ot_concat(2, parts, 0)), &w);
    CHECK(p != NULL);
    CHECK_INT(ot__verify_plan(p, OT_VERIFY_LAID_OUT), 0);
    int red = -1, part = -1;
    for (int i = 0; p && i < p->nkernels; i++) {
        const ot_kernel *k = &p->kernels[i];
        if (k->kind == OT_KER_REDUCE) red = i;
        if (k->kind == OT_KER_EW && k->store.space == OT_SPACE_TEMP && k->store.offset > 0) part = i;
    }
    CHECK(red >= 0 && part >= 0 && part < red);
    if (red >= 0 && part >= 0 && part < red) {
        ot_kernel saved = p->kernels[part];
        p->kernels[part] = p->kernels[red];
        p->kernels[red] = saved;
        expect_broken(p, "writes part of it");
        p->kernels[red] = p->kernels[part];
        p->kernels[part] = saved;
        CHECK_INT(ot__verify_plan(p, OT_VERIFY_LAID_OUT), 0);
    }
    ot_tensor_free(c);
    ot_tensor_free(y);
    release(p, w, x, pool, be);
}

/* concat(batched_dot(a, b), c, axis=2) into an output: BLAS writes the
 * first columns of every batch's rows and another kernel c's column; they
 * are apart (fuzz seed 21 tree 3736 was refused for it). c's kernel writing
 * the dot's columns instead is not. */
/* A batched dot stored in its concat part of the output, the other part by
 * an elementwise kernel: apart, until a part is moved onto the dot's. With
 * m = 1 the dot's row stride is meaningless and the rows are the batches
 * (seed 72 tree 12232 of the ASan fuzz: the verifier failed a good plan).
 * On axis 1 the two parts interleave by rows, each a box of the output's
 * dims (fuzz seed 6161 tree 490: refused too). */
static void blas_output_case(int64_t m, int axis)
{
    ot_pool *pool = ot_pool_push();
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    ot_tensor *x = ot_ones(be, OT_SHAPE(2, m, 2), OT_F32);
    ot_tensor *y = ot_ones(be, OT_SHAPE(1, 2, 2), OT_F32);
    ot_tensor *c = ot_ones(be, axis == 2 ? OT_SHAPE(2, m, 1) : OT_SHAPE(2, 1, 2), OT_F32);
    ot_tensor *out = ot_empty(be, axis == 2 ? OT_SHAPE(2, m, 3) : OT_SHAPE(2, m + 1, 2), OT_F32);
    ot_node *parts[2] = {ot_batched_dot(x, y), ot_tensor_node(c)};
    ot_node *tree = ot_concat(2, parts, axis);
    ot_plan *p = NULL;
    ot_walk *w = NULL;
    ot_binding bind;
    CHECK_INT(ot__plan_get(be, 1, &out, &tree, &p, &w, &bind), 0);
    CHECK(p != NULL);
    if (p) CHECK_INT(ot__verify_plan(p, OT_VERIFY_LAID_OUT), 0);
    int dot = -1, part = -1;
    for (int i = 0; p && i < p->nkernels; i++) {
        const ot_kernel *k = &p->kernels[i];
        if (k->kind == OT_KER_DOT && k->store.space == OT_SPACE_OUT) dot = i;
        if (k->kind == OT_KER_EW && k->store.space == OT_SPACE_OUT) part = i;
    }
    CHECK(dot >= 0 && part >= 0);
    if (dot >= 0 && part >= 0) {
        int64_t saved = p->kernels[part].store.offset;
        p->kernels[part].store.offset = p->kernels[dot].store.offset;
        expect_broken(p, "written by BLAS");
        p->kernels[part].store.offset = saved;
        CHECK_INT(ot__verify_plan(p, OT_VERIFY_LAID_OUT), 0);
    }
    ot_tensor_free(c);
    ot_tensor_free(y);
    ot_tensor_free(out);
    release(p, w, x, pool, be);
}

TEST(plan_verify_blas_output)
{
    blas_output_case(2, 2);
    blas_output_case(1, 2);
    blas_output_case(2, 1);
    blas_output_case(1, 1);
}

TEST(plan_verify_walk_order)
{
    ot_pool *pool = ot_pool_push();
    ot_node *x = ot_const(2.0), *y = ot_neg(x);
    /* y's operand after y: not a post-order. */
    ent e[2] = {{OT_NODE_OP, OT_OP_NEG, OT_F32, 1, -1, -1, false, false, y},
                {OT_NODE_CONST, OT_OP_NONE, OT_F32, -1, -1, 0, false, false, x}};
    int root = 0;
    ot_walk w = {.e = e, .n = 2, .nparam = 1, .root = &root};
    ot_clear_error();
    CHECK_INT(ot__verify_walk(&w, 1), OT_EINTERNAL);
    CHECK_ERR(OT_EINTERNAL, "plan verifier", "not before it");
    e[0] = (ent){OT_NODE_CONST, OT_OP_NONE, OT_F32, -1, -1, 0, false, false, x};
    e[1] = (ent){OT_NODE_OP, OT_OP_NEG, OT_F32, 0, -1, -1, false, false, y};
    root = 1;
    CHECK_INT(ot__verify_walk(&w, 1), 0);
    ot_pool_pop(pool);
}

#else

TEST(plan_verify_not_built)
{
    /* Without -DOT_VERIFY_PLANS the verifier compiles to nothing. */
}

#endif
