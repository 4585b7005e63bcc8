/*
 * checkpoint.c - cutting a fused region by hand with ot_keep, and the
 * thread's default pool.
 *
 * y = exp(h) / (1 + exp(h)) + tanh(h) with h = tanh(x*w + b): the cpu
 * backend fuses all of it into one kernel, h computed inline. ot_keep(h)
 * stores h once (its own kernel and storage) and the rest reads it back;
 * ot_explain shows both plans. The values are the same bits either way,
 * which the program checks, and gradients pass through ot_keep unchanged.
 *
 * Then the default pool: builders called with no pool pushed put their
 * nodes there, and only ot_pool_drain empties it. ot_pool_default_nodes
 * shows it growing over a loop that forgot ot_pool_push, and empty after
 * the drain.
 *
 * It runs on the cpu backend (OT_BACKEND=ref for the reference one, where
 * ot_explain has no plan to show); small already, so OT_EXAMPLE_SMALL
 * changes nothing. Exits non-zero if a check fails. Uses only
 * include/optree.h and frees everything it creates.
 */
#include "optree.h"

#include <stdio.h>
#include <string.h>

enum { N = 1000 };

static ot_node *model(ot_tensor *x, ot_tensor *w, ot_tensor *b, bool keep)
{
    ot_node *h = ot_tanh(ot_add(ot_mul(x, w), b));
    if (keep) h = ot_keep(h);
    ot_node *e = ot_exp(h);
    return ot_add(ot_div(e, ot_add(1.0f, e)), ot_tanh(h));
}

int main(void)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    if (!be) {
        fprintf(stderr, "%s\n", ot_errmsg());
        return 1;
    }
    float xv[N];
    for (int i = 0; i < N; i++) xv[i] = (float)(i % 17) / 8.0f - 1.0f;
    ot_tensor *x = ot_array(be, OT_SHAPE(N), OT_F32, xv);
    ot_tensor *w = ot_full(be, OT_SHAPE(N), OT_F32, 0.75);
    ot_tensor *b = ot_full(be, OT_SHAPE(N), OT_F32, 0.125);
    ot_tensor *y0 = ot_empty(be, OT_SHAPE(N), OT_F32), *y1 = ot_empty(be, OT_SHAPE(N), OT_F32);
    ot_tensor *g0 = ot_empty(be, OT_SHAPE(N), OT_F32), *g1 = ot_empty(be, OT_SHAPE(N), OT_F32);
    int bad = 0;

    ot_pool *pool = ot_pool_push();
    ot_node *fused = model(x, w, b, false), *cut = model(x, w, b, true);
    printf("fused:\n");
    ot_explain(fused, stdout);
    printf("with ot_keep(h):\n");
    ot_explain(cut, stdout);
    ot_autodiff *d0 = ot_autodiff_new(ot_sum(fused), NULL);
    ot_autodiff *d1 = ot_autodiff_new(ot_sum(cut), NULL);
    if (ot_assign(y0, fused) || ot_assign(y1, cut) || !d0 || !d1 ||
        ot_assign(g0, ot_autodiff_grad(d0, w)) || ot_assign(g1, ot_autodiff_grad(d1, w))) {
        fprintf(stderr, "%s\n", ot_errmsg());
        bad = 1;
    }
    ot_autodiff_free(d0);
    ot_autodiff_free(d1);
    ot_pool_pop(pool);
    if (!bad && (memcmp(ot_tensor_data(y0), ot_tensor_data(y1), sizeof(float) * N) ||
                 memcmp(ot_tensor_data(g0), ot_tensor_data(g1), sizeof(float) * N))) {
        fprintf(stderr, "ot_keep changed a value or a gradient\n");
        bad = 1;
    }
    printf("values and gradients: %s\n", bad ? "differ" : "bitwise equal");

    /* No pool pushed: every node of every step stays until the drain. */
    size_t before = ot_pool_default_nodes();
    for (int step = 0; step < 100; step++) bad |= ot_assign(y0, model(x, w, b, true)) != 0;
    printf("default pool: %zu nodes before the loop, %zu after 100 steps", before,
           ot_pool_default_nodes());
    ot_pool_drain();
    printf(", %zu after ot_pool_drain\n", ot_pool_default_nodes());

    ot_tensor_free(x), ot_tensor_free(w), ot_tensor_free(b);
    ot_tensor_free(y0), ot_tensor_free(y1), ot_tensor_free(g0), ot_tensor_free(g1);
    ot_backend_free(be);
    return bad;
}
