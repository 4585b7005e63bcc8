/*
 * test_macros.c - issue 31 point 10: the header's function-like macros take
 * compound literals, whose commas the preprocessor would split into
 * separate macro arguments, in every argument after the first. This file
 * failing to compile is the regression; the cases check the calls also do
 * what they say.
 */
#include "test.h"

static ot_tensor *vec(ot_backend *be, const float *v, int64_t n)
{
    return ot_array(be, OT_SHAPE(n), OT_F32, v);
}

static void check_values(ot_tensor *t, int n, const float *want)
{
    float got[8] = {0};
    CHECK_INT(ot_tensor_numel(t), n);
    CHECK_INT(ot_get(t, got), 0);
    for (int i = 0; i < n; i++) CHECK_NEAR(got[i], want[i], 0);
}

TEST(macros_concat_and_stack_take_compound_literals)
{
    ot_backend *be = test__backend("ref", OT_FUSION_ON);
    ot_tensor *a = vec(be, (float[]){1, 2}, 2), *b = vec(be, (float[]){0, 0}, 2);
    ot_tensor *out = ot_empty(be, OT_SHAPE(4), OT_F32);
    ot_pool *pool = ot_pool_push();
    CHECK_INT(ot_assign(out, ot_concat(2, (ot_node *[]){ot_tensor_node(a), ot_sig(b)}, -1)), 0);
    check_values(out, 4, (float[]){1, 2, 0.5f, 0.5f});
    ot_tensor *pair = ot_empty(be, OT_SHAPE(2, 2), OT_F32);
    CHECK_INT(ot_assign(pair, ot_stack_nodes(2, (ot_node *[]){ot_tensor_node(b),
                                                               ot_tensor_node(a)}, 0)), 0);
    check_values(pair, 4, (float[]){0, 0, 1, 2});
    ot_pool_pop(pool);
    ot_tensor_free(pair);
    ot_tensor_free(out);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_backend_free(be);
}

TEST(macros_split_reshape_build_take_compound_literals)
{
    ot_backend *be = test__backend("ref", OT_FUSION_ON);
    ot_tensor *x = vec(be, (float[]){1, 2, 3, 4}, 4);
    ot_tensor *head = ot_empty(be, OT_SHAPE(1), OT_F32), *tail = ot_empty(be, OT_SHAPE(3), OT_F32);
    ot_tensor *sq = ot_empty(be, OT_SHAPE(2, 2), OT_F32), *total = ot_empty(be, OT_SHAPE(), OT_F32);
    ot_pool *pool = ot_pool_push();
    ot_node *parts[2];
    CHECK_INT(ot_split(x, 0, 2, (int64_t[]){1, 3}, parts), 0);
    CHECK_INT(ot_assign(head, parts[0]), 0);
    CHECK_INT(ot_assign(tail, parts[1]), 0);
    check_values(head, 1, (float[]){1});
    check_values(tail, 3, (float[]){2, 3, 4});
    CHECK_INT(ot_assign(sq, ot_reshape_node(x, (ot_shape){.ndim = 2, .dims = {2, 2}})), 0);
    check_values(sq, 4, (float[]){1, 2, 3, 4});
    ot_node *sum = ot_build(OT_OP_SUM, ot_tensor_node(x), NULL,
                            &(ot_args){.axis = OT_AXIS_ALL, .keepdims = false});
    CHECK_INT(ot_assign(total, sum), 0);
    check_values(total, 1, (float[]){10});
    ot_pool_pop(pool);
    CHECK_INT(ot_stats(be, &(ot_stats){.assigns = 0, .nodes = 0}), 0);
    ot_tensor_free(total);
    ot_tensor_free(sq);
    ot_tensor_free(head);
    ot_tensor_free(tail);
    ot_tensor_free(x);
    ot_backend_free(be);
}
