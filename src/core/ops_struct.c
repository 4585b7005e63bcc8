/*
 * ops_struct.c - structured ops registered at run time
 * (ot_op_register_structured, optree/extend.h): their registration, the
 * builder's inference for their nodes (the user's shape rule, operands cast
 * to the result's dtype) and the one call of their kernels over contiguous
 * tensors that both backends make (ref in double, cpu per dtype). They
 * share the registry and the op numbers of ot_op_register (ops.c); their
 * nodes use the placeholder row custom_struct of the op table.
 */
#include "internal.h"
#include "node_build.h"
#include "ops.h"

#define REG_FAIL(code, ...) ot__err_set((code), NULL, 0, "op_register_structured", __VA_ARGS__)

/* The checks that need no lock; the name's are the registry's. */
static bool sdef_ok(const ot_struct_def *d)
{
    const char *nm = d->name ? d->name : "(NULL)";
    if (!d->shape) return REG_FAIL(OT_ENULL, "op '%s' has no shape rule (NULL shape)", nm), false;
    if (d->arity < 0 || d->arity > OT_STRUCT_MAX_ARITY)
        return REG_FAIL(OT_EINVAL, "op '%s' has arity %d; structured ops take 0 to %d operands",
                        nm, d->arity, OT_STRUCT_MAX_ARITY),
               false;
    if (!d->f32 && !d->f64)
        return REG_FAIL(OT_EINVAL, "op '%s' has no kernel (NULL f32 and f64)", nm), false;
    return true;
}

ot_op ot_op_register_structured(const ot_struct_def *def)
{
    if (!def) {
        REG_FAIL(OT_ENULL, "def is NULL");
        return OT_OP_NONE;
    }
    if (!sdef_ok(def)) return OT_OP_NONE;
    ot_custom *u = ot__custom_reserve(def->name);
    if (!u) return OT_OP_NONE;
    u->structured = true;
    u->sdef = *def;
    u->sdef.name = u->name;
    u->def.arity = def->arity;   /* what ot_op_arity answers */
    u->row = OT_OP_CUSTOM_STRUCT;
    return ot__custom_publish(u);
}

ot_node *ot_apply_struct_at(ot_op op, int n, ot_node *const in[], const ot_args *args,
                            const char *file, int line)
{
    const ot_custom *u = ot__custom_of_op(op);
    if (!u || !u->structured) {
        ot__err(OT_EINVAL, file, line, "apply_struct", "op %d is not a structured registered op",
                (int)op);
        return NULL;
    }
    if (n != u->def.arity) {
        ot__err(OT_EINVAL, file, line, u->name, "takes %d operand%s, not %d", u->def.arity,
                u->def.arity == 1 ? "" : "s", n);
        return NULL;
    }
    if (n > 0 && !in) {
        ot__err(OT_ENULL, file, line, u->name, "the operand array is NULL");
        return NULL;
    }
    return ot_build_at(op, n > 0 ? in[0] : NULL, n > 1 ? in[1] : NULL, args, file, line);
}

/* ---- the builder's inference ------------------------------------------------- */

/* x as the result's dtype dt: itself, or a cast node. */
static ot_node *as_dtype(const site *st, ot_node *x, ot_dtype dt)
{
    if (!x || x->dtype == dt) return x;
    ot_args c = {.axis = OT_AXIS_ALL, .dtype = dt};
    return ot_build_at(OT_OP_CAST, x, NULL, &c, st->file, st->line);
}

int ot__infer_struct(const site *st, ot_node **a, ot_node **b, proto *p)
{
    const ot_custom *u = st->custom;
    ot_node *in[2] = {*a, *b};
    ot_shape shapes[OT_STRUCT_MAX_ARITY + 1];
    ot_dtype dtypes[OT_STRUCT_MAX_ARITY + 1];
    int n = u->def.arity;
    for (int i = 0; i < n; i++) {
        shapes[i] = in[i]->shape;
        dtypes[i] = (ot_dtype)in[i]->dtype;
    }
    /* The axis is the op's one parameter: nothing else may make two nodes
     * differ that identity calls equal. */
    ot_args args = {.axis = p->args.axis};
    char msg[300] = "";
    ot_shape out = {0};
    ot_dtype dt = OT_F32;
    int rc = u->sdef.shape(n, shapes, dtypes, &args, &out, &dt, msg, sizeof msg, u->sdef.user);
    if (rc)
        return FAIL(st, rc < 0 ? rc : OT_EINVAL, "%s", msg[0] ? msg : "the shape rule failed");
    if (dt != OT_F32 && dt != OT_F64)
        return FAIL(st, OT_EDTYPE, "the shape rule gave dtype %d; structured ops give float32 or "
                                   "float64", (int)dt);
    if (!ot__struct_has(u, dt == OT_F64))
        return FAIL(st, OT_EUNSUPPORTED, "has no %s kernel (its result here is %s)",
                    dt == OT_F64 ? "f64" : "f32", ot_dtype_name(dt));
    if (out.ndim < 0 || out.ndim > OT_MAX_DIMS)
        return FAIL(st, OT_ESHAPE, "the shape rule gave %d dims", out.ndim);
    for (int d = 0; d < out.ndim; d++)
        if (out.dims[d] < 0)
            return FAIL(st, OT_ESHAPE, "the shape rule gave dim %d of size %lld", d,
                        (long long)out.dims[d]);
    if ((n > 0 && !(*a = as_dtype(st, *a, dt))) || (n > 1 && !(*b = as_dtype(st, *b, dt))))
        return ot_errcode();
    p->args = args;
    p->shape = out;
    p->dtype = dt;
    return 0;
}

/* ---- kernels ------------------------------------------------------------------ */

static void contiguous_tensor(ot_struct_tensor *t, void *data, const ot_shape *s, ot_dtype dt)
{
    t->data = ot__numel(s) ? data : NULL;
    t->dtype = dt;
    t->shape = *s;
    int64_t st = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
        t->strides[d] = st;
        st *= s->dims[d] ? s->dims[d] : 1;
    }
}

void ot__struct_run(const ot_custom *u, int kd, int n, void *const in[], const ot_shape shapes[],
                    void *out, const ot_shape *out_shape, const ot_args *args)
{
    if (ot__numel(out_shape) == 0) return;
    ot_dtype dt = kd == 0 ? OT_F32 : OT_F64;
    ot_struct_tensor tin[OT_STRUCT_MAX_ARITY + 1], tout;
    for (int i = 0; i < n; i++) contiguous_tensor(&tin[i], in[i], &shapes[i], dt);
    contiguous_tensor(&tout, out, out_shape, dt);
    ot_struct_call call = {.n = n, .in = tin, .out = &tout, .args = args, .user = u->sdef.user};
    (kd == 0 ? u->sdef.f32 : u->sdef.f64)(&call);
}
