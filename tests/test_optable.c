/*
 * test_optable.c - the op table (src/core/ops.def) against everything generated
 * from it: for every op, the lookup round trip, the private row, ref.c's
 * function, each ISA's kernel table per dtype where the op's kind and dtype
 * rule call for one (all four tables, whether or not this CPU runs them:
 * only their contents are read), the vector functions of generated code,
 * the autodiff rule and the print form. A row whose columns promise what a
 * table lacks fails here by name, not as a NULL call somewhere else.
 * Also ot__kernels_check, the executor's guard against a missing entry.
 */
#include "test.h"
#include "internal.h"
#include "ops.h"
#include "kernels/kernels.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

static const ot_kernels *const tables[] = {
    &ot__kernels_scalar,
#if OT_KERNELS_X86
    &ot__kernels_sse2, &ot__kernels_avx2, &ot__kernels_avx512,
#endif
#if OT_KERNELS_ARM64
    &ot__kernels_neon,
#endif
};
#define NTABLES ((int)(sizeof tables / sizeof tables[0]))
static const char *const kdname[] = {"f32", "f64", "i32"};

/* The placeholder rows of registered ops (vec USER: custom1, custom2,
 * elementwise, and custom_struct) have no entry of their own in any table:
 * their nodes carry the functions, which every table's user loop (or, for
 * custom_struct, the op's own kernel) runs. */
static bool placeholder(const ot_opinfo *o) { return o->vec == OT__VEC_USER; }

/* An elementwise op that the tables compute themselves. */
static bool elementwise(const ot_opinfo *o)
{
    return (o->kind == OT_KIND_UNARY || o->kind == OT_KIND_BINARY) && !placeholder(o);
}

/* A failure naming the op: MISSING("what %s", name, ...), format first. */
#define MISSING(...) test__fail(__FILE__, __LINE__, "op '%s': " __VA_ARGS__)

TEST(optable_rows_and_lookup)
{
    for (int op = 0; op < OT_OP_COUNT; op++) {
        const ot_opinfo *o = ot__op(op);
        if (!o) {
            test__fail(__FILE__, __LINE__, "op %d has no row", op);
            continue;
        }
        CHECK_STR(ot_op_name((ot_op)op), o->name);
        CHECK_INT(ot_op_lookup(o->name), op);
        CHECK_INT(ot_op_arity((ot_op)op), o->arity);
        CHECK_INT(ot_op_kind((ot_op)op), o->kind);
        CHECK_INT(ot_op_flags((ot_op)op), o->flags);
        CHECK_INT(!(o->flags & OT_FLAG_NODIFF), o->grad);
        CHECK(o->cost == OT__COST_CHEAP || o->cost == OT__COST_DIVROOT ||
              o->cost == OT__COST_TRANS);
        CHECK_INT(ot__op_cost(op), o->cost);
        /* Elementwise rows say how every backend computes them; the others
         * must not (their kernels are structural). */
        CHECK_INT(elementwise(o) || placeholder(o), o->vec != OT__VEC_NONE);
        CHECK_INT(elementwise(o) || placeholder(o), o->jit != OT__JIT_NONE);
        CHECK_INT(placeholder(o), o->jit == OT__JIT_USER);
        CHECK_INT(placeholder(o), (o->flags & OT_FLAG_CUSTOM) != 0);
        if (o->kind == OT_KIND_UNARY) CHECK_INT(o->arity, 1);
        if (o->kind == OT_KIND_BINARY) CHECK_INT(o->arity, 2);
        if (o->sym) CHECK_INT(o->kind, OT_KIND_BINARY);
    }
    CHECK(ot__op(OT_OP_COUNT) == NULL);
    CHECK(ot__op(OT_OP_NONE) == NULL);
}

TEST(optable_ref_functions)
{
    for (int op = 0; op < OT_OP_COUNT; op++) {
        const ot_opinfo *o = ot__op(op);
        bool un = elementwise(o) && o->kind == OT_KIND_UNARY;
        bool bin = elementwise(o) && o->kind == OT_KIND_BINARY;
        if ((ot__ref_fn1(op) != NULL) != un) MISSING("ref.c unary function", o->name);
        if ((ot__ref_fn2(op) != NULL) != bin) MISSING("ref.c binary function", o->name);
    }
}

/* Which kernel dtypes an elementwise op has: f32 and f64, and i32 where its
 * dtype rule keeps i32 operands i32. */
static bool has_kd(const ot_opinfo *o, int kd)
{
    return kd < OT_KD_I32 || o->i32;
}

static void check_kernels(const ot_kernels *k, int op, const ot_opinfo *o)
{
    for (int kd = 0; kd < OT_KD_COUNT; kd++) {
        bool want = elementwise(o) && has_kd(o, kd);
        for (int acc = 0; acc < 2; acc++) {
            bool got = k->unary[acc][op][kd] != NULL;
            if (got != (want && o->kind == OT_KIND_UNARY))
                test__fail(__FILE__, __LINE__, "op '%s': %s %s kernel u%d on isa '%s'",
                           o->name, got ? "unexpected" : "no", kdname[kd], acc ? 35 : 10, ot__isa_name(k->isa));
        }
        for (int form = 0; form < 3; form++) {
            bool got = k->binary[op][kd][form] != NULL;
            if (got != (want && o->kind == OT_KIND_BINARY))
                test__fail(__FILE__, __LINE__, "op '%s': %s %s kernel form %d on isa '%s'",
                           o->name, got ? "unexpected" : "no", kdname[kd], form, ot__isa_name(k->isa));
        }
    }
}

TEST(optable_kernel_tables)
{
    for (int t = 0; t < NTABLES; t++) {
        for (int op = 0; op < OT_OP_COUNT; op++) check_kernels(tables[t], op, ot__op(op));
        CHECK(tables[t]->user != NULL);
    }
}

/* Generated code calls vfn1/vfn2 for CALL rows and f32 sig (the library's
 * own), the base's function for the other SIG rows; WIDE rows have f64 only (f32 would round twice). Tables without
 * vector functions (scalar, sse2) have none at all. */
static const void *vfn(const ot_kernels *k, int acc, int op, int kd)
{
    return ot__op(op)->kind == OT_KIND_UNARY ? k->vfn1[acc][op][kd] : k->vfn2[op][kd];
}

TEST(optable_jit_functions)
{
    for (int t = 0; t < NTABLES; t++) {
        const ot_kernels *k = tables[t];
        bool has = k->vfn1[0][OT_OP_EXP][0] != NULL;
        for (int op = 0; op < OT_OP_COUNT; op++) {
            const ot_opinfo *o = ot__op(op);
            for (int acc = 0; acc < 2; acc++)
                for (int kd = 0; kd < 2; kd++) {
                    bool want = has && ((o->jit == OT__JIT_CALL &&
                                         (o->vec != OT__VEC_WIDE || kd == OT_KD_F64)) ||
                                        (op == OT_OP_SIG && kd == OT_KD_F32));
                    bool got = elementwise(o) && vfn(k, acc, op, kd) != NULL;
                    if (got != want)
                        test__fail(__FILE__, __LINE__, "op '%s': %s %s vector function u%d on "
                                   "isa '%s'", o->name, got ? "unexpected" : "no", kdname[kd],
                                   acc ? 35 : 10, ot__isa_name(k->isa));
                    if (has && o->jit == OT__JIT_SIG && !vfn(k, acc, o->jit_base, kd))
                        MISSING("its base has no vector function", o->name);
                }
        }
    }
}

TEST(optable_autodiff_rules)
{
    for (int op = 0; op < OT_OP_COUNT; op++) {
        const ot_opinfo *o = ot__op(op);
        if (ot__autodiff_has_rule(op) != o->grad)
            MISSING("%s", o->name, o->grad ? "no gradient rule" : "a rule but OT_FLAG_NODIFF");
    }
}

/* The attrs column: known attributes, each once, in the room ops.h gives;
 * each parses by the name it prints under (an index by none); elementwise
 * ops take none, reductions their axis and keepdims. */
TEST(optable_attributes)
{
    for (int op = 0; op < OT_OP_COUNT; op++) {
        const ot_opinfo *o = ot__op(op);
        unsigned seen = 0;
        int count = 0;
        for (const unsigned char *a = o->attrs; *a; a++, count++) {
            if (*a >= OT__ATTR_COUNT || (seen & 1u << *a)) MISSING("attribute %d", o->name, *a);
            seen |= 1u << *a;
        }
        CHECK(count <= OT__ATTRS_MAX);
        if (elementwise(o) || (placeholder(o) && o->kind != OT_KIND_SPECIAL)) CHECK_INT(count, 0);
        if (placeholder(o) && o->kind == OT_KIND_SPECIAL)   /* custom_struct: a structured op's axis */
            CHECK(count == 1 && ot__op_has_attr(op, OT__ATTR_AXIS));
        if (o->kind == OT_KIND_REDUCE)
            CHECK(ot__op_has_attr(op, OT__ATTR_AXIS) && ot__op_has_attr(op, OT__ATTR_KEEPDIMS));
    }
    for (int id = OT__ATTR_NONE + 1; id < OT__ATTR_COUNT; id++) {
        const ot__attr *at = &ot__attrs[id];
        CHECK(at->name != NULL);
        if (at->type == OT__AT_INDEX) {
            CHECK_INT(ot__attr_lookup(at->name), OT__ATTR_NONE);
            continue;
        }
        int found = ot__attr_lookup(at->name);
        CHECK(found != OT__ATTR_NONE && strcmp(ot__attrs[found].name, at->name) == 0);
        CHECK_INT(ot__attrs[found].off, at->off);
    }
    CHECK_INT(ot__attr_lookup("start"), OT__ATTR_NONE);
    CHECK(!ot__op_has_attr(OT_OP_COUNT, OT__ATTR_AXIS));
}

/* ot_pp writes an elementwise op as its symbol or its name. */
TEST(optable_print_forms)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *x = ot_ones(be, OT_SHAPE(2), OT_F64);
    ot_tensor_set_name(x, "x");
    ot_pool *p = ot_pool_push();
    for (int op = 0; op < OT_OP_COUNT; op++) {
        const ot_opinfo *o = ot__op(op);
        if (!elementwise(o)) continue;
        ot_node *xn = ot_tensor_node(x);
        ot_node *n = ot_build((ot_op)op, xn, o->arity == 2 ? xn : NULL, NULL);
        char *s = n ? test__capture(ot_pp, n) : NULL;
        if (!s || !strstr(s, o->sym ? o->sym : o->name))
            MISSING("ot_pp gives \"%s\"", o->name, s ? s : "(nothing)");
        free(s);
    }
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* ---- ot__kernels_check -------------------------------------------------- */

TEST(optable_kernels_check_names_the_gap)
{
    static ot_kernels fake;
    fake = ot__kernels_scalar;
    fake.unary[0][OT_OP_LOG][OT_KD_F64] = NULL;
    ot_insn insns[] = {
        {.code = OT_I_LOAD, .kd = OT_KD_F64, .dst = 0, .a = -1, .b = -1, .c = -1},
        {.code = OT_I_UNARY, .op = OT_OP_LOG, .kd = OT_KD_F64, .dst = 1, .a = 0, .b = -1, .c = -1},
    };
    ot_kernel k = {.kind = OT_KER_EW, .ninsn = 2, .insns = insns, .nbuf = 2, .result = 1};
    ot_plan p = {.nkernels = 1, .kernels = &k};
    CHECK_INT(ot__kernels_check(&p, &ot__kernels_scalar, 0), 0);
    CHECK_INT(ot__kernels_check(&p, &fake, 1), 0);   /* u35 still has it */
    CHECK_INT(ot__kernels_check(&p, &fake, 0), OT_EUNSUPPORTED);
    CHECK_ERR(OT_EUNSUPPORTED, "op 'log' has no f64 kernel on isa 'scalar'");
    insns[1] = (ot_insn){.code = OT_I_FMA, .op = OT_OP_SUB, .kd = OT_KD_I32, .dst = 1, .a = 0,
                         .b = 0, .c = 0};
    CHECK_INT(ot__kernels_check(&p, &ot__kernels_scalar, 0), OT_EUNSUPPORTED);
    CHECK_ERR(OT_EUNSUPPORTED, "op 'fnma' has no i32 kernel");
}

/* Through a backend: a plan whose table lacks an entry is an error at
 * ot_assign, never a call of NULL (the table swapped through the cpu
 * backend's private state, the test seam). */
TEST(optable_kernels_check_at_assign)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new("cpu", NULL);
    CHECK(be && be->vt == &ot__cpu_vt);
    if (!be || be->vt != &ot__cpu_vt) return;
    ot_cpu *cpu = be->impl;
    static ot_kernels fake;
    fake = *cpu->k;
    fake.unary[0][OT_OP_LOG][OT_KD_F64] = NULL;
    const ot_kernels *real = cpu->k;
    cpu->k = &fake;
    ot_tensor *x = ot_full(be, OT_SHAPE(3), OT_F64, 2.0);
    ot_tensor *y = ot_zeros(be, OT_SHAPE(3), OT_F64);
    CHECK_INT(ot_assign(y, ot_log(x)), OT_EUNSUPPORTED);
    char want[80];
    snprintf(want, sizeof want, "op 'log' has no f64 kernel on isa '%s'", ot__isa_name(fake.isa));
    CHECK_ERR(OT_EUNSUPPORTED, want);
    CHECK_INT(ot_assign(y, ot_exp(x)), 0);   /* other ops still run */
    cpu->k = real;
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* ot_erf, the op added by docs/adding-an-op.md, by its public builder on
 * both backends and every ISA default: values against C's erf (f64 within
 * 2 ulp of it; the special values exact: -0 stays -0, +-inf give +-1, NaN
 * stays NaN), and its gradient 2/sqrt(pi) exp(-x^2) through autodiff. */
TEST(optable_erf_by_its_builder)
{
    const double x[] = {0.0, -0.0, 1e-300, 0.5, -1.25, 3.0, 6.5, INFINITY, -INFINITY, NAN};
    enum { N = sizeof x / sizeof x[0] };
    const char *names[] = {"ref", "cpu"};
    for (int b = 0; b < 2; b++) {
        ot_backend *be = ot_backend_new(names[b], NULL);
        ot_tensor *t = ot_array(be, OT_SHAPE(N), OT_F64, x);
        ot_tensor *y = ot_empty(be, OT_SHAPE(N), OT_F64), *g = ot_empty(be, OT_SHAPE(N), OT_F64);
        ot_pool *pool = ot_pool_push();
        ot_node *e = ot_erf(t);
        CHECK_INT(ot_assign(y, e), 0);
        ot_autodiff *ad = ot_autodiff_new(e, NULL);
        CHECK_INT(ot_assign(g, ot_autodiff_grad(ad, t)), 0);
        ot_autodiff_free(ad);
        ot_pool_pop(pool);
        double got[N], dg[N];
        CHECK_INT(ot_get(y, got), 0);
        CHECK_INT(ot_get(g, dg), 0);
        for (int i = 0; i < N; i++) {
            double want = erf(x[i]), dwant = 1.1283791670955126 * exp(-x[i] * x[i]);   /* 2/sqrt(pi) */
            if (isnan(want)) CHECK(isnan(got[i]) && isnan(dg[i]));
            else if (!isfinite(x[i]) || x[i] == 0) CHECK(got[i] == want && signbit(got[i]) == signbit(want));
            else CHECK(fabs(got[i] - want) <= 2 * DBL_EPSILON * fabs(want));
            if (!isnan(want)) CHECK(fabs(dg[i] - dwant) <= 4 * DBL_EPSILON * dwant);
        }
        ot_tensor_free(t);
        ot_tensor_free(y);
        ot_tensor_free(g);
        ot_backend_free(be);
    }
}
