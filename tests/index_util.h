/*
 * index_util.h - helpers the indexing tests share (test_index.c,
 * test_topk.c): a tree's values against expected ones (NaN and the sign
 * of zeros alike), a tensor from doubles, and d sum(y^2)/dx.
 */
#ifndef OT_TEST_INDEX_UTIL_H
#define OT_TEST_INDEX_UTIL_H

#include "test.h"

#include <math.h>
#include <stdlib.h>

/* Whether tree's values (read as f64) are want's, NaN and the sign of
 * zeros alike. */
static inline void expect(ot_backend *be, ot_node *tree, const double *want, int n, const char *what)
{
    ot_tensor *t = tree ? ot_empty(be, ot_node_shape(tree), OT_F64) : NULL;
    int rc = t ? ot_assign(t, tree) : -1;
    if (rc) {
        test__fail(__FILE__, __LINE__, "%s on %s: %s", what, ot_backend_name(be), ot_errmsg());
        ot_clear_error();
        ot_tensor_free(t);
        return;
    }
    CHECK_INT(ot_tensor_numel(t), n);
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    CHECK_INT(ot_get(t, v), 0);
    for (int i = 0; i < n; i++)
        if (!(isnan(want[i]) ? isnan(v[i]) : v[i] == want[i] && signbit(v[i]) == signbit(want[i]))) {
            test__fail(__FILE__, __LINE__, "%s on %s [%d]: %g, expected %g", what,
                       ot_backend_name(be), i, v[i], want[i]);
            break;
        }
    free(v);
    ot_tensor_free(t);
}

static inline ot_tensor *tensor(ot_backend *be, ot_shape s, ot_dtype dt, const double *v)
{
    ot_tensor *t = ot_empty(be, s, dt);
    if (t && v) ot_set(t, v);
    return t;
}

/* d sum(y^2) / dx. */
static inline ot_node *grad_of(ot_node *y, ot_tensor *x)
{
    ot_autodiff *ad = y ? ot_autodiff_new(ot_sum(ot_sqr(y)), NULL) : NULL;
    ot_node *g = ad ? ot_autodiff_grad(ad, x) : NULL;
    ot_autodiff_free(ad);
    return g;
}

#endif
