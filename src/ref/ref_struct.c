/*
 * ref_struct.c - the ref backend's evaluation of structured registered ops
 * (ot_op_register_structured): their f64 kernel on the operands' double
 * values, as ref computes everything in double; an op with an f32 kernel
 * alone runs it on values rounded to float.
 */
#include "ref.h"
#include "ops.h"

/* n doubles as floats, or back; false when out of memory. */
static float *to_floats(const double *x, int64_t n)
{
    float *f = ot__malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; f && i < n; i++) f[i] = (float)x[i];
    return f;
}

static int run_f32(const ot_node *node, const double *const x[], const ot_shape shapes[], int n,
                   double *out)
{
    const ot_custom *u = node->custom;
    float *in[OT_STRUCT_MAX_ARITY + 1] = {NULL};
    int64_t m = ot__numel(&node->shape);
    float *res = ot__malloc(sizeof(float) * (size_t)(m ? m : 1));
    bool ok = res != NULL;
    for (int i = 0; i < n && ok; i++) ok = (in[i] = to_floats(x[i], ot__numel(&shapes[i]))) != NULL;
    if (ok) {
        ot__struct_run(u, 0, n, (void *const *)in, shapes, res, &node->shape, &node->args);
        for (int64_t i = 0; i < m; i++) out[i] = res[i];
    }
    for (int i = 0; i < n; i++) free(in[i]);
    free(res);
    return ok ? OT_OK : ot__err_set(OT_ENOMEM, node->file, node->line, u->name, "out of memory");
}

int ot__ref_struct(const ot_node *node, const double *x, const double *y, double *out)
{
    const ot_custom *u = node->custom;
    int n = u->def.arity;
    const double *in[OT_STRUCT_MAX_ARITY + 1] = {x, y};
    ot_shape shapes[OT_STRUCT_MAX_ARITY + 1];
    const ot_node *operand[2] = {node->a, node->b};
    for (int i = 0; i < n; i++) shapes[i] = operand[i]->shape;
    if (!u->sdef.f64) return run_f32(node, in, shapes, n, out);
    ot__struct_run(u, 1, n, (void *const *)in, shapes, out, &node->shape, &node->args);
    return OT_OK;
}
