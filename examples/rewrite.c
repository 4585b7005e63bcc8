/*
 * rewrite.c - rewrite rules: a rule set of one's own next to the library's
 * "fuse", applied by the backend before it plans a tree.
 *
 * The rule set "clamp" recognises a hand-written clamp, minimum(maximum(x,
 * lo), hi) with constant bounds lo <= hi, and replaces it with ot_clip(x,
 * lo, hi): the same values, but a composite that autodiff knows (its
 * gradient passes on the closed interval [lo, hi]). Its selector is MXNet's
 * SubgraphSelector in C: select starts a match at the minimum, select_input
 * takes in the maximum below it, filter checks the bounds, and create
 * builds the replacement over the match's input.
 *
 * The backend gets both sets in its options (.rewrite = "fuse,clamp";
 * OT_REWRITE=fuse,clamp would do the same for any program). ot_explain
 * then names every rule that fired and the line of the tree it rewrote.
 * "fuse" turns log(softmax(x)) into logsoftmax(x): with logits of +-200 the
 * tree as written gives -inf, the rewritten one finite values.
 *
 * Exits non-zero if a check fails. Runs on the reference backend;
 * OT_BACKEND=cpu runs it on the fused one. Small already: OT_EXAMPLE_SMALL
 * changes nothing. Uses only include/optree.h and frees what it creates.
 */
#include "optree.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- the rule set */

static bool is_const(const ot_node *n) { return ot_node_kind(n) == OT_NODE_CONST; }

/* minimum(maximum(x, lo), hi), both bounds constants. */
static bool clamp_select(const ot_node *n, void *user)
{
    (void)user;
    const ot_node *inner = ot_node_child(n, 0);
    return ot_node_op(n) == OT_OP_MINIMUM && ot_node_tag(n) == OT_OP_NONE &&
           is_const(ot_node_child(n, 1)) && ot_node_op(inner) == OT_OP_MAXIMUM &&
           ot_node_tag(inner) == OT_OP_NONE && is_const(ot_node_child(inner, 1));
}

/* The minimum takes in its maximum; the maximum takes in nothing (x is the
 * match's input). */
static bool clamp_input(const ot_node *n, const ot_node *input, void *user)
{
    (void)user;
    return ot_node_op(n) == OT_OP_MINIMUM && input == ot_node_child(n, 0);
}

/* nodes[0] is the maximum, nodes[1] the minimum (operands first). */
static bool clamp_filter(int nnodes, const ot_node *const nodes[], void *user)
{
    (void)user;
    return nnodes == 2 &&
           ot_node_value(ot_node_child(nodes[0], 1)) <= ot_node_value(ot_node_child(nodes[1], 1));
}

static ot_node *clamp_create(const ot_rewrite_match *m, void *user)
{
    (void)user;
    const ot_node *max = m->nodes[0], *min = m->nodes[1];
    ot_node *x = ot_rewrite_input(m, ot_node_child(max, 0));
    ot_args a = {.axis = OT_AXIS_ALL,
                 .lo = ot_node_value(ot_node_child(max, 1)),
                 .hi = ot_node_value(ot_node_child(min, 1))};
    return ot_build_at(OT_OP_CLIP, x, NULL, &a, ot_node_file(min), ot_node_line(min));
}

static const ot_rewrite_rule clamp_rules[] = {{
    .name = "clamp",
    .select = clamp_select,
    .select_input = clamp_input,
    .filter = clamp_filter,
    .create = clamp_create,
}};

/* ------------------------------------------------------------------ the run */

static int failures;

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "FAILED: %s\n", what);
        failures++;
    }
}

static void values(ot_node *tree, float *host)
{
    ot_tensor *t = ot_eval(tree);
    if (!t) {
        fprintf(stderr, "%s\n", ot_errmsg());
        failures++;
        return;
    }
    ot_get(t, host);
    ot_tensor_free(t);
}

int main(void)
{
    if (ot_rule_set_register(&(ot_rule_set){"clamp", 1, clamp_rules}) != 0) {
        fprintf(stderr, "%s\n", ot_errmsg());
        return 1;
    }
    ot_backend *on = ot_backend_new(NULL, &(ot_backend_opts){.rewrite = "fuse,clamp"});
    ot_backend *off = ot_backend_new(NULL, NULL);
    if (!on || !off) {
        fprintf(stderr, "%s\n", ot_errmsg());
        return 1;
    }
    printf("rule sets in force: %s\n", ot_backend_options(on).rewrite);

    enum { B = 2, K = 5 };
    float logits[B * K] = {200, -200, 10, 0, -50, -3, 1, 2, 180, -180};
    ot_tensor *x = ot_array(on, OT_SHAPE(B, K), OT_F32, logits);
    ot_tensor *x_off = ot_array(off, OT_SHAPE(B, K), OT_F32, logits);
    ot_tensor_set_name(x, "x");
    ot_pool *pool = ot_pool_push();

    /* a hand-written clamp and silu, and a log of a softmax */
    ot_node *act = ot_minimum(ot_maximum(ot_mul(ot_sig(x), x), 0.0), 6.0);
    ot_node *logp = ot_log(ot_softmax(x, 1));
    printf("\nthe clamped silu, explained:\n");
    ot_explain(act, stdout);
    printf("\nlog(softmax(x, 1)), explained:\n");
    ot_explain(logp, stdout);
    printf("\nthe clamp as the rule set rewrites it: ");
    ot_pp(ot_rewrite(act, "clamp"), stdout);
    printf("\n");

    float got[B * K], want[B * K], raw[B * K];
    values(act, got);
    values(ot_clip(ot_mul(x_off, ot_sig(x_off)), 0.0, 6.0), want);
    check(memcmp(got, want, sizeof got) == 0, "the clamp rewrite gives clip's values");
    values(logp, got);
    values(ot_logsoftmax(x_off, 1), want);
    values(ot_log(ot_softmax(x_off, 1)), raw);
    int neg_inf = 0;
    for (int i = 0; i < B * K; i++) {
        check(isfinite(got[i]) && fabsf(got[i] - want[i]) <= 1e-6f * fmaxf(1, fabsf(want[i])),
              "log(softmax) rewritten is logsoftmax");
        neg_inf += isinf(raw[i]) && raw[i] < 0;
    }
    printf("\nlog(softmax) of row 0 as written: %g %g %g; rewritten: %g %g %g\n", raw[0], raw[1],
           raw[2], got[0], got[1], got[2]);
    check(neg_inf > 0, "the tree as written underflows");

    ot_pool_pop(pool);
    ot_tensor_free(x);
    ot_tensor_free(x_off);
    ot_backend_free(on);
    ot_backend_free(off);
    if (failures) return 1;
    printf("all checks passed\n");
    return 0;
}
