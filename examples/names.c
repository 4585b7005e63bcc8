/*
 * names.c - names and metadata on op nodes (ngraph's op names and metadata),
 * and where they show.
 *
 *   1. A dense layer h1 = x.w + b and y = tanh(h1) with its nodes named and
 *      annotated, printed by ot_pp, ot_print and ot_graphviz.
 *   2. A view of a named tensor is named in NumPy's words: x[:, 1], x.T.
 *   3. A builder's error names its named operands ("...; operand 1 is 'h1',
 *      operand 2 is 'x[0]'"), and ot_assign's checks name the tree and the
 *      output and carry the file:line of the ot_assign call itself.
 *   4. Names are not part of a tree's value: the same tree named otherwise
 *      computes the same bits (and, on the cpu backend, reuses the plan).
 *
 * Exits non-zero if a check fails. Runs on the reference backend by default
 * (OT_BACKEND=cpu for the fused one); OT_EXAMPLE_SMALL changes nothing.
 * Uses only include/optree.h and frees everything it creates.
 */
#include "optree.h"

#include <stdio.h>
#include <string.h>

static int failures;

static void expect(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    if (!ok) failures++;
}

/* tanh(x.w + b) with its two op nodes named after prefix. */
static ot_node *layer(ot_tensor *x, ot_tensor *w, ot_tensor *b, const char *h, const char *y)
{
    ot_node *pre = ot_named(ot_add(ot_dot(x, w), b), h);
    ot_node_set_meta(pre, "layer", "dense1");
    ot_node_set_meta(pre, "units", "2");
    return ot_named(ot_tanh(pre), y);
}

static void show_named_tree(ot_tensor *x, ot_tensor *w, ot_tensor *b)
{
    ot_pool *p = ot_pool_push();
    ot_node *y = layer(x, w, b, "h1", "y");
    printf("ot_pp:\n  ");
    ot_pp(y, stdout);
    printf("\not_print:\n  ");
    ot_print(y, stdout);
    printf("\not_graphviz:\n");
    ot_graphviz(y, stdout);
    ot_pool_pop(p);
}

static void show_views(ot_tensor *x)
{
    ot_tensor *col = ot_slice(x, OT_ALL, OT_IDX(1));
    ot_tensor *xt = ot_transpose(x, NULL);
    ot_pool *p = ot_pool_push();
    printf("views: %s and %s; ot_pp: ", ot_tensor_name(col), ot_tensor_name(xt));
    ot_pp(ot_add(ot_sum(xt, .axis = 0), col), stdout);
    printf("\n");
    expect(strcmp(ot_tensor_name(col), "x[:, 1]") == 0, "a column of x is named x[:, 1]");
    ot_pool_pop(p);
    ot_tensor_free(col);
    ot_tensor_free(xt);
}

static void show_errors(ot_tensor *x, ot_tensor *w, ot_tensor *b)
{
    ot_tensor *row = ot_slice(x, OT_IDX(0));
    ot_tensor *out = ot_empty(ot_tensor_backend(x), OT_SHAPE(3), OT_F32);
    ot_tensor_set_name(out, "out");
    ot_pool *p = ot_pool_push();
    ot_node *h1 = ot_named(ot_add(ot_dot(x, w), b), "h1");
    /* (2,2) + (3,): the message names both operands. */
    ot_node *bad = ot_add(h1, row);
    printf("builder error:\n  %s\n", ot_errmsg());
    expect(!bad && strstr(ot_errmsg(), "operand 1 is 'h1', operand 2 is 'x[0]'"),
           "the builder's error names h1 and x[0]");
    int line = __LINE__ + 1;
    int rc = ot_assign(out, ot_named(ot_tanh(h1), "y"));
    printf("assignment error:\n  %s\n", ot_errmsg());
    char where[64];
    snprintf(where, sizeof where, "names.c:%d: assign: tree 0 'y'", line);
    expect(rc == OT_ESHAPE && strstr(ot_errmsg(), where) && strstr(ot_errmsg(), "output 'out'"),
           "the assignment's error has the ot_assign line and names y and out");
    ot_pool_pop(p);
    ot_tensor_free(row);
    ot_tensor_free(out);
}

static void show_same_values(ot_tensor *x, ot_tensor *w, ot_tensor *b)
{
    ot_backend *be = ot_tensor_backend(x);
    ot_tensor *o1 = ot_empty(be, OT_SHAPE(2, 2), OT_F32), *o2 = ot_empty(be, OT_SHAPE(2, 2), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_stats s0, s1;
    ot_assign(o1, layer(x, w, b, "h1", "y"));
    ot_stats_get(be, &s0);
    ot_assign(o2, layer(x, w, b, "hidden", "output"));
    ot_stats_get(be, &s1);
    float v1[4], v2[4];
    ot_get(o1, v1);
    ot_get(o2, v2);
    printf("renamed tree: %llu new compiles, %llu cache hits\n",
           (unsigned long long)(s1.compiles - s0.compiles),
           (unsigned long long)(s1.cache_hits - s0.cache_hits));
    expect(memcmp(v1, v2, sizeof v1) == 0 && s1.compiles == s0.compiles,
           "names change neither the values nor the plan");
    ot_pool_pop(p);
    ot_tensor_free(o1);
    ot_tensor_free(o2);
}

int main(void)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    if (!be) {
        fprintf(stderr, "%s\n", ot_errmsg());
        return 1;
    }
    ot_tensor *x = ot_array(be, OT_SHAPE(2, 3), OT_F32, (float[]){1, 2, 3, 4, 5, 6});
    ot_tensor *w = ot_array(be, OT_SHAPE(3, 2), OT_F32, (float[]){0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f});
    ot_tensor *b = ot_array(be, OT_SHAPE(2), OT_F32, (float[]){0.5f, -0.5f});
    ot_tensor_set_name(x, "x");
    ot_tensor_set_name(w, "w");
    ot_tensor_set_name(b, "b");
    show_named_tree(x, w, b);
    show_views(x);
    show_errors(x, w, b);
    show_same_values(x, w, b);
    ot_tensor_free(x);
    ot_tensor_free(w);
    ot_tensor_free(b);
    ot_backend_free(be);
    ot_pool_drain();
    printf("%s\n", failures ? "FAILED" : "all checks passed");
    return failures != 0;
}
