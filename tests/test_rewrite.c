/*
 * test_rewrite.c - rewrite rules: the library's set "fuse" (each rewrite's
 * values against the tree as written, bitwise where the rewrite is exact),
 * ot_explain's firing lines, the option and OT_REWRITE, the plan key of the
 * rewritten trees, a rule set registered here (select_output, filter), and
 * bad registrations and bad replacements as errors.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "internal.h"
#include "../examples/cumsum_op.h"

#include <float.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

static ot_backend *backend(const char *name, const char *sets)
{
    ot_backend *be = ot_backend_new(name, &(ot_backend_opts){.rewrite = sets});
    CHECK(be != NULL);
    return be;
}

/* n f32 values spread over [-span, span], deterministic. */
static ot_tensor *spread(ot_backend *be, ot_shape s, double span)
{
    int64_t n = 1;
    for (int i = 0; i < s.ndim; i++) n *= s.dims[i];
    float *v = malloc((size_t)n * sizeof *v);
    uint32_t r = 12345;
    for (int64_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        v[i] = (float)(span * ((double)(r >> 8) / (1 << 24) * 2 - 1));
    }
    ot_tensor *t = ot_array(be, s, OT_F32, v);
    free(v);
    return t;
}

/* tree evaluated into a new host array of its numel floats. */
static float *values(ot_node *tree)
{
    ot_tensor *t = ot_eval(tree);
    CHECK(t != NULL);
    if (!t) return NULL;
    float *v = malloc((size_t)ot_tensor_numel(t) * sizeof *v);
    ot_get(t, v);
    ot_tensor_free(t);
    return v;
}

static bool same_bits(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* ot_explain's text without its "  compiled ... in ... ms" line, which
 * differs between two compiles of one plan. */
static char *explain(const ot_node *tree)
{
    char *s = test__capture(ot_explain, tree), *at = s ? strstr(s, "\n  compiled ") : NULL;
    if (at) memmove(at + 1, strchr(at + 1, '\n') + 1, strlen(strchr(at + 1, '\n') + 1) + 1);
    return s;
}

/* The text after the "rewrite:" lines. */
static const char *plan_part(const char *text)
{
    while (strncmp(text, "rewrite:", 8) == 0) text = strchr(text, '\n') + 1;
    return text;
}

TEST(rewrite_fuse_silu_spellings)
{
    ot_backend *off = backend("cpu", NULL), *on = backend("cpu", "fuse");
    ot_tensor *xf = spread(off, OT_SHAPE(1000), 30), *xn = spread(on, OT_SHAPE(1000), 30);
    ot_pool *pool = ot_pool_push();
    float *want = values(ot_mul(xf, ot_sig(xf)));
    /* sig(x) * x: x * sig(x) with its factors swapped, bitwise the same */
    float *swapped = values(ot_mul(ot_sig(xn), xn));
    CHECK(same_bits(swapped, want, 1000));
    /* x / (1 + exp(-x)): one rounding more or less, within 4 ulps */
    float *div = values(ot_div(xn, ot_add(1.0f, ot_exp(ot_neg(xn)))));
    float *div_off = values(ot_div(xf, ot_add(1.0f, ot_exp(ot_neg(xf)))));
    for (int i = 0; i < 1000; i++) {
        CHECK_NEAR(div[i], want[i], 4 * FLT_EPSILON);
        CHECK_NEAR(div_off[i], want[i], 4 * FLT_EPSILON);
    }
    /* the rewrite on ref gives ref's x * sig(x) */
    ot_backend *ref = backend("ref", "fuse");
    ot_tensor *xr = spread(ref, OT_SHAPE(1000), 30);
    float *r = values(ot_mul(ot_sig(xr), xr));
    for (int i = 0; i < 1000; i++) CHECK_NEAR(r[i], want[i], 4 * FLT_EPSILON);
    free(want), free(swapped), free(div), free(div_off), free(r);
    ot_pool_pop(pool);
    ot_tensor_free(xf), ot_tensor_free(xn), ot_tensor_free(xr);
    ot_backend_free(off), ot_backend_free(on), ot_backend_free(ref);
}

TEST(rewrite_fuse_logsoftmax_finite_where_log_softmax_is_not)
{
    ot_backend *off = backend("cpu", NULL), *on = backend("cpu", "fuse");
    ot_pool *pool = ot_pool_push();
    /* logits of +-1000: softmax underflows to 0 and its log is -inf */
    ot_tensor *bf = spread(off, OT_SHAPE(8, 16), 1000), *bn = spread(on, OT_SHAPE(8, 16), 1000);
    float *raw = values(ot_log(ot_softmax(bf, 1)));
    float *fused = values(ot_log(ot_softmax(bn, 1)));
    float *direct = values(ot_logsoftmax(bf, 1));
    CHECK(same_bits(fused, direct, 128));   /* the rewrite is logsoftmax itself */
    int neg_inf = 0;
    for (int i = 0; i < 128; i++) {
        neg_inf += isinf(raw[i]) && raw[i] < 0;
        CHECK(isfinite(fused[i]));
    }
    CHECK(neg_inf > 0);
    /* moderate logits: log(softmax) is finite and close */
    ot_tensor *mf = spread(off, OT_SHAPE(8, 16), 4), *mn = spread(on, OT_SHAPE(8, 16), 4);
    float *a = values(ot_log(ot_softmax(mf)));   /* every axis */
    float *b = values(ot_log(ot_softmax(mn)));
    for (int i = 0; i < 128; i++) CHECK_NEAR(b[i], a[i], 8 * FLT_EPSILON);
    free(raw), free(fused), free(direct), free(a), free(b);
    ot_pool_pop(pool);
    ot_tensor_free(bf), ot_tensor_free(bn), ot_tensor_free(mf), ot_tensor_free(mn);
    ot_backend_free(off), ot_backend_free(on);
}

TEST(rewrite_fuse_squared_l2_bitwise)
{
    ot_backend *off = backend("cpu", NULL), *on = backend("cpu", "fuse");
    ot_pool *pool = ot_pool_push();
    ot_tensor *xf = spread(off, OT_SHAPE(33, 70), 3), *xn = spread(on, OT_SHAPE(33, 70), 3);
    float *want = values(ot_sum(ot_mul(xf, xf), 1, true));
    float *got = values(ot_sum(ot_mul(xn, xn), 1, true));
    CHECK(same_bits(got, want, 33));
    float *all_w = values(ot_sum(ot_mul(xf, xf))), *all_g = values(ot_sum(ot_mul(xn, xn)));
    CHECK(same_bits(all_g, all_w, 1));
    ot_node *t = ot_rewrite(ot_sum(ot_mul(xn, xn), 1, true), "fuse");
    CHECK_INT(ot_node_tag(t), OT_OP_SQUARED_L2);
    CHECK_INT(ot_node_shape(t).ndim, 2);
    free(want), free(got), free(all_w), free(all_g);
    ot_pool_pop(pool);
    ot_tensor_free(xf), ot_tensor_free(xn);
    ot_backend_free(off), ot_backend_free(on);
}

TEST(rewrite_explain_names_rule_set_and_line)
{
    ot_backend *off = backend("cpu", NULL), *on = backend("cpu", "fuse");
    ot_tensor *x = ot_ones(on, OT_SHAPE(4, 8), OT_F32), *y = ot_ones(off, OT_SHAPE(4, 8), OT_F32);
    ot_pool *pool = ot_pool_push();
    char where[256];
    int line = __LINE__ + 1;
    ot_node *t = ot_log(ot_softmax(x, 1));
    snprintf(where, sizeof where, "rewrite: logsoftmax (set 'fuse') at %s:%d\n", __FILE__, line);
    char *on_text = explain(t), *off_text = explain(ot_log(ot_softmax(y, 1)));
    char *direct = explain(ot_logsoftmax(y, 1));
    CHECK(on_text && strstr(on_text, where) == on_text);
    /* the plan is the one of logsoftmax as written; off, the original's */
    CHECK_STR(plan_part(on_text), direct);
    CHECK(!strstr(off_text, "rewrite:"));
    CHECK(strcmp(off_text, direct) != 0);
    /* nothing to rewrite: the same plan as without the set */
    char *plain_on = explain(ot_add(x, x)), *plain_off = explain(ot_add(y, y));
    CHECK(strstr(plain_on, "rewrite: nothing fired (sets fuse)\n") == plain_on);
    CHECK_STR(plan_part(plain_on), plain_off);
    /* several firings in one tree, each at its own line */
    char *two = explain(ot_add(ot_sum(ot_mul(x, x)), ot_sum(ot_mul(ot_sig(x), x))));
    CHECK(strstr(two, "rewrite: silu (set 'fuse')") && strstr(two, "rewrite: squared_l2 (set 'fuse')"));
    free(on_text), free(off_text), free(direct), free(plain_on), free(plain_off), free(two);
    /* the ref backend explains its rewritten stack */
    ot_backend *ref = backend("ref", "fuse");
    ot_tensor *r = ot_ones(ref, OT_SHAPE(4, 8), OT_F32);
    char *rt = explain(ot_log(ot_softmax(r, 1)));
    CHECK(rt && strncmp(rt, "rewrite: logsoftmax (set 'fuse')", 32) == 0);
    free(rt);
    ot_pool_pop(pool);
    ot_tensor_free(x), ot_tensor_free(y), ot_tensor_free(r);
    ot_backend_free(off), ot_backend_free(on), ot_backend_free(ref);
}

/* The plan key is the rewritten tree's: log(softmax(x)) and logsoftmax(x)
 * share a plan, and the user's tree is left as it was. */
TEST(rewrite_plan_key_of_rewritten_tree)
{
    ot_backend *on = backend("cpu", "fuse");
    ot_tensor *x = spread(on, OT_SHAPE(4, 8), 2), *y = ot_empty(on, OT_SHAPE(4, 8), OT_F32);
    ot_pool *pool = ot_pool_push();
    ot_node *t = ot_log(ot_softmax(x, 1));
    char *before = test__capture(ot_pp, t);
    CHECK_INT(ot_assign(y, t), 0);
    ot_stats s0, s1;
    ot_stats(on, &s0);
    CHECK_INT(ot_assign(y, ot_logsoftmax(x, 1)), 0);
    ot_stats(on, &s1);
    CHECK_INT(s1.compiles, s0.compiles);
    CHECK_INT(s1.cache_hits, s0.cache_hits + 1);
    char *after = test__capture(ot_pp, t);
    CHECK_STR(after, before);
    CHECK_INT(ot_node_op(t), OT_OP_LOG);
    /* the same tree assigned again still runs rewritten */
    CHECK_INT(ot_assign(y, t), 0);
    CHECK_INT(ot_assign(y, t), 0);
    float v[32], w[32];
    ot_get(y, v);
    CHECK_INT(ot_assign(y, ot_logsoftmax(x, 1)), 0);
    ot_get(y, w);
    CHECK(same_bits(v, w, 32));
    free(before), free(after);
    ot_pool_pop(pool);
    ot_tensor_free(x), ot_tensor_free(y);
    ot_backend_free(on);
}

TEST(rewrite_option_and_environment)
{
    unsetenv("OT_REWRITE");
    ot_backend *be = backend("cpu", NULL);
    CHECK(ot_backend_options(be).rewrite == NULL);
    ot_backend_free(be);
    be = backend("ref", "");
    CHECK(ot_backend_options(be).rewrite == NULL);
    ot_backend_free(be);
    char list[8] = "fuse";
    be = backend("cpu", list);
    list[0] = 'x';   /* the backend keeps its own copy */
    CHECK_STR(ot_backend_options(be).rewrite, "fuse");
    ot_backend_free(be);
    CHECK(ot_backend_new("cpu", &(ot_backend_opts){.rewrite = "fuze"}) == NULL);
    CHECK_ERR(OT_EINVAL, "rewrite=fuze", "no rule set named \"fuze\"", "registered: fuse");
    CHECK(ot_backend_new("cpu", &(ot_backend_opts){.rewrite = "fuse,fuse"}) == NULL);
    CHECK_ERR(OT_EINVAL, "names \"fuse\" twice");
    CHECK(ot_backend_new("ref", &(ot_backend_opts){.rewrite = "fuse,"}) == NULL);
    CHECK_ERR(OT_EINVAL, "no rule set named \"\"");
    be = backend("cpu", " fuse ,\tconv_bn");   /* spaces around names, as axis lists */
    CHECK_STR(ot_backend_options(be).rewrite, " fuse ,\tconv_bn");
    ot_backend_free(be);
    CHECK(ot_backend_new("ref", &(ot_backend_opts){.rewrite = "fuse, "}) == NULL);
    CHECK_ERR(OT_EINVAL, "no rule set named \"\"");
    /* OT_REWRITE replaces the option; unset or empty is not set */
    setenv("OT_REWRITE", "fuse", 1);
    be = backend("cpu", NULL);
    CHECK_STR(ot_backend_options(be).rewrite, "fuse");
    ot_tensor *x = ot_ones(be, OT_SHAPE(3), OT_F32);
    ot_pool *pool = ot_pool_push();
    char *text = explain(ot_mul(ot_sig(x), x));
    CHECK(text && strncmp(text, "rewrite: silu (set 'fuse')", 26) == 0);
    free(text);
    ot_pool_pop(pool);
    ot_tensor_free(x);
    ot_backend_free(be);
    setenv("OT_REWRITE", "", 1);
    be = backend("cpu", "fuse");
    CHECK_STR(ot_backend_options(be).rewrite, "fuse");
    ot_backend_free(be);
    setenv("OT_REWRITE", "nope", 1);
    CHECK(ot_backend_new("cpu", &(ot_backend_opts){.rewrite = "fuse"}) == NULL);
    CHECK_ERR(OT_EINVAL, "OT_REWRITE=nope", "no rule set named \"nope\"");
    unsetenv("OT_REWRITE");
}

/* ---- a rule set of the test's own ------------------------------------------ */

/* neg(neg(x)) -> x: the seed is the inner neg, grown to its reader by
 * select_output; filter keeps pairs only. */
static int filtered;
static bool inner_neg(const ot_node *n, void *user)
{
    (void)user;
    return ot_node_op(n) == OT_OP_NEG;
}
static bool outer_neg(const ot_node *n, const ot_node *out, void *user)
{
    (void)n, (void)user;
    return ot_node_op(out) == OT_OP_NEG;
}
static bool pair(int nnodes, const ot_node *const nodes[], void *user)
{
    (void)nodes;
    filtered += *(int *)user;
    return nnodes == 2;
}
static ot_node *unneg(const ot_rewrite_match *m, void *user)
{
    (void)user;
    CHECK_INT(m->ninputs, 1);
    CHECK_STR(m->set, "test_negneg");
    CHECK(ot_rewrite_input(m, ot_node_child(m->nodes[0], 0)) == m->inputs[0]);
    CHECK(ot_rewrite_input(m, m->nodes[1]) == NULL);
    return m->inputs[0];
}
static int one = 1;

static void register_negneg(void)
{
    static const ot_rewrite_rule rules[] = {{.name = "negneg", .select = inner_neg,
                                             .select_output = outer_neg, .filter = pair,
                                             .create = unneg, .user = &one}};
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"test_negneg", 1, rules}), 0);
}

TEST(rewrite_custom_rule_set_fires)
{
    register_negneg();
    ot_backend *be = backend("cpu", "test_negneg,fuse");
    CHECK_STR(ot_backend_options(be).rewrite, "test_negneg,fuse");
    ot_tensor *x = spread(be, OT_SHAPE(16), 5);
    ot_pool *pool = ot_pool_push();
    float want[16];
    ot_get(x, want);
    /* neg(neg(x)) is x; a third neg stays (the pair below it goes) */
    float *got = values(ot_neg(ot_neg(x)));
    CHECK(same_bits(got, want, 16));
    free(got);
    got = values(ot_neg(ot_neg(ot_neg(x))));
    for (int i = 0; i < 16; i++) CHECK(got[i] == -want[i]);
    free(got);
    CHECK(filtered >= 2);
    char *text = explain(ot_neg(ot_neg(x)));
    CHECK(text && strstr(text, "rewrite: negneg (set 'test_negneg') at"));
    free(text);
    /* ot_rewrite: nothing to do gives the tree itself */
    ot_node *plain = ot_add(x, x);
    CHECK(ot_rewrite(plain, "test_negneg,fuse") == plain);
    CHECK(ot_rewrite(plain, NULL) == plain);
    ot_node *r = ot_rewrite(ot_neg(ot_neg(x)), "test_negneg");
    CHECK(r == ot_tensor_node(x));
    ot_pool_pop(pool);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* README's rule, grown through select_input: the outer neg's operand is in
 * a match already, so without the filter the outer neg alone was a match
 * over --x (rewritten to x) and README's create turned ---x into x. */
static bool readme_sel(const ot_node *n, void *u)
{
    (void)u;
    return ot_node_op(n) == OT_OP_NEG && ot_node_op(ot_node_child(n, 0)) == OT_OP_NEG;
}
static bool readme_sel_in(const ot_node *n, const ot_node *in, void *u)
{
    (void)u;
    return in == ot_node_child(n, 0);
}
static bool readme_pair(int nn, const ot_node *const nodes[], void *u)
{
    (void)nodes, (void)u;
    return nn == 2;
}
static ot_node *readme_make(const ot_rewrite_match *m, void *u)
{
    (void)u;
    return m->inputs[0];
}

TEST(rewrite_readme_negneg_on_odd_chains)
{
    static const ot_rewrite_rule rules[] = {{.name = "negneg", .select = readme_sel,
                                             .select_input = readme_sel_in,
                                             .filter = readme_pair, .create = readme_make}};
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"test_readme_negneg", 1, rules}), 0);
    ot_backend *be = backend("cpu", "test_readme_negneg");
    ot_tensor *x = spread(be, OT_SHAPE(16), 5);
    ot_pool *pool = ot_pool_push();
    float want[16];
    ot_get(x, want);
    ot_node *t = ot_tensor_node(x);
    for (int k = 1; k <= 5; k++) {
        t = ot_neg(t);
        float *got = values(t);
        for (int i = 0; i < 16; i++) CHECK(got[i] == (k % 2 ? -want[i] : want[i]));
        free(got);
    }
    ot_pool_pop(pool);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* A rule whose growth reaches two readers has two roots: dropped. */
static bool any_output(const ot_node *n, const ot_node *out, void *user)
{
    (void)n, (void)user;
    return ot_node_op(out) != OT_OP_ADD;
}
static ot_node *never(const ot_rewrite_match *m, void *user)
{
    (void)m, (void)user;
    CHECK(false);
    return NULL;
}

TEST(rewrite_match_with_two_roots_is_dropped)
{
    static const ot_rewrite_rule rules[] = {
        {.name = "greedy", .select = inner_neg, .select_output = any_output, .create = never}};
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"test_greedy", 1, rules}), 0);
    ot_backend *be = backend("ref", "test_greedy");
    ot_tensor *x = ot_ones(be, OT_SHAPE(2), OT_F32);
    ot_pool *pool = ot_pool_push();
    ot_node *n = ot_neg(x);
    ot_tensor *y = ot_eval(ot_add(ot_exp(n), ot_sin(n)));   /* neg has two readers */
    CHECK(y != NULL);
    ot_pool_pop(pool);
    ot_tensor_free(x), ot_tensor_free(y);
    ot_backend_free(be);
}

/* ---- bad registrations and bad replacements --------------------------------- */

static bool yes(const ot_node *n, void *user)
{
    (void)n, (void)user;
    return ot_node_op(n) == OT_OP_EXP;
}
static ot_node *give_null(const ot_rewrite_match *m, void *user)
{
    (void)m, (void)user;
    return NULL;
}
static ot_node *give_shape(const ot_rewrite_match *m, void *user)
{
    (void)user;
    return ot_sum(m->inputs[0]);
}
static ot_node *give_dtype(const ot_rewrite_match *m, void *user)
{
    (void)user;
    return ot_cast(m->inputs[0], OT_F64);
}

TEST(rewrite_bad_registrations)
{
    ot_rewrite_rule good = {.name = "r", .select = yes, .create = give_null};
    CHECK_INT(ot_rule_set_register(NULL), OT_ENULL);
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){NULL, 1, &good}), OT_ENULL);
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"", 1, &good}), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "is empty");
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"a,b", 1, &good}), OT_EINVAL);
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"a b", 1, &good}), OT_EINVAL);
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"t_none", 0, &good}), OT_EINVAL);
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"t_none", 1, NULL}), OT_ENULL);
    ot_rewrite_rule bad = good;
    bad.select = NULL;
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"t_bad", 1, &bad}), OT_ENULL);
    CHECK_ERR(OT_ENULL, "t_bad", "has no select");
    bad = good;
    bad.create = NULL;
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"t_bad", 1, &bad}), OT_ENULL);
    CHECK_ERR(OT_ENULL, "has no create");
    bad = good;
    bad.name = NULL;
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"t_bad", 1, &bad}), OT_ENULL);
    /* none of those was registered; duplicates are refused */
    CHECK(ot_backend_new("ref", &(ot_backend_opts){.rewrite = "t_bad"}) == NULL);
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"fuse", 1, &good}), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "\"fuse\" is registered already");
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"t_once", 1, &good}), 0);
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"t_once", 1, &good}), OT_EINVAL);
    ot_clear_error();
    /* helpers on NULL */
    CHECK(ot_rewrite_operand(NULL, 0) == NULL);
    CHECK(ot_rewrite_input(NULL, NULL) == NULL);
    CHECK(ot_rewrite(NULL, "fuse") == NULL);
    CHECK_ERR(OT_ENULL, "tree is NULL");
}

TEST(rewrite_bad_replacements_are_errors)
{
    static const ot_rewrite_rule null_rule[] = {{.name = "nul", .select = yes, .create = give_null}};
    static const ot_rewrite_rule shape_rule[] = {{.name = "shp", .select = yes, .create = give_shape}};
    static const ot_rewrite_rule dtype_rule[] = {{.name = "dt", .select = yes, .create = give_dtype}};
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"t_null", 1, null_rule}), 0);
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"t_shape", 1, shape_rule}), 0);
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"t_dtype", 1, dtype_rule}), 0);
    const char *sets[] = {"t_null", "t_shape", "t_dtype"};
    const int codes[] = {OT_EINVAL, OT_ESHAPE, OT_EDTYPE};
    const char *says[] = {"built no replacement", "by a () float32 tree", "(4,) float64 tree"};
    for (int k = 0; k < 3; k++) {
        for (int b = 0; b < 2; b++) {
            ot_backend *be = backend(b ? "ref" : "cpu", sets[k]);
            ot_tensor *x = ot_zeros(be, OT_SHAPE(4), OT_F32), *y = ot_full(be, OT_SHAPE(4), OT_F32, 7);
            ot_pool *pool = ot_pool_push();
            char line[32];
            snprintf(line, sizeof line, ":%d:", __LINE__ + 1);
            ot_node *t = ot_exp(x);
            CHECK_INT(ot_assign(y, t), codes[k]);
            CHECK_ERR(codes[k], sets[k], says[k], line);
            float v[4];
            ot_get(y, v);
            CHECK(v[0] == 7 && v[3] == 7);   /* nothing written */
            free(explain(t));
            CHECK_INT(ot_errcode(), codes[k]);
            ot_clear_error();
            CHECK(ot_rewrite(t, sets[k]) == NULL);
            CHECK_INT(ot_errcode(), codes[k]);
            /* in a sequence: the step whose rewrite failed is named */
            ot_node *t0 = ot_neg(x);
            CHECK_INT(ot_sequential(2, (ot_step[]){{1, &y, &t0}, {1, &x, &t}}), codes[k]);
            CHECK_ERR(codes[k], "sequential: step 1: ", says[k]);
            /* in a program: its compile fails, on every backend */
            ot_program *prog = ot_program_new(be);
            CHECK_INT(ot_program_assign(prog, y, t), 0);
            CHECK_INT(ot_program_compile(prog), codes[k]);
            CHECK_ERR(codes[k], "program_compile: step 0", says[k]);
            ot_program_free(prog);
            ot_pool_pop(pool);
            ot_tensor_free(x), ot_tensor_free(y);
            ot_backend_free(be);
        }
    }
}

/* ---- creates that rewrite ------------------------------------------------- */

static bool is_exp(const ot_node *n, void *user)
{
    (void)user;
    return ot_node_op(n) == OT_OP_EXP;
}

/* exp(x) -> whatever rewriting exp(x) by the set named user gives: it fires
 * again inside, without end. */
static ot_node *rewrite_again(const ot_rewrite_match *m, void *user)
{
    return ot_rewrite(ot_exp(m->inputs[0]), user);
}

/* The same, but it drops the inner failure and the error with it. */
static ot_node *rewrite_again_quietly(const ot_rewrite_match *m, void *user)
{
    ot_node *r = ot_rewrite(ot_exp(m->inputs[0]), user);
    ot_clear_error();
    return r ? r : ot_exp(m->inputs[0]);
}

/* The same through an assignment by a backend that applies the rule. */
typedef struct assigner {
    ot_tensor *scratch;
} assigner;
static ot_node *assign_again(const ot_rewrite_match *m, void *user)
{
    const assigner *a = user;
    return ot_assign(a->scratch, ot_exp(m->inputs[0])) == 0 ? ot_exp(m->inputs[0]) : NULL;
}

/* exp(x) -> exp(x) with x rewritten by "fuse": one level of nesting. */
static ot_node *fuse_inside(const ot_rewrite_match *m, void *user)
{
    (void)user;
    return ot_exp(ot_rewrite(m->inputs[0], "fuse"));
}

/* A create that rewrites a tree its rule fires on again recursed until the
 * stack overflowed: creates nest at most 16 deep, then OT_ESTATE names the
 * rule, through ot_rewrite and through an assignment, even when a create
 * swallows the error on its way out. One level of nesting is fine. */
TEST(rewrite_create_that_rewrites_is_bounded)
{
    static assigner scratch;
    static const ot_rewrite_rule again[] = {
        {.name = "again", .select = is_exp, .create = rewrite_again, .user = "t_again"}};
    static const ot_rewrite_rule quiet[] = {
        {.name = "quiet", .select = is_exp, .create = rewrite_again_quietly, .user = "t_quiet"}};
    static const ot_rewrite_rule by_assign[] = {
        {.name = "by_assign", .select = is_exp, .create = assign_again, .user = &scratch}};
    static const ot_rewrite_rule nested_ok[] = {
        {.name = "nested_ok", .select = is_exp, .create = fuse_inside}};
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"t_again", 1, again}), 0);
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"t_quiet", 1, quiet}), 0);
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"t_assign", 1, by_assign}), 0);
    CHECK_INT(ot_rule_set_register(&(ot_rule_set){"t_nested_ok", 1, nested_ok}), 0);
    ot_backend *be = backend("cpu", "t_assign");
    ot_tensor *x = spread(be, OT_SHAPE(8), 2), *y = ot_full(be, OT_SHAPE(8), OT_F32, 7);
    ot_tensor_set_name(x, "x");
    scratch.scratch = ot_empty(be, OT_SHAPE(8), OT_F32);
    ot_pool *pool = ot_pool_push();
    for (int k = 0; k < 2; k++) {
        const char *set = k ? "t_quiet" : "t_again";
        ot_clear_error();
        CHECK(ot_rewrite(ot_exp(x), set) == NULL);
        CHECK_ERR(OT_ESTATE, k ? "rule \"quiet\" (set \"t_quiet\")" : "rule \"again\" (set \"t_again\")",
                  "inside 16 nested creates", "test_rewrite.c:");
        CHECK(ot_rewrite(ot_neg(x), set) != NULL);   /* the bound resets */
    }
    CHECK_INT(ot_assign(y, ot_exp(x)), OT_ESTATE);
    CHECK_ERR(OT_ESTATE, "rule \"by_assign\" (set \"t_assign\")", "inside 16 nested creates");
    float v[8];
    ot_get(y, v);
    CHECK(v[0] == 7 && v[7] == 7);   /* nothing written */
    ot_node *t = ot_rewrite(ot_exp(ot_mul(ot_sig(x), x)), "t_nested_ok");
    CHECK(t != NULL);
    char *text = t ? test__capture(ot_pp, t) : NULL;
    CHECK(text && strstr(text, "(exp (x * (sig x)))"));   /* silu's form, from "fuse" */
    free(text);
    ot_pool_pop(pool);
    ot_tensor_free(x), ot_tensor_free(y), ot_tensor_free(scratch.scratch);
    ot_backend_free(be);
}

/* ---- shapes of trees --------------------------------------------------------- */

TEST(rewrite_many_roots_and_deep_trees)
{
    ot_backend *off = backend("cpu", NULL), *on = backend("cpu", "fuse");
    ot_tensor *xf = spread(off, OT_SHAPE(64), 3), *xn = spread(on, OT_SHAPE(64), 3);
    ot_tensor *o[2][2];
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 2; k++) o[b][k] = ot_empty(b ? on : off, OT_SHAPE(64), OT_F32);
    ot_pool *pool = ot_pool_push();
    /* two roots sharing sig(x) * x, which is rewritten once for both */
    for (int b = 0; b < 2; b++) {
        ot_tensor *x = b ? xn : xf;
        ot_node *s = ot_mul(ot_sig(x), x);
        ot_node *trees[2] = {ot_add(s, 1.0f), ot_mul(s, s)};
        CHECK_INT(ot_assign_many(2, o[b], trees), 0);
    }
    for (int k = 0; k < 2; k++) {
        float a[64], c[64];
        ot_get(o[0][k], a);
        ot_get(o[1][k], c);
        CHECK(same_bits(a, c, 64));
    }
    /* TEST_HEIGHT adds over a rewritten leaf: no recursion */
    ot_node *t = ot_mul(ot_sig(xn), xn);
    for (int i = 0; i < TEST_HEIGHT; i++) t = ot_add(t, 0.0f);
    ot_node *r = ot_rewrite(t, "fuse");
    CHECK(r != NULL && r != t);
    CHECK_INT(ot_assign(o[1][0], t), 0);
    ot_pool_pop(pool);
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 2; k++) ot_tensor_free(o[b][k]);
    ot_tensor_free(xf), ot_tensor_free(xn);
    ot_backend_free(off), ot_backend_free(on);
}

/* Every allocation of a rewriting assignment failed in turn: OT_ENOMEM with
 * the output untouched, or the right values; never a crash or a leak. */
TEST(rewrite_out_of_memory)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = backend(b ? "ref" : "cpu", "fuse");
        ot_tensor *x = spread(be, OT_SHAPE(4, 8), 3), *y = ot_empty(be, OT_SHAPE(4, 8), OT_F32);
        ot_pool *pool = ot_pool_push();
        ot_node *t = ot_add(ot_add(ot_log(ot_softmax(x, 1)), ot_sum(ot_mul(x, x), 1, true)),
                            ot_mul(ot_sig(x), x));
        CHECK_INT(ot_assign(y, t), 0);
        float want[32], got[32];
        ot_get(y, want);
        int ok = 0;
        for (long n = 1; n < 400 && ok < 20; n++) {
            ot_fill(y, 7);
            ot__alloc_fail_at(n);
            int rc = ot_assign(y, t);
            ot__alloc_fail_at(0);
            ot_get(y, got);
            if (rc == 0) {
                ok++;
                CHECK(same_bits(got, want, 32));
            } else {
                CHECK_INT(rc, OT_ENOMEM);
                CHECK(got[0] == 7 && got[31] == 7);
            }
        }
        CHECK_INT(ot_assign(y, t), 0);
        ot_pool_pop(pool);
        ot_tensor_free(x), ot_tensor_free(y);
        ot_backend_free(be);
    }
}

/* Backends with rule sets shared by threads that assign, while others
 * register sets and make backends (the tsan phase runs this). */
typedef struct worker {
    ot_backend *be;
    int id, rc;
} worker;

static void *thread_main(void *arg)
{
    worker *w = arg;
    char name[32];
    snprintf(name, sizeof name, "thread_set_%d", w->id);
    static const ot_rewrite_rule rules[] = {{.name = "negneg", .select = inner_neg,
                                             .select_output = outer_neg, .create = unneg}};
    w->rc = ot_rule_set_register(&(ot_rule_set){name, 1, rules});
    ot_backend *own = ot_backend_new("ref", &(ot_backend_opts){.rewrite = name});
    w->rc = w->rc || !own;
    ot_tensor *x = ot_full(w->be, OT_SHAPE(8, 4), OT_F32, 0.25), *y = ot_empty(w->be, OT_SHAPE(8, 4), OT_F32);
    for (int i = 0; i < 50 && !w->rc; i++) {
        ot_pool *pool = ot_pool_push();
        w->rc = ot_assign(y, ot_add(ot_log(ot_softmax(x, 1)), ot_sum(ot_mul(x, x), 1, true)));
        ot_pool_pop(pool);
    }
    float v[32];
    ot_get(y, v);
    w->rc = w->rc || fabsf(v[0] - (logf(0.25f) + 0.25f)) > 1e-6f;
    ot_tensor_free(x), ot_tensor_free(y);
    ot_backend_free(own);
    ot_pool_drain();
    return NULL;
}

TEST(rewrite_threads_share_backends_and_registry)
{
    enum { NTH = 4 };
    ot_backend *be[2] = {backend("cpu", "fuse"), backend("ref", "fuse")};
    pthread_t th[NTH];
    worker wk[NTH];
    for (int t = 0; t < NTH; t++) {
        wk[t] = (worker){be[t % 2], t, 0};
        CHECK_INT(pthread_create(&th[t], NULL, thread_main, &wk[t]), 0);
    }
    for (int t = 0; t < NTH; t++) {
        pthread_join(th[t], NULL);
        CHECK_INT(wk[t].rc, 0);
    }
    ot_backend_free(be[0]), ot_backend_free(be[1]);
}

/* A node rebuilt above a firing is the same op: a registered op there (its
 * node holds a placeholder row) failed the assignment; it keeps its name;
 * and the division's silu spelling leaves int32 trees alone (-x wraps). */
TEST(rewrite_rebuilds_registered_ops_and_names)
{
    ot_op cs = OT_OP_NONE, rcs = OT_OP_NONE;
    CHECK(cumsum_register(&cs, &rcs));
    ot_backend *be = backend("cpu", "fuse"), *plain = backend("cpu", NULL);
    float xv[4] = {-1, 0, 1, 2};
    ot_tensor *x = ot_array(be, OT_SHAPE(4), OT_F32, xv), *out = ot_zeros(be, OT_SHAPE(4), OT_F32);
    ot_tensor *xp = ot_array(plain, OT_SHAPE(4), OT_F32, xv);
    ot_tensor *want = ot_zeros(plain, OT_SHAPE(4), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_node *c = ot_apply_struct(cs, 1, (ot_node *[]){ot_mul(ot_sig(x), x)}, &(ot_args){.axis = 0});
    CHECK_INT(ot_assign(out, c), 0);
    CHECK_INT(ot_assign(want, ot_apply_struct(cs, 1, (ot_node *[]){ot_mul(ot_sig(xp), xp)},
                                              &(ot_args){.axis = 0})), 0);
    float a[4], b[4];
    CHECK_INT(ot_get(out, a), 0);
    CHECK_INT(ot_get(want, b), 0);
    for (int i = 0; i < 4; i++) CHECK_NEAR(a[i], b[i], 1e-6);
    ot_node *u = ot_neg(ot_mul(ot_sig(x), x));
    CHECK_INT(ot_node_set_name(u, "h1"), 0);
    ot_node *r = ot_rewrite(u, "fuse");
    CHECK(r && r != u && ot_node_name(r) && strcmp(ot_node_name(r), "h1") == 0);
    ot_tensor *xi = ot_array(be, OT_SHAPE(2), OT_I32, (int32_t[]){INT32_MIN, -3});
    ot_node *si = ot_div(xi, ot_add(1.0, ot_exp(ot_neg(xi))));
    CHECK(ot_rewrite(si, "fuse") == si);   /* nothing fired */
    ot_pool_pop(p);
    ot_tensor *all[] = {x, out, xp, want, xi};
    for (int i = 0; i < 5; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
    ot_backend_free(plain);
}
