/*
 * test_topk.c - issue 35's top-k (optree/topk.h): ot_topk and
 * ot_topk_indices by hand (ties in position order, NaN above every
 * number, -0.0 equal to +0.0, k = 0 and k = size, smallest, unsorted, a
 * transposed view, a size-0 axis), the along-axis gather and scatter-add
 * (negative and repeated indices, out of range an error), the values'
 * gradient, cpu against ref on a long line (the heap against the
 * reference's insertion), build errors naming the op, shapes, k and the
 * caller's line, ot_pp read back by ot_parse, and ot_explain. Finite
 * differences are test_autodiff.c's; values against NumPy
 * tests/topk_check.py's.
 */
#include "test.h"
#include "fuzz.h"
#include "index_util.h"

#include <math.h>
#include <stdlib.h>

static const char *const BACKENDS[] = {"ref", "cpu"};

/* Two rows of six: ties (3 twice, 1 twice), NaN, -0.0 and +0.0. */
static const double ROWS[12] = {1, 3, NAN, 3, -0.0, 1, 0.0, 5, -0.0, -2, 5, 4};

TEST(topk_by_hand)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = test__backend(BACKENDS[b], OT_FUSION_ON);
        ot_tensor *x = tensor(be, OT_SHAPE(2, 6), OT_F64, ROWS);
        ot_tensor *n = ot_empty(be, OT_SHAPE(2, 3), OT_I32);
        ot_set(n, (const int32_t[]){3, 1, 2, 1, 4, 2});
        ot_pool *p = ot_pool_push();
        expect(be, ot_topk(x, 3), (const double[]){NAN, 3, 3, 5, 5, 4}, 6, "top 3");
        expect(be, ot_topk(ot_cast(x, OT_F32), 3), (const double[]){NAN, 3, 3, 5, 5, 4}, 6,
               "top 3 in float32");
        expect(be, ot_topk_indices(x, 3), (const double[]){2, 1, 3, 1, 4, 5}, 6, "top 3's indices");
        /* -0.0 and +0.0 tie: the lower position first; NaN last when smallest */
        expect(be, ot_topk_indices(x, 6, .largest = false),
               (const double[]){4, 0, 5, 1, 3, 2, 3, 0, 2, 5, 1, 4}, 12, "the whole order, smallest");
        expect(be, ot_topk(x, 2, .largest = false), (const double[]){-0.0, 1, -2, 0.0}, 4,
               "bottom 2 keeps -0.0");
        expect(be, ot_topk_indices(x, 3, -1, true, false), (const double[]){1, 2, 3, 1, 4, 5}, 6,
               "unsorted: position order");
        expect(be, ot_topk(x, 1, .axis = 0), (const double[]){1, 5, NAN, 3, 5, 4}, 6,
               "along axis 0");
        expect(be, ot_topk_indices(x, 1, .axis = 0), (const double[]){0, 1, 0, 0, 1, 1}, 6,
               "along axis 0's indices");
        expect(be, ot_topk(ot_T(x), 2, .axis = 0), (const double[]){NAN, 5, 3, 5}, 4,
               "a transposed view");
        expect(be, ot_topk(x, 0), NULL, 0, "k = 0");
        expect(be, ot_topk_indices(n, 2, .axis = 0), (const double[]){0, 1, 0, 1, 0, 1}, 6,
               "int32, k = size");
        ot_pool_pop(p);
        ot_tensor_free(x);
        ot_tensor_free(n);
        ot_backend_free(be);
    }
}

TEST(topk_size0_and_size1)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = test__backend(BACKENDS[b], OT_FUSION_ON);
        ot_tensor *e = ot_zeros(be, OT_SHAPE(3, 0), OT_F64);
        ot_tensor *one = tensor(be, OT_SHAPE(1, 2), OT_F64, (const double[]){-1, 2});
        ot_pool *p = ot_pool_push();
        expect(be, ot_topk(e, 0), NULL, 0, "a size-0 axis, k = 0");
        expect(be, ot_topk(e, 2, .axis = 0), NULL, 0, "lines of a size-0 dim");
        expect(be, ot_topk(one, 1, .axis = 0), (const double[]){-1, 2}, 2, "a size-1 axis");
        expect(be, grad_of(ot_topk(e, 0), e), NULL, 0, "the gradient of nothing");
        ot_pool_pop(p);
        ot_tensor_free(e);
        ot_tensor_free(one);
        ot_backend_free(be);
    }
}

TEST(topk_gradient_and_along_ops)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = test__backend(BACKENDS[b], OT_FUSION_ON);
        ot_tensor *x = tensor(be, OT_SHAPE(2, 3), OT_F64, (const double[]){4, 1, 3, 2, 9, 2});
        ot_tensor *i = ot_empty(be, OT_SHAPE(2, 2), OT_I32);
        ot_tensor *ones = ot_ones(be, OT_SHAPE(2, 2), OT_F64);
        ot_set(i, (const int32_t[]){-1, 0, 1, 1});
        ot_pool *p = ot_pool_push();
        /* d sum(top2^2)/dx: 2x at the chosen positions, 0 elsewhere */
        expect(be, grad_of(ot_topk(x, 2), x), (const double[]){8, 0, 6, 4, 18, 0}, 6,
               "topk's gradient (a tie: the first 2)");
        expect(be, ot_take_along(x, i, 1), (const double[]){3, 4, 9, 9}, 4, "take_along");
        expect(be, ot_scatter_add_along(ones, i, 1, 3),
               (const double[]){1, 0, 1, 0, 2, 0}, 6, "scatter_add_along repeats");
        expect(be, grad_of(ot_take_along(x, i, 1), x), (const double[]){8, 0, 6, 0, 36, 0}, 6,
               "take_along's gradient");
        ot_pool_pop(p);
        ot_tensor_free(x);
        ot_tensor_free(i);
        ot_tensor_free(ones);
        ot_backend_free(be);
    }
}

/* Long lines with many ties and NaNs: the cpu heap and sort against the
 * reference's insertion. */
TEST(topk_cpu_matches_ref_on_long_lines)
{
    ot_backend *ref = test__backend("ref", OT_FUSION_ON), *cpu = test__backend("cpu", OT_FUSION_ON);
    enum { R = 3, N = 257 };
    double v[R * N];
    for (int e = 0; e < R * N; e++) v[e] = e % 7 == 3 ? NAN : (double)((e * 37) % 19) - 9;
    int ks[] = {1, 5, 32, 33, 100, N};   /* the heap up to k = N / 8, then the sort */
    for (int c = 0; c < 6; c++)
        for (int m = 0; m < 4; m++) {
            ot_tensor *xr = tensor(ref, OT_SHAPE(R, N), OT_F64, v), *xc = tensor(cpu, OT_SHAPE(R, N), OT_F64, v);
            ot_tensor *a = ot_empty(ref, OT_SHAPE(R, ks[c]), OT_I32), *bt = ot_empty(cpu, OT_SHAPE(R, ks[c]), OT_I32);
            ot_pool *p = ot_pool_push();
            CHECK_INT(ot_assign(a, ot_topk_indices(xr, ks[c], -1, m & 1, m & 2)), 0);
            CHECK_INT(ot_assign(bt, ot_topk_indices(xc, ks[c], -1, m & 1, m & 2)), 0);
            ot_pool_pop(p);
            int32_t *ia = malloc(sizeof *ia * R * N), *ib = malloc(sizeof *ib * R * N);
            ot_get(a, ia);
            ot_get(bt, ib);
            int bad = -1;
            for (int e = 0; e < R * ks[c] && bad < 0; e++)
                if (ia[e] != ib[e]) bad = e;
            if (bad >= 0)
                test__fail(__FILE__, __LINE__, "k %d mode %d: [%d] ref %d cpu %d", ks[c], m, bad,
                           ia[bad], ib[bad]);
            free(ia);
            free(ib);
            ot_tensor_free(xr);
            ot_tensor_free(xc);
            ot_tensor_free(a);
            ot_tensor_free(bt);
        }
    ot_backend_free(ref);
    ot_backend_free(cpu);
}

TEST(topk_errors)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = test__backend(BACKENDS[b], OT_FUSION_ON);
        ot_tensor *x = ot_zeros(be, OT_SHAPE(2, 3), OT_F32);
        ot_tensor *i = ot_empty(be, OT_SHAPE(2, 1), OT_I32);
        ot_tensor *out = ot_full(be, OT_SHAPE(2, 1), OT_F32, 7.0);
        ot_set(i, (const int32_t[]){0, -4});
        ot_pool *p = ot_pool_push();
        char site[256];
        CHECK(ot_topk(x, 4) == NULL);
        CHECK_ERR(OT_EINVAL, TEST_SITE(site, __LINE__ - 1), "topk", "k = 4", "[0, 3]", "(2,3)");
        ot_clear_error();
        CHECK(ot_topk(x, -1, .axis = 0) == NULL);
        CHECK_ERR(OT_EINVAL, "topk", "[0, 2]");
        ot_clear_error();
        CHECK(ot_topk(x, INT64_MAX) == NULL);   /* named as given, not cut to an int */
        CHECK_ERR(OT_EINVAL, "topk", "k = 9223372036854775807", "[0, 3]", "(2,3)");
        ot_clear_error();
        CHECK(ot_topk(x, -5, .axis = 0) == NULL);
        CHECK_ERR(OT_EINVAL, "topk", "k = -5", "[0, 2]");
        ot_clear_error();
        CHECK(ot_topk(x, 1, .axis = 2) == NULL);
        CHECK_ERR(OT_EINVAL, "topk", "axis 2 is out of bounds");
        ot_clear_error();
        CHECK(ot_take_along(x, x, 1) == NULL);
        CHECK_ERR(OT_EDTYPE, "take_along", "int32");
        ot_clear_error();
        CHECK(ot_take_along(x, i, 0) == NULL);
        CHECK_ERR(OT_ESHAPE, "take_along", "(2,1)", "(2,3)");
        ot_clear_error();
        CHECK_INT(ot_assign(out, ot_take_along(x, i, 1)), OT_EINVAL);
        CHECK_ERR(OT_EINVAL, "take_along", "index -4 at position (1, 0)", "size 3");
        ot_clear_error();
        float v[2];
        ot_get(out, v);
        CHECK(v[0] == 7.0f && v[1] == 7.0f);
        ot_pool_pop(p);
        ot_tensor_free(x);
        ot_tensor_free(i);
        ot_tensor_free(out);
        ot_backend_free(be);
    }
}

TEST(topk_prints_parses_and_explains)
{
    ot_backend *be = test__backend("cpu", OT_FUSION_ON);
    ot_tensor *x = ot_zeros(be, OT_SHAPE(5, 3), OT_F32);
    ot_tensor *i = ot_zeros(be, OT_SHAPE(5, 2), OT_I32);
    ot_tensor_set_name(x, "x");
    ot_tensor_set_name(i, "i");
    ot_pool *p = ot_pool_push();
    ot_node *in[] = {ot_tensor_node(x), ot_tensor_node(i)};
    ot_node *trees[] = {ot_topk(x, 2), ot_topk_indices(x, 3, 0, false, false),
                        grad_of(ot_topk(x, 1, .axis = 0), x), ot_take_along(x, i, 1),
                        ot_scatter_add_along(x, ot_topk_indices(x, 3), 1, 4)};
    CHECK_INT(fuzz_pp_roundtrip(trees, 5, 2, (const char *[]){"x", "i"}, in), -1);
    char *e = test__capture(ot_pp, trees[1]);
    if (!e || !strstr(e, "(topk x axis=0 k=3 smallest unsorted)"))
        test__fail(__FILE__, __LINE__, "ot_pp wrote %s", e ? e : "(null)");
    free(e);
    e = test__capture(ot_explain, trees[2]);
    CHECK(e && strstr(e, "index scatter_along [5x3]") && strstr(e, "index topk [1x3]"));
    free(e);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(i);
    ot_backend_free(be);
}
