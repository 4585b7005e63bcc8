/*
 * node.c - op-tree nodes: the builder (operand checks, then node_infer.c's
 * shape, dtype and axis inference), composite expansion, constants, the
 * digests that identify a tree and the accessors. Refcounts, pools and dead
 * nodes are node_pool.c's.
 *
 * Nothing here knows about execution. Every check that can be made from
 * shapes and dtypes is made here, when the node is built, so that an error
 * points at the user's line rather than at a later ot_assign.
 */
#include "node_build.h"

#include <stdarg.h>

#include <stdio.h>

/* ---- digests ------------------------------------------------------------- */

/* Two 64-bit lanes, each an xor of words multiplied by its own odd
 * constants, finished by a multiply and shifts: the words are independent
 * multiplies, not one chain (a chain of a multiply per word cost 13 ns a
 * node, a sixth of W8). Operands enter through their digests, which are
 * already mixed, lane by lane, so the lanes stay independent; the plan
 * cache trusts a match of both (plan_key.c), whose odds for two trees that
 * differ are near 2^-128 per pair. */
#define DIGEST_K(i) (0x9e3779b97f4a7c15ULL * (2 * (uint64_t)(i) + 1) | 1)

static inline uint64_t digest_final(uint64_t h)
{
    h = (h ^ h >> 32) * 0xff51afd7ed558ccdULL;
    return h ^ h >> 29;
}

static inline uint64_t digest_rot(uint64_t x) { return x << 32 | x >> 32; }

/* The words every digest starts from: kind, op, dtype, weak. */
static inline uint64_t digest_head(const ot_node *n)
{
    return n->kind | (uint64_t)(uint8_t)n->op << 8 | (uint64_t)n->dtype << 16 |
           (uint64_t)n->weak << 24;
}

/* An op node's digest from its lanes so far and its operands' digests;
 * none when an operand has none. */
static inline void digest_operands(ot_node *n, uint64_t x0, uint64_t x1)
{
    const ot_node *operand[2] = {n->a, n->b};
    for (int k = 0; k < 2; k++) {
        const ot_node *o = operand[k];
        if (o && !o->digest_ok) return;
        x0 ^= (o ? o->digest[0] : DIGEST_K(6)) * DIGEST_K(7 + 2 * k);
        x1 ^= (o ? o->digest[1] : DIGEST_K(6)) * DIGEST_K(8 + 2 * k);
    }
    n->digest[0] = digest_final(x0);
    n->digest[1] = digest_final(x1);
    n->digest_ok = true;
}

/* The digest of an op node without identity words (a built-in unary or
 * binary op): ot__node_digest's, without its dispatch (W8 builds four of
 * these a call). */
static inline void digest_plain(ot_node *n)
{
    uint64_t head = digest_head(n);
    n->digest_ok = false;
    digest_operands(n, head * DIGEST_K(0), head * DIGEST_K(1));
}

void ot__node_digest(ot_node *n)
{
    uint64_t head = digest_head(n);
    uint64_t x0 = head * DIGEST_K(0), x1 = head * DIGEST_K(1);
    n->digest_ok = false;
    if (n->kind == OT_NODE_LEAF) {
        uint64_t serial = ot__leaf_tensor(n)->serial;
        if (!serial) return;
        x0 ^= serial * DIGEST_K(2);
        x1 ^= digest_rot(serial) * DIGEST_K(3);
    } else if (n->kind == OT_NODE_CONST) {
        uint64_t bits;
        memcpy(&bits, &n->value, sizeof bits);
        x0 ^= bits * DIGEST_K(2);
        x1 ^= digest_rot(bits) * DIGEST_K(3);
    } else {
        int kind = ot__op_table[n->op].kind;
        if (n->custom || (kind != OT_KIND_UNARY && kind != OT_KIND_BINARY)) {
            int64_t w[OT__IDENT_MAX];
            int nw = ot__op_ident(n, w);
            for (int i = 0; i < nw; i++) {
                x0 = digest_final(x0 ^ (uint64_t)w[i] * DIGEST_K(4));
                x1 = digest_final(x1 ^ digest_rot((uint64_t)w[i]) * DIGEST_K(5));
            }
        }
        digest_operands(n, x0, x1);
        return;
    }
    n->digest[0] = digest_final(x0);
    n->digest[1] = digest_final(x1);
    n->digest_ok = true;
}

/* ---- constants ----------------------------------------------------------- */

static ot_node *new_const(double v, ot_dtype dt)
{
    ot_node *n = ot__node_alloc();
    if (!n) {
        ot__err(OT_ENOMEM, NULL, 0, "const", "out of memory");
        return NULL;
    }
    n->kind = OT_NODE_CONST;
    n->dtype = (uint8_t)dt;
    n->weak = true;
    n->value = v;
    ot__node_digest(n);
    return ot__pool_adopt_new(n);
}

ot_node *ot_const(double value) { return new_const(value, OT_F64); }
ot_node *ot_constf(float value) { return new_const(value, OT_F32); }
ot_node *ot_consti(int value) { return new_const(value, OT_I32); }

ot_node *ot_consti64(int64_t value)
{
    bool fits = value >= INT32_MIN && value <= INT32_MAX;
    return new_const((double)value, fits ? OT_I32 : OT_F64);
}

/* A clip bound as a constant: a weak int where it is an integer that fits
 * int32 (not -0.0), so that clipping an i32 tensor by integers stays i32 as
 * NumPy's np.clip does (ot_const made it f64); else a weak f64. */
static ot_node *bound_const(double v)
{
    bool integral = v == floor(v) && v >= INT32_MIN && v <= INT32_MAX && !(v == 0 && signbit(v));
    return integral ? ot_consti((int)v) : ot_const(v);
}

/* ---- the builder --------------------------------------------------------- */

/* Records a builder's error (the first of an expression wins), followed by
 * the names of the operands that have one: "...; operand 2 is 'h1'". */
int ot__build_fail(const site *st, int code, const char *fmt, ...)
{
    if (ot_errcode()) return code;
    char msg[400], qa[OT__QNAME_LEN], qb[OT__QNAME_LEN], names[2 * OT__QNAME_LEN + 40];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *na = st->a ? ot__qname(st->a, qa) : "", *nb = st->b ? ot__qname(st->b, qb) : "";
    names[0] = '\0';
    if (ot_op_arity(st->op) < 2 && *na)
        snprintf(names, sizeof names, "; the operand is%s", na);
    else if (*na && *nb)
        snprintf(names, sizeof names, "; operand 1 is%s, operand 2 is%s", na, nb);
    else if (*na || *nb)
        snprintf(names, sizeof names, "; operand %d is%s", *na ? 1 : 2, *na ? na : nb);
    return ot__err(code, st->file, st->line, ot_op_name(st->op), "%s%s", msg, names);
}
/* The end of the initializer that starts at p: the next comma (or the end)
 * outside brackets and literals. */
static const char *initializer_end(const char *p)
{
    int depth = 0;
    for (; *p; p++) {
        if (*p == '"' || *p == '\'') {
            char quote = *p;
            for (p++; *p && *p != quote; p++)
                if (*p == '\\' && p[1]) p++;
            if (!*p) return p;
        } else if (*p == '(' || *p == '[' || *p == '{') {
            depth++;
        } else if (*p == ')' || *p == ']' || *p == '}') {
            depth--;
        } else if (*p == ',' && depth == 0) {
            return p;
        }
    }
    return p;
}

static bool ident_char(char c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Position of the name [p, p + n) in the comma-separated list, or -1. */
static int member_index(const char *members, const char *p, size_t n)
{
    int i = 0;
    for (const char *m = members; *m; i++) {
        const char *e = strchr(m, ',');
        size_t len = e ? (size_t)(e - m) : strlen(m);
        if (len == n && strncmp(m, p, n) == 0) return i;
        if (!e) break;
        m = e + 1;
    }
    return -1;
}

/* Aggregate members (perm, shape) come last in every options struct, so
 * counting whole members decides exactly whether a scalar member was set. */
bool ot_spec_sets(const char *spec, const char *members, const char *member)
{
    if (!spec || !members || !member) return false;
    int want = member_index(members, member, strlen(member));
    if (want < 0) return false;
    int cur = -1;   /* spec_ (not in members), which the macro designates first */
    for (const char *p = spec; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\n') p++;
        const char *end = initializer_end(p);
        if (p == end) {   /* a trailing comma */
            if (!*end) break;
            p = end + 1;
            continue;
        }
        const char *name = p + 1;   /* C allows ". axis = 1" */
        while (*name == ' ' || *name == '\t' || *name == '\n') name++;
        if (p[0] == '.' && ident_char(*name) && !(*name >= '0' && *name <= '9')) {
            const char *q = name;
            while (ident_char(*q)) q++;
            cur = member_index(members, name, (size_t)(q - name));
        } else {
            cur++;
        }
        if (cur == want) return true;
        p = *end ? end + 1 : end;
    }
    return false;
}

/* Into a zeroed p: filled in place, since ot_args is large and every node
 * build passes here. */
static void normalise_args(proto *p, const ot_args *args)
{
    ot_args *a = &p->args;
    if (!args) {
        a->axis = OT_AXIS_ALL;
        return;
    }
    *a = *args;
    if (a->spec_) {
        if (!ot_spec_sets(a->spec_, OT__ARGS_MEMBERS, "axis")) a->axis = OT_AXIS_ALL;
        p->perm_given = ot_spec_sets(a->spec_, OT__ARGS_MEMBERS, "perm");
    }
    a->spec_ = NULL;
}

/* NumPy (NEP 50): a Python scalar meeting an array takes the array's dtype
 * before the op, so x_f32 == 0.1 compares with float32(0.1). A constant is
 * rounded here, into a new constant that keeps the old one's name and
 * metadata (it lost them: a * ot_named(ot_const(0.5), "lr") printed no
 * lr, and ot_parse of ot_pp's "(a * lr:0.5)" came back unnamed); a weak
 * expression of constants gets a cast. */
static ot_node *coerce_weak(const site *st, ot_node *w, ot_dtype dt)
{
    if (w->dtype == dt) return w;
    if (w->kind == OT_NODE_CONST) {
        union { float f; double d; int32_t i; } v;
        ot__store(&v, dt, w->value);
        ot_node *c = new_const(ot__load(&v, dt), dt);
        return c && ot__annot_dup(c, w) ? NULL : c;
    }
    ot_args c = {.axis = OT_AXIS_ALL, .dtype = dt};
    return ot_build_at(OT_OP_CAST, w, NULL, &c, st->file, st->line);
}

/* A new op node in the current pool, args NULL meaning the defaults (a
 * zeroed ot_args with axis OT_AXIS_ALL, which a fresh node already holds
 * but for the axis). */
static ot_node *op_node(const site *st, ot_node *a, ot_node *b, const ot_shape *shape,
                        ot_dtype dtype, bool weak, const ot_args *args)
{
    ot_node *n = ot__node_alloc();
    if (!n) {
        FAIL(st, OT_ENOMEM, "out of memory");
        return NULL;
    }
    n->kind = OT_NODE_OP;
    n->op = (int8_t)(st->custom ? st->custom->row : st->op);
    n->custom = st->custom;
    n->dtype = (uint8_t)dtype;
    n->weak = weak;
    /* The dims in use: the node is zeroed, and a 72-byte copy of an operand
     * built a moment ago waited on its stores (a third of a plain build). */
    n->shape.ndim = shape->ndim;
    for (int d = 0; d < shape->ndim; d++) n->shape.dims[d] = shape->dims[d];
    if (args) ot__node_set_args(n, args);
    else n->args.axis = OT_AXIS_ALL;
    n->file = st->file;
    n->line = st->line;
    n->a = ot__node_hold_operand(n, a, OT__OP_A);
    n->b = ot__node_hold_operand(n, b, OT__OP_B);
    n->be = a && a->be ? a->be : (b ? b->be : NULL);
    if (!args && !st->custom) digest_plain(n);   /* is_plain's: unary or binary */
    else ot__node_digest(n);
    return ot__pool_adopt_new(n);
}

static ot_node *make_node(const site *st, ot_node *a, ot_node *b, const proto *p)
{
    ot_node *n = op_node(st, a, b, &p->shape, p->dtype, p->weak, &p->args);
    ot__half_note(p->dtype);
    if (n && p->named) n->axes = p->named;
    else if (n && ((a && a->axes) || (b && b->axes)) && ot__axes_infer(n))
        return NULL;
    return n;
}

static ot_node *build_composite(const site *st, ot_node *a, ot_node *b, const ot_args *args);

/* A tree runs on the backend of its leaves (be, the first leaf's); leaves
 * of two backends would be read as one backend's memory, silently. */
static int mixed_backends(const site *st, const ot_backend *x, const ot_backend *y)
{
    /* The names straight from the vtables: ot_backend_name is backend.c's,
     * a layer above the core. */
    const char *nx = x->vt->name, *ny = y->vt->name;
    if (strcmp(nx, ny) == 0)
        return FAIL(st, OT_EBACKEND, "operands read tensors of two different '%s' backends", nx);
    return FAIL(st, OT_EBACKEND, "operand 1 reads tensors of backend '%s', operand 2 of backend '%s'",
                nx, ny);
}

static int dead_operand(const site *st, int i, const ot_node *x)
{
    char msg[OT__DEAD_STRLEN];
    return FAIL(st, OT_ESTATE, "%s", ot__dead_str(i == 1 ? "operand 1" : "operand 2", x, msg));
}

static int check_operands(const site *st, ot_node *a, ot_node *b)
{
    if (ot__node_dead(a)) return dead_operand(st, 1, a);
    if (ot__node_dead(b)) return dead_operand(st, 2, b);
    int arity = ot__arity_of(st->op);
    /* Naming the good operand's shape tells which call of several is meant. */
    char sh[OT__SHAPE_STRLEN];
    if (arity == 2 && !a && b)
        return FAIL(st, OT_ENULL, "operand 1 is NULL (operand 2 is %s %s)",
                    ot__shape_str(&b->shape, sh), ot_dtype_name((ot_dtype)b->dtype));
    if (arity == 2 && a && !b)
        return FAIL(st, OT_ENULL, "operand 2 is NULL (operand 1 is %s %s)",
                    ot__shape_str(&a->shape, sh), ot_dtype_name((ot_dtype)a->dtype));
    if (arity >= 1 && !a) return FAIL(st, OT_ENULL, "operand 1 is NULL");
    if (arity == 2 && !b) return FAIL(st, OT_ENULL, "operand 2 is NULL");
    if ((arity < 2 && b) || (arity < 1 && a))
        return FAIL(st, OT_EINVAL, "takes %d operand%s", arity, arity == 1 ? "" : "s");
    if (a && b && a->be && b->be && a->be != b->be) return mixed_backends(st, a->be, b->be);
    return 0;
}

/* Every result shape passes the checks of a created tensor: operands that
 * are fine alone can broadcast or multiply into a result too big to
 * address, and rand and onehot take their dims from arguments. */
static int check_result(const site *st, const ot_node *a, const ot_node *b, const proto *p)
{
    char msg[256], sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    int code = ot__shape_problem(&p->shape, p->dtype, msg, sizeof msg);
    if (!code) return 0;
    if (!a) return FAIL(st, code, "%s", msg);
    if (!b) return FAIL(st, code, "%s (operand %s)", msg, ot__shape_str(&a->shape, sa));
    return FAIL(st, code, "%s (operands %s and %s)", msg, ot__shape_str(&a->shape, sa),
                ot__shape_str(&b->shape, sb));
}

/* The common build, an elementwise op without arguments on operands of one
 * shape and dtype, neither a weak constant: the general inference's result
 * is the operand's shape and the op's dtype rule, and the only check left
 * is the size, when the rule widens the dtype (i32 to f64). W8 builds four
 * such nodes per call, and the general path cost ~160 instructions each. */
static bool is_plain(const site *st, int kind, const ot_node *a, const ot_node *b, ot_dtype *dt)
{
    if (kind != OT_KIND_UNARY && kind != OT_KIND_BINARY) return false;
    if (a->weak || (b && (b->weak || b->dtype != a->dtype || !ot__shape_eq(&a->shape, &b->shape))))
        return false;
    if (a->axes || (b && b->axes)) return false;   /* names: ot__axes_infer, or align */
    *dt = apply_flags(st->op, (ot_dtype)a->dtype);
    char msg[256];   /* only a widening (to f64) can make the size too big */
    return *dt != OT_F64 || a->dtype == OT_F64 ||
           /* else the general path reports it */
           !ot__shape_problem(&a->shape, *dt, msg, sizeof msg);
}

/* Nonzero while ot__build_positional builds: operands broadcast by
 * position whatever their names. */
static _Thread_local int positional;

ot_node *ot__build_positional(ot_op op, ot_node *a, ot_node *b, const ot_args *args,
                              const char *file, int line)
{
    positional++;
    ot_node *n = ot_build_at(op, a, b, args, file, line);
    positional--;
    return n;
}

ot_node *ot_build_at(ot_op op, ot_node *a, ot_node *b, const ot_args *args,
                     const char *file, int line)
{
    bool builtin = op >= 0 && op < OT_OP_COUNT;
    site st = {op, file, line, builtin ? NULL : ot__custom_of_op(op), a, b};
    if (!builtin && !st.custom) {
        ot__err(OT_EINVAL, file, line, "build", "unknown op %d", (int)op);
        return NULL;
    }
    if (check_operands(&st, a, b)) return NULL;
    /* custom1 and custom2 stand for registered ops, and build nothing:
     * operands are checked as for any op first. */
    bool placeholder = builtin && (ot__flags_of(op) & OT_FLAG_CUSTOM);
    int kind = ot__kind_of(op);
    ot_dtype plain_dt;
    if (!args && !placeholder && is_plain(&st, kind, a, b, &plain_dt))
        return op_node(&st, a, b, &a->shape, plain_dt, false, NULL);
    proto p;
    ot__clear(&p, sizeof p);
    normalise_args(&p, args);
    int rc = 0;
    switch (kind) {
    case OT_KIND_UNARY: rc = ot__infer_elementwise(&st, a, NULL, &p); break;
    case OT_KIND_BINARY:
        if (a->axes && b->axes && a->axes != b->axes && !positional &&
            ot__axes_align(ot_op_name(op), file, line, &a, &b, &p.named))
            return NULL;
        rc = ot__infer_elementwise(&st, a, b, &p);
        if (!rc && a->weak != b->weak) {
            ot_node **w = a->weak ? &a : &b;
            if (!(*w = coerce_weak(&st, *w, p.common))) return NULL;
        }
        break;
    case OT_KIND_REDUCE: rc = ot__infer_reduce(&st, a, &p); break;
    case OT_KIND_DOT: rc = ot__infer_dot(&st, a, b, &p); break;
    case OT_KIND_SHAPE:
        rc = op == OT_OP_SLICE     ? ot__infer_slice(&st, a, &p)
             : op == OT_OP_RESHAPE ? ot__infer_reshape(&st, a, &p)
                                   : ot__infer_transpose(&st, a, &p);
        break;
    case OT_KIND_SPECIAL:
        rc = st.custom ? ot__infer_struct(&st, &a, &b, &p) : ot__infer_special(&st, a, &p);
        break;
    case OT_KIND_CONV:
        rc = ot__is_pool(op)    ? ot__infer_pool(&st, a, b, &p)
             : ot__is_index(op) ? ot__infer_index(&st, &a, &b, &p)
             : ot__is_attn(op)  ? ot__infer_attn(&st, a, b, &p)
                                : ot__infer_conv(&st, a, b, &p);
        break;
    default: return build_composite(&st, a, b, &p.args);
    }
    if (!rc) rc = check_result(&st, a, b, &p);
    if (!rc && placeholder)
        rc = FAIL(&st, OT_EINVAL, "stands for ops registered with ot_op_register: build with "
                                  "ot_apply and the op it returned");
    return rc ? NULL : make_node(&st, a, b, &p);
}

/* ---- composites ---------------------------------------------------------- */

/* Builder shorthands that carry the composite's call site, so an error inside
 * an expansion still points at the user's line. */
static ot_node *B(const site *st, ot_op op, ot_node *a, ot_node *b)
{
    return ot_build_at(op, a, b, NULL, st->file, st->line);
}
static ot_node *R(const site *st, ot_op op, ot_node *a, int axis, bool keepdims)
{
    ot_args r = {.axis = axis, .keepdims = keepdims};
    return ot_build_at(op, a, NULL, &r, st->file, st->line);
}

static int64_t reduced_count(const ot_node *x, int axis)
{
    return axis == OT_AXIS_ALL ? ot__numel(&x->shape) : x->shape.dims[axis];
}

/* The mean of x along axis (keepdims) as m1 + mean(x - m1), m1 the plain
 * mean: exact for constant data (x - m1 is exact, its mean's error is of
 * order n^2 eps^2 and vanishes in the addition), where a plain sum's
 * rounding leaves var and std of constant data tiny but nonzero on one
 * backend and 0 on another, and a function singular at std = 0 (log, 1/x)
 * finite on one and inf or NaN on the other. */
ot_node *ot__mean_refined(ot_node *x, int axis, const char *file, int line)
{
    ot_args r = {.axis = axis, .keepdims = true};
    ot_node *m1 = ot_build_at(OT_OP_MEAN, x, NULL, &r, file, line);
    ot_node *dx = ot_build_at(OT_OP_SUB, x, m1, NULL, file, line);
    return ot_build_at(OT_OP_ADD, m1, ot_build_at(OT_OP_MEAN, dx, NULL, &r, file, line), NULL,
                       file, line);
}

static ot_node *expand_var(const site *st, ot_node *x, const ot_args *g)
{
    ot_node *m = ot__mean_refined(x, g->axis, st->file, st->line);
    ot_node *ss = R(st, OT_OP_SUM, B(st, OT_OP_SQR, B(st, OT_OP_SUB, x, m), NULL), g->axis,
                    g->keepdims);
    if (!ss) return NULL;
    int64_t dof = reduced_count(x, g->axis) - g->ddof;  /* NumPy: max(n - ddof, 0) */
    return B(st, OT_OP_DIV, ss, ot_const((double)(dof > 0 ? dof : 0)));
}

/* Whether x has no element along axis (all axes: none at all); an axis
 * out of range is not, so that the reduction reports it. */
static bool empty_along(const ot_node *x, int axis)
{
    if (axis == OT_AXIS_ALL) return ot__numel(&x->shape) == 0;
    int a = axis < 0 ? axis + x->shape.ndim : axis;
    return a >= 0 && a < x->shape.ndim && x->shape.dims[a] == 0;
}

/* Over an empty axis the result is empty (PyTorch's): no max to shift by,
 * whose zero-size reduction has no identity. */
static ot_node *expand_softmax(const site *st, ot_node *x, const ot_args *g, bool log_form)
{
    ot_node *shifted =
        empty_along(x, g->axis) ? x : B(st, OT_OP_SUB, x, R(st, OT_OP_MAX, x, g->axis, true));
    if (!shifted) return NULL;
    if (log_form) {
        ot_node *lse = B(st, OT_OP_LOG, R(st, OT_OP_SUM, B(st, OT_OP_EXP, shifted, NULL),
                                           g->axis, true), NULL);
        return B(st, OT_OP_SUB, shifted, lse);
    }
    ot_node *e = B(st, OT_OP_EXP, shifted, NULL);
    return B(st, OT_OP_DIV, e, R(st, OT_OP_SUM, e, g->axis, true));
}

/* The floor of cross_entropy's log p of a softmax: the lowest finite f16,
 * which every float dtype holds (-FLT_MAX rounded to -inf in f16 and
 * bf16, so 0 * -inf made a 16-bit loss NaN, and the cpu backend, which
 * then rebuilt a 16-bit composite in f32, kept it finite: fuzz seeds 3030
 * and 4242), and far below the log of any probability a float holds (f64's
 * least is e^-745): it changes only losses of logit gaps past 65504. */
#define XENT_LOG_FLOOR (-65504.0)

/* log p for cross_entropy: of a softmax, its stable log form, exact for
 * logits of +-1000 (safelog would cap the loss at 50); floored at
 * XENT_LOG_FLOOR so that a target of 0 times the log of a zero probability
 * stays 0. Any other p goes through safelog. */
static ot_node *log_probs(const site *st, ot_node *p)
{
    if (p->tag != OT_OP_SOFTMAX) return B(st, OT_OP_SAFELOG, p, NULL);
    return B(st, OT_OP_MAXIMUM, expand_softmax(st, p->tag_a, &p->args, true),
             ot_const(XENT_LOG_FLOOR));
}

static ot_node *expand(const site *st, ot_node *a, ot_node *b, const ot_args *g)
{
    switch (st->op) {
    case OT_OP_VAR: return expand_var(st, a, g);
    case OT_OP_STD: return B(st, OT_OP_SQRT, expand_var(st, a, g), NULL);
    case OT_OP_CLIP:
        return B(st, OT_OP_MINIMUM, B(st, OT_OP_MAXIMUM, a, bound_const(g->lo)), bound_const(g->hi));
    case OT_OP_SOFTMAX: return expand_softmax(st, a, g, false);
    case OT_OP_LOGSOFTMAX: return expand_softmax(st, a, g, true);
    case OT_OP_CROSS_ENTROPY:
        return B(st, OT_OP_NEG, R(st, OT_OP_SUM, B(st, OT_OP_MUL, b, log_probs(st, a)), g->axis,
                                  g->keepdims), NULL);
    default: /* OT_OP_SQUARED_L2 */
        return R(st, OT_OP_SUM, B(st, OT_OP_SQR, a, NULL), g->axis, g->keepdims);
    }
}

/* Expands a composite into ordinary ops and tags the root, which also keeps
 * the composite's own operands and attributes for autodiff and printing. */
static ot_node *build_composite(const site *st, ot_node *a, ot_node *b, const ot_args *args)
{
    ot_args g = *args;
    if (st->op != OT_OP_CLIP) {
        int ndim = a->shape.ndim;
        ot_shape shape = a->shape;
        if (st->op == OT_OP_CROSS_ENTROPY) {
            ot_shape s;
            if (!ot__broadcast(&a->shape, &b->shape, &s, NULL)) {
                char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
                FAIL(st, OT_ESHAPE, "shapes %s and %s cannot be broadcast",
                     ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb));
                return NULL;
            }
            ndim = s.ndim;
            shape = s;
        }
        if (ot__norm_axis(st, g.axis, ndim, &shape, &g.axis)) return NULL;
    }
    ot_node *root = expand(st, a, b, &g);
    if (!root) return NULL;
    /* The root is new and not yet visible to anyone else, so it may still be
     * annotated; a root shared with another tree would be a bug. */
    OT_ASSERT(ot__node_fresh(root));
    root->tag = (int8_t)st->op;
    root->tag_a = ot__node_hold_operand(root, a, OT__OP_TAG_A);
    root->tag_b = ot__node_hold_operand(root, b, OT__OP_TAG_B);
    ot_args ra = root->args;
    if (ot_op_kind(root->op) != OT_KIND_REDUCE) ra = g;
    else ra.ddof = g.ddof;
    ot__node_set_args(root, &ra);
    ot__node_digest(root);   /* its args changed */
    return root;
}

/* ---- accessors ----------------------------------------------------------- */

int ot_node_kind(const ot_node *n) { return n ? n->kind : 0; }
ot_op ot_node_op(const ot_node *n) { return n ? (ot_op)ot__node_op(n) : OT_OP_NONE; }
ot_op ot_node_tag(const ot_node *n) { return n ? (ot_op)n->tag : OT_OP_NONE; }
ot_dtype ot_node_dtype(const ot_node *n) { return n ? (ot_dtype)n->dtype : OT_DTYPE_DEFAULT; }
double ot_node_value(const ot_node *n) { return n ? n->value : 0.0; }
const char *ot_node_file(const ot_node *n) { return n ? n->file : NULL; }
int ot_node_line(const ot_node *n) { return n ? n->line : 0; }

ot_shape ot_node_shape(const ot_node *n)
{
    ot_shape s = {0};
    return n ? n->shape : s;
}

ot_node *ot_node_child(const ot_node *n, int i)
{
    if (!n) return NULL;
    return i == 0 ? n->a : i == 1 ? n->b : NULL;
}

ot_tensor *ot_node_tensor(const ot_node *n)
{
    return n && n->kind == OT_NODE_LEAF ? ot__leaf_tensor(n) : NULL;
}

ot_args ot_node_args(const ot_node *n)
{
    ot_args a = {.axis = OT_AXIS_ALL};
    return n ? n->args : a;
}

ot_node *ot__alike(const ot_node *x, ot_node **g, const char *file, int line)
{
    if (!*g || x->dtype == (*g)->dtype) return (ot_node *)x;
    ot_args args = {.dtype = x->dtype == OT_F64 || (*g)->dtype == OT_F64 ? OT_F64 : OT_F32};
    if ((*g)->dtype != args.dtype) *g = ot_build_at(OT_OP_CAST, *g, NULL, &args, file, line);
    if (x->dtype == args.dtype) return (ot_node *)x;
    return ot_build_at(OT_OP_CAST, (ot_node *)x, NULL, &args, file, line);
}
