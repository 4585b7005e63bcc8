/*
 * conv_bn.c - the seeds' Conv+BN example for real: an inference batch norm
 * folded into the convolution before it by the library's rule set
 * "conv_bn", enabled by an environment variable as MXNet's subgraph
 * property is.
 *
 * MXNet's subgraph API tutorial (../shared/seeds/002_*.txt) replaces a
 * Convolution followed by a BatchNorm with one conv_bn node, step by step.
 * The same steps in optree (src/front/rules_conv_bn.c holds the rule, in
 * the public rewrite API of optree/extend.h):
 *   1. SgSelector::Select(n): start on a Convolution
 *        -> ot_rewrite_rule.select: ot_node_op(n) == OT_OP_CONV;
 *   2. SelectInput: false, no search on incoming edges
 *        -> .select_input = NULL;
 *   3. SelectOutput(n, new_node): take the BatchNorm along the outgoing
 *      edge, once
 *        -> .select_output: the next node of ot_batch_norm's inference
 *           tree (x - mean, * rsqrt(var + eps), * weight, + bias), and
 *           only that; the conv's bias add joins before it;
 *   4. Filter(candidates): no BatchNorm found, drop the Convolution too
 *        -> .filter: no normalising product in the match, no rewrite;
 *   5. SgProperty::CreateSubgraphNode: the node that runs the pair
 *        -> .create: one conv over folded weights W * scale, plus the
 *           folded bias (b - mean) * scale + beta, scale = gamma /
 *           sqrt(var + eps): subtrees over the same tensors, so the
 *           result follows their current values;
 *   6. MXNET_REGISTER_SUBGRAPH_PROPERTY(SgTest, SgProperty)
 *        -> the library registers "conv_bn" (ot_rule_set_register for a
 *           set of one's own);
 *   7. export MXNET_SUBGRAPH_BACKEND=SgTest
 *        -> OT_REWRITE=conv_bn (or ot_backend_opts.rewrite = "conv_bn").
 *
 * The network is relu(batch_norm(conv(x, W, pad 1) + b)) on a (2, 3, 8, 8)
 * f32 input, assigned through a backend with the rule set and one
 * without. ot_explain shows the rewrite; the two results agree within f32
 * rounding (the max abs difference printed). A conv not followed by a
 * batch norm, and one followed by a training-mode batch norm, are left as
 * they are (Filter). Exits non-zero if a check fails. Runs on the
 * reference backend; OT_BACKEND=cpu runs it on the fused one. Small
 * already: OT_EXAMPLE_SMALL changes nothing. Uses only include/optree.h
 * and frees what it creates.
 */
#define _POSIX_C_SOURCE 200809L
#include "optree.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { N = 2, CI = 3, CO = 4, H = 8, W = 8, K = 3 };

/* The network's tensors, on one backend. */
typedef struct net {
    ot_tensor *x, *w, *b;                  /* input, conv weights and bias */
    ot_tensor *mean, *var, *gamma, *beta;  /* the batch norm's, (CO,) each */
    ot_tensor *out;
} net;

static int failures;

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "FAILED: %s (%s)\n", what, ot_errmsg());
        failures++;
    }
}

/* n values in [lo, hi), the same sequence for every call with one seed. */
static void fill(float *v, int n, unsigned seed, float lo, float hi)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = lo + (hi - lo) * (float)(seed >> 8) / (float)(1u << 24);
    }
}

static net make_net(ot_backend *be)
{
    static float x[N * CI * H * W], w[CO * CI * K * K], p[5][CO];
    fill(x, N * CI * H * W, 1, -1, 1);
    fill(w, CO * CI * K * K, 2, -0.5f, 0.5f);
    for (int i = 0; i < 5; i++) fill(p[i], CO, 3 + (unsigned)i, i == 2 ? 0.5f : -1, 2);
    net t = {
        .x = ot_array(be, OT_SHAPE(N, CI, H, W), OT_F32, x),
        .w = ot_array(be, OT_SHAPE(CO, CI, K, K), OT_F32, w),
        .b = ot_array(be, OT_SHAPE(CO), OT_F32, p[0]),
        .mean = ot_array(be, OT_SHAPE(CO), OT_F32, p[1]),
        .var = ot_array(be, OT_SHAPE(CO), OT_F32, p[2]),   /* positive */
        .gamma = ot_array(be, OT_SHAPE(CO), OT_F32, p[3]),
        .beta = ot_array(be, OT_SHAPE(CO), OT_F32, p[4]),
        .out = ot_empty(be, OT_SHAPE(N, CO, H, W), OT_F32),
    };
    ot_tensor_set_name(t.x, "x");
    ot_tensor_set_name(t.w, "W");
    ot_tensor_set_name(t.b, "b");
    ot_tensor_set_name(t.mean, "mean");
    ot_tensor_set_name(t.var, "var");
    ot_tensor_set_name(t.gamma, "gamma");
    ot_tensor_set_name(t.beta, "beta");
    return t;
}

static void free_net(net *t)
{
    ot_tensor *all[] = {t->x, t->w, t->b, t->mean, t->var, t->gamma, t->beta, t->out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ot_tensor_free(all[i]);
}

/* conv(x, W, pad 1) + b: the convolution with its bias. */
static ot_node *conv(const net *t)
{
    return ot_add(ot_conv(t->x, t->w, .pad = 1), ot_reshape_node(t->b, OT_SHAPE(1, CO, 1, 1)));
}

/* relu(batch_norm(conv)), the batch norm in inference mode. */
static ot_node *network(const net *t)
{
    return ot_relu(ot_batch_norm(conv(t), .running_mean = t->mean, .running_var = t->var,
                                 .weight = t->gamma, .bias = t->beta));
}

/* Filter's two cases: a conv with no batch norm after it, and one whose
 * batch norm uses the batch's statistics (training), which depend on the
 * conv's output and cannot be folded into its weights. */
static void filtered(const net *t)
{
    ot_node *plain = ot_relu(conv(t));
    ot_node *upd[2];
    ot_node *train = ot_batch_norm(conv(t), .running_mean = t->mean, .running_var = t->var,
                                   .training = true, .updates = upd);
    check(ot_rewrite(plain, "conv_bn") == plain, "a conv alone is left as it is");
    check(ot_rewrite(train, "conv_bn") == train, "a training batch norm is left as it is");
    printf("Filter: a conv without a batch norm, and one before a training-mode batch norm, "
           "are left as they are\n");
}

int main(void)
{
    /* Step 7: the environment variable selects the rule set, as
     * MXNET_SUBGRAPH_BACKEND does; a backend made without it has none. */
    unsetenv("OT_REWRITE");
    ot_backend *plain_be = ot_backend_new(NULL, NULL);
    setenv("OT_REWRITE", "conv_bn", 1);
    ot_backend *fold_be = ot_backend_new(NULL, NULL);
    unsetenv("OT_REWRITE");
    if (!plain_be || !fold_be) {
        fprintf(stderr, "%s\n", ot_errmsg());
        return 1;
    }
    printf("OT_REWRITE=%s on the folding backend; none on the other\n",
           ot_backend_options(fold_be).rewrite);
    net a = make_net(plain_be), f = make_net(fold_be);
    ot_pool *pool = ot_pool_push();

    ot_node *ya = network(&a), *yf = network(&f);
    printf("\nthe network as written:\n  ");
    ot_pp(yf, stdout);
    printf("\nthe network as the rule set rewrites it (steps 1-5):\n  ");
    ot_pp(ot_rewrite(yf, "conv_bn"), stdout);
    printf("\n\nexplained on the folding backend:\n");
    check(ot_explain(yf, stdout) == 0, "ot_explain");

    check(ot_assign(a.out, ya) == 0, "the network as written");
    check(ot_assign(f.out, yf) == 0, "the network folded");
    static float va[N * CO * H * W], vf[N * CO * H * W];
    ot_get(a.out, va);
    ot_get(f.out, vf);
    double diff = 0, big = 0;
    for (int i = 0; i < N * CO * H * W; i++) {
        diff = fmax(diff, fabs((double)va[i] - vf[i]));
        big = fmax(big, fabs((double)va[i]));
    }
    printf("\nmax abs difference, folded against as written: %.3g (values up to %.3g)\n", diff,
           big);
    check(diff <= 1e-5 * fmax(1, big), "the folded network equals the one as written");

    filtered(&f);
    ot_pool_pop(pool);
    free_net(&a);
    free_net(&f);
    ot_backend_free(plain_be);
    ot_backend_free(fold_be);
    if (failures) return 1;
    printf("all checks passed\n");
    return 0;
}
