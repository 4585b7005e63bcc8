/*
 * cumsum_op.h - cumsum and its reverse as structured ops registered at run
 * time (ot_op_register_structured): a shape rule, f32 and f64 kernels over
 * whole tensors, and gradient rules that build each other's nodes
 * (d cumsum = reverse cumsum of g along the same axis, and back). Shared
 * by examples/cumsum.c, the unit tests and the fuzzer; header-only.
 */
#ifndef OT_CUMSUM_OP_H
#define OT_CUMSUM_OP_H

#include "optree.h"

#include <stdio.h>

/* user of each op: 0 forward (np.cumsum), 1 reverse. */
static const int cumsum_dir[2] = {0, 1};

static int cumsum_shape(int n, const ot_shape in[], const ot_dtype dt[], ot_args *args,
                        ot_shape *out, ot_dtype *out_dt, char *msg, size_t len, void *user)
{
    (void)n, (void)user;
    if (in[0].ndim < 1)
        return snprintf(msg, len, "takes a tensor of rank 1 or more, not a scalar"), OT_ESHAPE;
    if (dt[0] != OT_F32 && dt[0] != OT_F64)
        return snprintf(msg, len, "takes float32 or float64, not %s", ot_dtype_name(dt[0])),
               OT_EDTYPE;
    if (args->axis == OT_AXIS_ALL)
        return snprintf(msg, len, "needs an axis (rank %d)", in[0].ndim), OT_EINVAL;
    if (args->axis < -in[0].ndim || args->axis >= in[0].ndim)
        return snprintf(msg, len, "axis %d is out of range for rank %d", args->axis, in[0].ndim),
               OT_EINVAL;
    if (args->axis < 0) args->axis += in[0].ndim;
    *out = in[0];
    *out_dt = dt[0];
    return 0;
}

/* The scan along the axis (outer x len x inner), accumulated in double and
 * rounded once per element, so that the f32 kernel gives what the ref
 * backend's f64 one does, rounded. */
#define CUMSUM_KERNEL(NAME, T)                                                     \
    static void NAME(const ot_struct_call *c)                                      \
    {                                                                              \
        const ot_struct_tensor *x = &c->in[0], *y = c->out;                         \
        int ax = c->args->axis, rev = *(const int *)c->user;                       \
        int64_t outer = 1, len = x->shape.dims[ax], inner = x->strides[ax];        \
        for (int d = 0; d < ax; d++) outer *= x->shape.dims[d];                    \
        const T *src = x->data;                                                    \
        T *dst = y->data;                                                          \
        for (int64_t o = 0; o < outer; o++)                                        \
            for (int64_t j = 0; j < inner; j++) {                                  \
                double acc = 0;                                                    \
                for (int64_t t = 0; t < len; t++) {                                \
                    int64_t i = o * len * inner + (rev ? len - 1 - t : t) * inner + j; \
                    acc += src[i];                                                 \
                    dst[i] = (T)acc;                                               \
                }                                                                  \
            }                                                                      \
    }
CUMSUM_KERNEL(cumsum_f32, float)
CUMSUM_KERNEL(cumsum_f64, double)

static ot_op cumsum_ops[2] = {OT_OP_NONE, OT_OP_NONE};

static ot_node *cumsum_grad(int n, ot_node *const in[], ot_node *out, ot_node *g, int which,
                            const ot_args *args, void *user)
{
    (void)n, (void)in, (void)out, (void)which;
    ot_op other = cumsum_ops[!*(const int *)user];
    return ot_apply_struct(other, 1, (ot_node *[]){g}, args);
}

/* Registers "cumsum" and "rcumsum" once per process (later calls find
 * them); false with the error set when that fails. */
static bool cumsum_register(ot_op *cumsum, ot_op *rcumsum)
{
    static const char *names[2] = {"cumsum", "rcumsum"};
    for (int i = 0; i < 2; i++) {
        if (cumsum_ops[i] == OT_OP_NONE) cumsum_ops[i] = ot_op_lookup(names[i]);
        if (cumsum_ops[i] == OT_OP_NONE)
            cumsum_ops[i] = ot_op_register_structured(&(ot_struct_def){
                .name = names[i], .arity = 1, .shape = cumsum_shape, .f32 = cumsum_f32,
                .f64 = cumsum_f64, .grad = cumsum_grad, .user = (void *)&cumsum_dir[i]});
        if (cumsum_ops[i] == OT_OP_NONE) return false;
    }
    *cumsum = cumsum_ops[0];
    *rcumsum = cumsum_ops[1];
    return true;
}

#endif
