/*
 * jit_math.c - the math steps of generated code: the library's own f32
 * exp, log and safelog u10 and tanh u10 (own_math.inc's f32_exp_u10,
 * f32_log_u10, f32_tanh_u10) and SLEEF 3.5's log, safelog and tanh u35
 * instruction for instruction, their
 * constants (fn_bits) and which of them live in registers
 * (place_constants), sig2 and f64 sig as their exp with the select and divide inline,
 * and the selects, compares and arithmetic that every other inline op is
 * (relu, recip, rint, finite, sgn, eq ... ge, minimum, maximum, add ...
 * fma). Results are bitwise those of the tile kernels of the same table.
 * Layer cpu/jit.
 */
#include "jit.h"

#if OT_JIT_X86

/* SLEEF's expf (now tanhf u35's expm1, and the own expf's ln 2 and
 * bounds): 1/ln 2; ln 2 in two parts, negated (Cody and Waite); the
 * reduced argument's polynomial from its highest coefficient to 1/2; -104,
 * below which the result is 0; inf.
 * logf: 4/3 (the mantissa's range is [3/4, 3/2)); 128, the exponent of
 * inf; ln 2 in two parts; -1; the polynomial in the square of (m-1)/(m+1);
 * vfixupimmps's table for 0, negatives, inf and NaN (AVX-512); for AVX2,
 * the smallest normal, 2^64 for scaling denormals, the exponent mask, the
 * exponent biases for both, the NaN and -inf. tanh u10 (H_): its odd
 * polynomial, its exp's, the cut 0.97 between them, the cap 20 on 2|x|,
 * 1.5 * 2^23 (and expf's 1/ln 2 and ln 2); tanhf u35's bound past which it
 * is +-1 and 2 (its expm1 takes expf's polynomial, its 1 and -1 logf's).
 * logf u35: its polynomial in y^2 (then 2), 128 ln 2 (e ln 2 where
 * vgetexpps gives e = inf) and its vfixupimmps table. safelog's floor,
 * exp(-50) in f32 (tile.inc's K_EXPM50). The own expf (X_): 89, its upper
 * clamp (the lower is E_LO, -104), 2^-64 (2^64 is L_2P64) and the sum of
 * both's bits; its polynomial is tanh's exp's (H_Q). The own logf u10
 * (N_): P's coefficients (k_log_p, the constant first), sqrt(1/2)'s bits,
 * 2^23 and -23 (denormals scaled), ln 2 in two parts (positive, as its
 * FMAs take them), -1/2, and vfixupimmps's table for it (0 -> -inf,
 * inf -> inf, the rest kept: AVX-512); it shares logf's FLT_MIN, NaN and
 * -inf and expf's inf. */
const uint32_t ot__jit_fn_bits[NFNK] = {
    0x3FB8AA3B, 0xBF317200, 0xB5BFBE8E, 0x39502BDA, 0x3AB696C9, 0x3C0888A6, 0x3D2AAA7A,
    0x3E2AAAAB, 0x3F000000, 0xC2D00000, 0x7F800000,
    0x3FAAAAAB, 0x3F317218, 0xBF800000, 0x00800000, 0x5F800000, 0x000000FF, 0xFFFFFF41, 0xFFFFFF81,
    0x7FC00000, 0xFF800000, 0xBEAAAAA2, 0x3E0886A2, 0xBD5CC52C, 0x3CB08A97, 0xBC03F07C,
    0x3B1C902B, 0xB9CA986A, 0x3EFFFFFE, 0x3E2AAA49, 0x3D2AAC5F, 0x3C091CF4, 0x3AB51FF3,
    0x3F7851EC, 0x41A00000, 0x4B400000, 0x410AA123, 0x40000000, 0x3E750690, 0x3E920364, 0x3ECCCD92, 0x3F2AAAAB, 0x42B17218,
    0x00500000, 0x1B692BEB, 0x42B20000, 0x1F800000, 0x7F000000, 0x00000001, 0x00007FFF,
    0x00000040, 0x3EAAAAAA, 0xBE800113, 0x3E4CD00E, 0xBE2A3945, 0x3E116C97, 0xBE06C121,
    0x3E02AF63, 0xBD9C64EF, 0x3F3504F3, 0x4B000000, 0xC1B80000, 0x3F317200, 0x35BFBE8E,
    0xBF000000, 0x00500400};

/* The constants each inline function reads, in the order that they get
 * the registers zmm16-31 (the rest are read from the frame); AVX2's log
 * u35 reads log_vex_consts too, log u10 log_fix_consts under AVX-512 and
 * log_sel_consts under AVX2. */
static const int8_t exp_consts[] = {H_Q0, H_Q1, H_Q2, H_Q3, H_Q4, E_L2U, E_L2L, E_RLN2, H_MAGIC,
                                    E_LO, X_HI, F_ONE};
static const int8_t exp_vex_consts[] = {X_BIAS, L_2P64, X_M64};
static const int8_t log_consts[] = {N_P6, N_P5, N_P4, N_P3, N_P2, N_P1, N_P0, N_P7, N_SQRTH,
                                    N_LN2HI, N_LN2LO, N_MHALF, F_ONE, L_FLTMIN, N_2P23, N_M23,
                                    L_QNAN};
static const int8_t log_fix_consts[] = {N_FIX};
static const int8_t log_sel_consts[] = {E_INF, L_NINF};
static const int8_t log_vex_consts[] = {L_FLTMIN, L_2P64, L_FF, L_BIASD, L_BIASN, L_QNAN, L_NINF};
static const int8_t tanh_consts[] = {H_P5, H_P4, H_P3, H_P2, H_P1, H_P0, H_Q3, H_Q2, H_Q1, H_Q0,
                                     E_L2U, E_L2L, H_MAGIC, F_ONE, H_CAP, H_CUT, H_P6, H_Q4,
                                     E_RLN2, T_TWO};
static const int8_t log35_consts[] = {M_P1, M_P2, M_P3, T_TWO, L_M1, F_ONE, L_LN2HI, L_4_3,
                                      M_P0, M_128LN2, M_FIX, E_INF};
static const int8_t safelog_consts[] = {S_FLOOR};
static const int8_t tanh35_consts[] = {E_C1, E_C3, E_C5, E_L2U, E_L2L, E_RLN2, E_C0, E_C2, E_C4,
                                       F_ONE, L_M1, T_TWO, T_BIG};

/* The constants the inline functions read (fn_used: only those are
 * written per call), and registers zmm16-31 for them in the lists' order
 * (exp_consts', log_consts', tanh_consts' ...) where EVEX code calls
 * nothing (a call clobbers them): the rest stay in the frame. */
void ot__jit_place_constants(regs *r)
{
    enum { NLIST = 10 };
    const int8_t *lists[NLIST] = {exp_consts,     log_consts,     log_fix_consts, tanh_consts,
                                  log35_consts,   tanh35_consts,  safelog_consts, log_vex_consts,
                                  log_sel_consts, exp_vex_consts};
    const int sizes[NLIST] = {sizeof exp_consts,     sizeof log_consts,     sizeof log_fix_consts,
                              sizeof tanh_consts,    sizeof log35_consts,   sizeof tanh35_consts,
                              sizeof safelog_consts, sizeof log_vex_consts, sizeof log_sel_consts,
                              sizeof exp_vex_consts};
    unsigned f = r->fns;
    bool evex = r->c->evex, own_log = f & (1u << FN_LOG | 1u << FN_SAFELOG);
    bool log35 = f & (1u << FN_LOG35 | 1u << FN_SAFELOG35);
    const bool used[NLIST] = {f >> FN_EXP & 1,      own_log,
                              own_log && evex,      f >> FN_TANH & 1,
                              log35,                f >> FN_TANH35 & 1,
                              f & (1u << FN_SAFELOG | 1u << FN_SAFELOG35),
                              log35 && !evex,       own_log && !evex,
                              (f >> FN_EXP & 1) && !evex};
    bool regs = evex && !r->calls;
    int next = 16;
    memset(r->fn_used, 0, sizeof r->fn_used);
    memset(r->creg, 0, sizeof r->creg);
    for (int l = 0; l < NLIST; l++)
        for (int i = 0; i < sizes[l] && used[l]; i++) {
            int e = lists[l][i];
            if (e < NFNK) r->fn_used[e] = true;
            if (regs && !r->creg[e] && next < 16 + NCREG) r->creg[e] = (int8_t)next++;
        }
}

/* exp of register x into t[0] (x is kept, t[1..4] clobbered): the
 * library's own, own_math.inc's f32_exp_u10 step for step with its operand
 * orders (its comment has the design), so the bits are the table's own,
 * NaN payloads included (tests/test_jit.c compares every f32). x clamped
 * to [-104, 89] with x as the second operand of vmaxps and vminps (NaN
 * stays); t = x / ln 2 + 1.5 * 2^23, k = t - 1.5 * 2^23; r1 = x - k hi,
 * r2 = -k lo; h = 1 + r1, l = r1 - (h - 1); tail = r^2 Q(r) + (l + r2),
 * r = r1 + r2; then EVEX: vscalefps(h + tail, k); VEX: p = 2^(k-a) from
 * t's bits, s = 2^a (a = +-64 by x's sign), (h p + p tail) s. Inline, the
 * loop calls nothing: no spills around a call, constants stay in
 * registers or the frame. */
int ot__jit_exp_steps(regs *r, int x, const int t[5])
{
    enum { ADD = 0x58, MUL = 0x59, SUB = 0x5C, MIN = 0x5D, MAX = 0x5F };
    code *c = r->c;
    int a = t[0], b = t[1], k = t[2], d = t[3], h = t[4];
    ot__jit_load_const(r, b, E_LO, false);
    ot__x86_vrr(c, 1, 0, 0, MAX, b, b, x);                                    /* max(-104, x) */
    ot__jit_load_const(r, a, X_HI, false);
    ot__x86_vrr(c, 1, 0, 0, MIN, a, a, b);                                    /* min(89, .) */
    ot__jit_load_const(r, b, E_RLN2, false);
    ot__jit_vrc(r, 2, 1, 0xA8, b, a, H_MAGIC);                                /* t = x / ln 2 + M */
    ot__jit_vrc(r, 1, 0, SUB, k, b, H_MAGIC);                                 /* k = t - M */
    ot__jit_vrc(r, 2, 1, 0xB8, a, k, E_L2U);                                  /* r1 = x - k hi */
    ot__jit_vrc(r, 1, 0, MUL, d, k, E_L2L);                                   /* r2 = -k lo */
    if (!c->evex) {
        ot__jit_shift_to(r, 6, k, b, 23);                                     /* t's bits << 23 */
        ot__jit_vrc(r, 1, 1, 0xFE, k, k, X_BIAS);                             /* vpaddd */
    }
    ot__jit_vrc(r, 1, 0, ADD, h, a, F_ONE);                                   /* h = r1 + 1 */
    ot__jit_vrc(r, 1, 0, SUB, b, h, F_ONE);
    ot__x86_vrr(c, 1, 0, 0, SUB, b, a, b);                                    /* l = r1 - (h - 1) */
    ot__x86_vrr(c, 1, 0, 0, ADD, b, b, d);                                    /* l + r2 */
    ot__x86_vrr(c, 1, 0, 0, ADD, a, a, d);                                    /* r = r1 + r2 */
    ot__jit_load_const(r, d, H_Q4, false);
    for (int e = H_Q3; e >= H_Q0; e--) ot__jit_vrc(r, 2, 1, 0xA8, d, a, e);  /* q r + c */
    ot__x86_vrr(c, 1, 0, 0, MUL, a, a, a);
    ot__x86_vrr(c, 2, 1, 0, 0xB8, b, a, d);                                   /* tail = r^2 q + . */
    if (c->evex) {
        ot__x86_vrr(c, 1, 0, 0, ADD, h, h, b);
        ot__x86_vrr(c, 2, 1, 0, 0x2C, a, h, k);                               /* vscalefps */
        return a;
    }
    ot__jit_load_const(r, d, L_2P64, false);
    ot__jit_vrc(r, 3, 1, 0x4A, d, d, X_M64);                                  /* s = x < 0 ? 2^-64 */
    ot__x86_put1(c, (uint8_t)(x << 4));                                       /*     : 2^64 */
    ot__x86_vrr(c, 1, 1, 0, 0xFA, k, k, d);                                   /* p: vpsubd */
    ot__x86_vrr(c, 1, 0, 0, MUL, a, k, b);                                    /* p tail */
    ot__x86_vrr(c, 2, 1, 0, 0xB8, a, h, k);                                   /* h p + p tail */
    ot__x86_vrr(c, 1, 0, 0, MUL, a, a, d);
    return a;
}

/* dst = a op b for add (0x58), mul (0x59), sub (0x5C), div (0x5E): f32. */
static void arith(regs *r, uint8_t op, int dst, int a, int b)
{
    ot__x86_vrr(r->c, 1, 0, 0, op, dst, a, b);
}

/* FMA forms on f32 registers: 213 dst = vvvv*dst + rm, 231 dst =
 * vvvv*rm + dst; the opcodes name fmadd, fmsub and fnmadd of each. */
enum { FMADD213 = 0xA8, FMSUB213 = 0xAA, FNMADD213 = 0xAC, FMADD231 = 0xB8, FNMADD231 = 0xBC };
static void fma3(regs *r, uint8_t op, int dst, int vvvv, int rm)
{
    ot__x86_vrr(r->c, 2, 1, 0, op, dst, vvvv, rm);
}

/* AVX2's logf (u10 and u35 alike) up to e and m: x < FLT_MIN scaled by
 * 2^64 into d, e (an int, its bias 127 or 127 + 64) in t[0] and m in
 * [3/4, 3/2) in t[1], both from d's bits; t[2], t[4], t[5] clobbered. */
static void log_vex_split(regs *r, int x, int d, const int t[6])
{
    code *c = r->c;
    ot__jit_vrc(r, 1, 0, 0xC2, t[0], x, L_FLTMIN);                            /* x < FLT_MIN */
    ot__x86_put1(c, 1);
    ot__jit_vrc(r, 1, 0, 0x59, t[1], x, L_2P64);
    ot__x86_vrr(c, 3, 1, 0, 0x4A, d, x, t[1]);                          /* d: x, denormals scaled */
    ot__x86_put1(c, (uint8_t)(t[0] << 4));
    ot__jit_vrc(r, 1, 0, 0x59, t[1], d, L_4_3);
    ot__jit_shift_to(r, 2, t[1], t[1], 23);
    ot__jit_vrc(r, 1, 1, 0xDB, t[1], t[1], L_FF);                             /* biased exponent */
    ot__jit_shift_to(r, 6, t[2], t[1], 23);
    ot__x86_vrr(c, 1, 1, 0, 0xFA, t[2], d, t[2]);
    ot__jit_load_const(r, t[4], L_BIASD, false);
    ot__jit_load_const(r, t[5], L_BIASN, false);
    ot__x86_vrr(c, 3, 1, 0, 0x4A, t[0], t[5], t[4]);                          /* the bias */
    ot__x86_put1(c, (uint8_t)(t[0] << 4));
    ot__x86_vrr(c, 1, 1, 0, 0xFE, t[0], t[1], t[0]);                          /* e */
    ot__jit_vrc(r, 1, 1, 0xFE, t[1], t[2], F_ONE);                            /* m */
}

/* AVX2's logf's last selects on res: inf for d = inf, NaN below 0 and for
 * NaN, -inf for 0 (d: the argument as log_vex_split scaled it; m and z
 * clobbered). */
static void log_vex_specials(regs *r, int res, int d, int m, int z)
{
    code *c = r->c;
    ot__jit_vrc(r, 1, 0, 0xC2, m, d, E_INF);                                  /* d == inf */
    ot__x86_put1(c, 0);
    ot__jit_vrc(r, 3, 1, 0x4A, res, res, E_INF);
    ot__x86_put1(c, (uint8_t)(m << 4));
    ot__jit_zero_reg(r, z);
    ot__x86_vrr(c, 1, 0, 0, 0xC2, m, z, d);                                   /* !(0 <= d): NaN */
    ot__x86_put1(c, 6);
    ot__jit_vrc(r, 3, 1, 0x4A, res, res, L_QNAN);
    ot__x86_put1(c, (uint8_t)(m << 4));
    ot__x86_vrr(c, 1, 0, 0, 0xC2, m, d, z);                                   /* d == 0: -inf */
    ot__x86_put1(c, 0);
    ot__jit_vrc(r, 3, 1, 0x4A, res, res, L_NINF);
    ot__x86_put1(c, (uint8_t)(m << 4));
}

/* The own logf's last selects on res, by its argument x: NaN below 0 and
 * for NaN, -inf for +-0, inf for inf. AVX-512: NaN where !(x >= 0), then
 * vfixupimmps by x's class (0 -> -inf, inf -> inf, the rest kept); AVX2:
 * log_vex_specials, the same sets (x is no scaled value: denormals are
 * positive). m and z clobbered. */
static void log_specials(regs *r, int res, int x, int m, int z)
{
    code *c = r->c;
    if (!c->evex) {
        log_vex_specials(r, res, x, m, z);
        return;
    }
    ot__jit_zero_reg(r, z);
    ot__x86_vrr(c, 1, 0, 0, 0xC2, 1, x, z);                                   /* k1 = !(x >= 0) */
    ot__x86_put1(c, 0x19);
    ot__jit_load_const(r, res, L_QNAN, true);
    ot__jit_vrc(r, 3, 1, 0x54, res, x, N_FIX);                                /* vfixupimmps */
    ot__x86_put1(c, 0);
}

/* log of register x at u10 into the returned register (x kept, t[0..4]
 * clobbered): the library's own, own_math.inc's f32_log_u10 step for step
 * with its operand orders (its comment has the design), so the bits are
 * the table's own. x below 2^-126 scaled by 2^23 (den: k1, or t[4] under
 * AVX2); e = (bits - bits(sqrt(1/2))) >> 23, arithmetic; r = (bits -
 * (e << 23)) - 1; e' = e, less 23 where den; A = e' ln 2 hi, hi = A + r,
 * lo = (A - hi) + r; tail = r^3 P(r) + (e' ln 2 lo + lo); the result hi +
 * ((-r/2) r + tail), then log_specials. Inline, the loop calls nothing: a
 * call clobbers every vector register, so W4's loop reloaded its
 * constants and spilled its values around one per vector. */
int ot__jit_log_steps(regs *r, int x, const int t[5])
{
    enum { ADD = 0x58, MUL = 0x59, SUB = 0x5C, PSUBD = 0xFA };
    code *c = r->c;
    int d = t[0], e = t[1], s = t[2], hi = t[3], m = t[4];
    ot__jit_vrc(r, 1, 0, 0xC2, c->evex ? 1 : m, x, L_FLTMIN);                /* den: x < 2^-126 */
    ot__x86_put1(c, 1);
    if (c->evex) {
        ot__jit_vmovaps(r, d, x);
        ot__jit_vrc_k(r, 1, 0, MUL, d, x, N_2P23, 1);                         /* x 2^23 where den */
    } else {
        ot__jit_vrc(r, 1, 0, MUL, d, x, N_2P23);
        ot__x86_vrr(c, 3, 1, 0, 0x4A, d, x, d);                               /* vblendvps */
        ot__x86_put1(c, (uint8_t)(m << 4));
    }
    ot__jit_vrc(r, 1, 1, PSUBD, e, d, N_SQRTH);
    ot__jit_shift(r, 4, e, 23);                                               /* e */
    ot__jit_shift_to(r, 6, s, e, 23);
    ot__x86_vrr(c, 1, 1, 0, PSUBD, d, d, s);                                  /* m's bits */
    ot__jit_vrc(r, 1, 0, SUB, d, d, F_ONE);                                   /* r = m - 1 */
    ot__x86_vrr(c, 1, 0, 0, 0x5B, e, 0, e);                                   /* vcvtdq2ps */
    if (c->evex) {
        ot__jit_vrc_k(r, 1, 0, ADD, e, e, N_M23, 1);                          /* e' = e - 23 there */
    } else {
        ot__jit_vrc(r, 1, 0, 0x54, m, m, N_M23);                              /* vandps: -23 or 0 */
        arith(r, ADD, e, e, m);                                       /* e' = e + that */
    }
    ot__jit_vrc(r, 1, 0, MUL, s, e, N_LN2HI);                                 /* A */
    arith(r, ADD, hi, s, d);                                          /* hi = A + r */
    arith(r, SUB, s, s, hi);
    arith(r, ADD, s, s, d);                                           /* lo = (A - hi) + r */
    ot__jit_vrc(r, 2, 1, FMADD231, s, e, N_LN2LO);                            /* e' lo + lo */
    ot__jit_load_const(r, m, N_P7, false);
    for (int k = N_P6; k >= N_P0; k--) ot__jit_vrc(r, 2, 1, FMADD213, m, d, k);   /* p r + c */
    arith(r, MUL, e, d, d);
    arith(r, MUL, e, e, d);                                           /* r^3 */
    fma3(r, FMADD231, s, e, m);                                       /* tail = r^3 p + . */
    ot__jit_vrc(r, 1, 0, MUL, e, d, N_MHALF);
    fma3(r, FMADD231, s, e, d);                                       /* (-r/2) r + tail */
    arith(r, ADD, hi, hi, s);
    log_specials(r, hi, x, m, e);
    return hi;
}

/* log of register x at u35 into t[0] (x kept, t[1..3] clobbered, and
 * t[4..6] by AVX2): SLEEF 3.5's logf u35, e ln 2 + y p(y^2) with
 * y = (m-1)/(m+1) in plain f32, e and m as logf u10 takes them (AVX-512
 * patches e ln 2 where vgetexpps gives e = inf before it fixes up). */
int ot__jit_log35_steps(regs *r, int x, const int t[7])
{
    enum { ADD = 0x58, MUL = 0x59, DIV = 0x5E };
    code *c = r->c;
    int e = t[0], m = t[1], y = t[2], p = t[3], d = t[6];
    if (c->evex) {
        ot__jit_vrc(r, 1, 0, MUL, e, x, L_4_3);
        ot__x86_vrr(c, 2, 1, 0, 0x42, e, 0, e);                               /* vgetexpps: e */
        ot__jit_vrc(r, 1, 0, 0xC2, 1, e, E_INF);                              /* k1 = e == inf */
        ot__x86_put1(c, 0);
        ot__x86_vrr(c, 3, 1, 0, 0x26, m, 0, x);                               /* vgetmantps: m */
        ot__x86_put1(c, 0x0B);
    } else {
        log_vex_split(r, x, d, t);
        ot__x86_vrr(c, 1, 0, 0, 0x5B, e, 0, e);                               /* vcvtdq2ps */
    }
    ot__jit_vrc(r, 1, 0, ADD, y, m, L_M1);
    ot__jit_vrc(r, 1, 0, ADD, m, m, F_ONE);
    arith(r, DIV, y, y, m);                                           /* y */
    arith(r, MUL, m, y, y);
    ot__jit_load_const(r, p, M_P0, false);
    for (int k = M_P1; k <= M_P3; k++) ot__jit_vrc(r, 2, 1, FMADD213, p, m, k);
    ot__jit_vrc(r, 2, 1, FMADD213, p, m, T_TWO);
    ot__jit_vrc(r, 1, 0, MUL, e, e, L_LN2HI);                                 /* e ln 2 */
    if (c->evex) ot__jit_load_const(r, e, M_128LN2, true);
    fma3(r, FMADD231, e, y, p);
    if (c->evex) {
        ot__jit_vrc(r, 3, 1, 0x54, e, x, M_FIX);                              /* vfixupimmps */
        ot__x86_put1(c, 0);
        return e;
    }
    log_vex_specials(r, e, d, m, y);
    return e;
}

/* safelog's argument: maximum(x, exp(-50)) into y as tile.inc's safelog
 * takes it (x below the floor becomes the floor; NaN fails the compare
 * and stays); log's steps (u10 or u35) then run on y. m: VEX's mask. */
static int safelog_clamp(regs *r, int x, int y, int m)
{
    code *c = r->c;
    if (c->evex) {
        ot__jit_vrc(r, 1, 0, 0xC2, 1, x, S_FLOOR);                            /* k1 = x < floor */
        ot__x86_put1(c, 0x11);
        ot__jit_vmovaps(r, y, x);
        ot__jit_load_const(r, y, S_FLOOR, true);
        return y;
    }
    ot__jit_vrc(r, 1, 0, 0xC2, m, x, S_FLOOR);
    ot__x86_put1(c, 0x11);
    ot__jit_vrc(r, 3, 1, 0x4A, y, x, S_FLOOR);                                /* vblendvps */
    ot__x86_put1(c, (uint8_t)(m << 4));
    return y;
}

/* tanhf's last selects (u10 and u35 alike) on res: 1 where ax = |x| >
 * 8.66 or res is NaN, x's sign, NaN for NaN (m1 and m2 clobbered). */
static void tanh_finish(regs *r, int res, int x, int ax, int m1, int m2)
{
    code *c = r->c;
    if (c->evex) {
        ot__x86_vrr(c, 1, 0, 0, 0xC2, 1, res, res);                           /* k1 = isnan(res) */
        ot__x86_put1(c, 3);
        ot__jit_load_const(r, res, F_ONE, true);
        ot__jit_vrc(r, 1, 0, 0xC2, 1, ax, T_BIG);                             /* k1 = |x| > 8.66 */
        ot__x86_put1(c, 0x0E);
        ot__jit_load_const(r, res, F_ONE, true);
        ot__jit_bitwise_const(r, BIT_AND, m1, x, K_SIGN);
        ot__x86_vrr(c, 1, 1, 0, 0xEF, res, res, m1);                          /* vpxord: x's sign */
        ot__x86_vrr(c, 1, 0, 0, 0xC2, 1, x, x);                               /* k1 = isnan(x) */
        ot__x86_put1(c, 3);
        ot__jit_all_ones(r, m2);
        ot__x86_vrr_k(c, 1, 0, 0, 0x28, res, 0, m2, 1, false);
        return;
    }
    ot__jit_vrc(r, 1, 0, 0xC2, m1, ax, T_BIG);                                /* |x| > 8.66 */
    ot__x86_put1(c, 0x0E);
    ot__x86_vrr(c, 1, 0, 0, 0xC2, m2, res, res);                              /* isnan(res) */
    ot__x86_put1(c, 3);
    ot__x86_vrr(c, 1, 0, 0, 0x56, m1, m1, m2);                                /* vorps */
    ot__jit_vrc(r, 3, 1, 0x4A, res, res, F_ONE);                              /* vblendvps: 1 */
    ot__x86_put1(c, (uint8_t)(m1 << 4));
    ot__jit_bitwise_const(r, BIT_AND, m2, x, K_SIGN);
    ot__x86_vrr(c, 1, 0, 0, 0x57, res, res, m2);                              /* vxorps: x's sign */
    ot__x86_vrr(c, 1, 0, 0, 0xC2, m2, x, x);                                  /* isnan(x) */
    ot__x86_put1(c, 3);
    ot__x86_vrr(c, 1, 0, 0, 0x56, res, res, m2);
}

/* tanh of register x at u10 into the returned register (x kept, t[0..5]
 * clobbered): the library's own, own_math.inc's f32_tanh_u10 step for step (its
 * comment has the design), so the bits are the table's own. Below 0.97 the
 * polynomial a + a^3 P(a^2), a = |x|; above, 1 - 2/D with D = 2^k u +
 * (2^k + 1), e^(2a) = 2^k (1 + u); k from t = 2a / ln 2 + 1.5 * 2^23, 2^k
 * from t's bits; the sign is x's. vminps gives 20 where 2a is NaN; a NaN
 * fails a >= 0.97 and takes the polynomial, which keeps it. */
int ot__jit_tanh_steps(regs *r, int x, const int t[6])
{
    enum { ADD = 0x58, MUL = 0x59, SUB = 0x5C, MIN = 0x5D, DIV = 0x5E };
    code *c = r->c;
    int a = t[0], s = t[1], p = t[2], k = t[3], q = t[4], d = t[5];
    ot__jit_bitwise_const(r, BIT_AND, a, x, K_ABS);
    arith(r, MUL, s, a, a);
    ot__jit_load_const(r, p, H_P6, false);
    for (int e = H_P5; e >= H_P0; e--) ot__jit_vrc(r, 2, 1, FMADD213, p, s, e);  /* p s + c */
    arith(r, MUL, s, s, a);
    fma3(r, FMADD213, p, s, a);                                       /* small: a^3 p + a */
    arith(r, ADD, s, a, a);
    ot__jit_vrc(r, 1, 0, MIN, s, s, H_CAP);                                   /* y = min(2a, 20) */
    ot__jit_load_const(r, q, E_RLN2, false);
    ot__jit_vrc(r, 2, 1, FMADD213, q, s, H_MAGIC);                            /* t = y / ln 2 + M */
    ot__jit_vrc(r, 1, 0, SUB, k, q, H_MAGIC);                                 /* k = t - M */
    ot__jit_vrc(r, 2, 1, FMADD231, s, k, E_L2U);                              /* r = y - k ln 2 */
    ot__jit_vrc(r, 2, 1, FMADD231, s, k, E_L2L);
    ot__jit_shift_to(r, 6, k, q, 23);
    ot__jit_vrc(r, 1, 1, 0xFE, k, k, F_ONE);                                  /* 2^k: + 1.0's bits */
    ot__jit_load_const(r, q, H_Q4, false);
    for (int e = H_Q3; e >= H_Q0; e--) ot__jit_vrc(r, 2, 1, FMADD213, q, s, e);
    arith(r, MUL, d, s, s);
    fma3(r, FMADD213, d, q, s);                                       /* u = r^2 q + r */
    ot__jit_vrc(r, 1, 0, ADD, q, k, F_ONE);
    fma3(r, FMADD213, d, k, q);                                       /* D = 2^k u + 2^k + 1 */
    ot__jit_load_const(r, q, T_TWO, false);
    arith(r, DIV, q, q, d);
    ot__jit_load_const(r, d, F_ONE, false);
    arith(r, SUB, d, d, q);                                           /* large: 1 - 2/D */
    if (c->evex) {
        ot__jit_vrc(r, 1, 0, 0xC2, 1, a, H_CUT);                              /* k1 = a >= 0.97 */
        ot__x86_put1(c, 0x1D);
        ot__x86_vrr_k(c, 1, 0, 0, 0x28, p, 0, d, 1, false);
        ot__jit_bitwise_const(r, BIT_AND, s, x, K_SIGN);
        ot__x86_vrr(c, 1, 1, 0, 0xEB, p, p, s);                               /* vpord: x's sign */
        return p;
    }
    ot__jit_vrc(r, 1, 0, 0xC2, s, a, H_CUT);                                  /* a >= 0.97 */
    ot__x86_put1(c, 0x1D);
    ot__x86_vrr(c, 3, 1, 0, 0x4A, p, p, d);                                   /* vblendvps */
    ot__x86_put1(c, (uint8_t)(s << 4));
    ot__jit_bitwise_const(r, BIT_AND, s, x, K_SIGN);
    ot__x86_vrr(c, 1, 0, 0, 0x56, p, p, s);                                   /* vorps: x's sign */
    return p;
}

/* tanh of register x at u35 into the returned register (x kept, t[0..7]
 * clobbered): SLEEF 3.5's tanhf u35, d / (d + 2) with d = expm1(2|x|),
 * each step as its AVX-512 and AVX2 builds order them (they differ only in
 * the selects). expm1 is expf's reduction and polynomial (Estrin's order
 * here, not Horner's) scaled by 2^q minus 1, or the polynomial alone where
 * q = 0; then tanh_finish (the ratio is NaN where |x| = inf). */
int ot__jit_tanh35_steps(regs *r, int x, const int t[8])
{
    enum { ADD = 0x58, MUL = 0x59, DIV = 0x5E };
    code *c = r->c;
    int ax = t[0], s = t[1], q = t[2], f = t[3], s4 = t[4], p01 = t[5], p23 = t[6], u = t[7];
    ot__jit_bitwise_const(r, BIT_AND, ax, x, K_ABS);
    arith(r, ADD, s, ax, ax);                                         /* d = 2|x| */
    ot__jit_vrc(r, 1, 0, MUL, q, s, E_RLN2);
    ot__x86_vrr(c, 1, 1, 0, 0x5B, q, 0, q);                                   /* vcvtps2dq */
    ot__x86_vrr(c, 1, 0, 0, 0x5B, f, 0, q);                                   /* vcvtdq2ps */
    ot__jit_vrc(r, 2, 1, FMADD231, s, f, E_L2U);                              /* s = d - q ln 2 */
    ot__jit_vrc(r, 2, 1, FMADD231, s, f, E_L2L);
    arith(r, MUL, f, s, s);                                           /* s^2 */
    arith(r, MUL, s4, f, f);
    ot__jit_load_const(r, p01, E_C0, false);
    ot__jit_vrc(r, 2, 1, FMADD213, p01, s, E_C1);
    ot__jit_load_const(r, p23, E_C2, false);
    ot__jit_vrc(r, 2, 1, FMADD213, p23, s, E_C3);
    ot__jit_load_const(r, u, E_C4, false);
    ot__jit_vrc(r, 2, 1, FMADD213, u, s, E_C5);
    fma3(r, FMADD231, u, f, p23);
    fma3(r, FMADD231, u, s4, p01);
    fma3(r, FMADD213, u, f, s);                                       /* u = s + s^2 p(s) */
    ot__jit_vrc(r, 1, 0, ADD, s, u, F_ONE);
    ot__jit_shift_to(r, 4, f, q, 1);                                          /* m = q >> 1 */
    ot__jit_shift_to(r, 6, s4, f, 23);
    ot__jit_vrc(r, 1, 1, 0xFE, s4, s4, F_ONE);                                /* 2^m */
    arith(r, MUL, s, s, s4);
    ot__x86_vrr(c, 1, 1, 0, 0xFA, f, q, f);                                   /* q - m */
    ot__jit_shift_to(r, 6, f, f, 23);
    ot__jit_vrc(r, 1, 1, 0xFE, f, f, F_ONE);
    arith(r, MUL, s, s, f);
    ot__jit_vrc(r, 1, 0, ADD, s, s, L_M1);                                 /* d = (1 + u) 2^q - 1 */
    if (c->evex) {
        ot__x86_vrr(c, 2, 2, 0, 0x27, 1, q, q);                         /* vptestnmd: k1 = q == 0 */
        ot__x86_vrr_k(c, 1, 0, 0, 0x28, s, 0, u, 1, false);                   /* d = u there */
    } else {
        ot__jit_zero_reg(r, s4);
        ot__x86_vrr(c, 1, 1, 0, 0x76, s4, q, s4);                             /* vpcmpeqd: q == 0 */
        ot__x86_vrr(c, 3, 1, 0, 0x4A, s, s, u);                               /* vblendvps */
        ot__x86_put1(c, (uint8_t)(s4 << 4));
    }
    ot__jit_vrc(r, 1, 0, ADD, f, s, T_TWO);
    arith(r, DIV, s, s, f);                                           /* d / (d + 2) */
    tanh_finish(r, s, x, ax, q, f);
    return s;
}

/* sig2, and f64 sig, as the tile kernels compute them: e = exp(-|x|) (or
 * exp2) by a call, then (x < 0 ? e : 1) / (1 + e) inline, x's sign bit choosing: vblendvp
 * under VEX; under EVEX the sign spread over the lane by an arithmetic
 * shift, then vpternlogd's bit select (table 0xCA: a ? b : c). */
void ot__jit_emit_sig(regs *r, int pos, const void *exp_fn, int x)
{
    int rx = ot__jit_use(r, x, 0);
    int nabs = ot__jit_take(r, 1u << rx);
    int from = rx;
    if (ot__jit_zero_dead(r, x)) {
        ot__jit_bitwise_const(r, BIT_AND, nabs, rx, K_LIVE);
        from = nabs;
    }
    ot__jit_bitwise_const(r, BIT_OR, nabs, from, K_SIGN);                       /* -|x| */
    for (int g = 0; g < NREG; g++) {
        int v = r->val_of[g];
        if (v >= 0 && (v == x || r->last[v] > pos)) ot__jit_save(r, g);
    }
    if (nabs != 0) ot__jit_vmovaps(r, 0, nabs);
    for (int g = 0; g < NREG; g++) ot__jit_release(r, g);
    ot__x86_call_abs(r->c, exp_fn);
    ot__jit_fetch(r, x, 1);
    ot__jit_vmov_load(r, 2, RSP, NO_INDEX, ot__jit_konst(r, K_ONE));
    ot__x86_vrr(r->c, 1, r->pp, r->wig, 0x58, 3, 2, 0);                           /* 1 + e */
    if (r->c->evex) {
        ot__jit_shift(r, 4, 1, r->pp ? 63 : 31);
        ot__x86_vrr(r->c, 3, 1, 0, 0x25, 1, 0, 2);                              /* vpternlogd */
        ot__x86_put1(r->c, 0xCA);
        ot__x86_vrr(r->c, 1, r->pp, r->wig, 0x5E, 0, 1, 3);
    } else {
        ot__x86_vrr(r->c, 3, 1, 0, r->pp ? 0x4B : 0x4A, 0, 2, 0);               /* vblendvp */
        ot__x86_put1(r->c, 1 << 4);                                             /* mask: ymm1 */
        ot__x86_vrr(r->c, 1, r->pp, r->wig, 0x5E, 0, 0, 3);
    }
    ot__jit_bind(r, pos, 0);
}

/* ---- selects and compares ----------------------------------------------------- */

/* relu, recip, rint, finite, sgn, the compares, minimum and maximum as the
 * tile kernels' element functions compute them (tile.inc's K_FLOAT_OPS over
 * isa_avx2.h and isa_avx512.h): the same compares, blends and constants, so
 * the bits are theirs (selects move operand bits, compares give 1 or +0).
 * Each writes a fresh register of t[] and returns it, the operands kept. A
 * compare lands in vector register m under VEX and in k1 under EVEX. */

enum { CMP_EQ = 0x00, CMP_UNORD = 0x03, CMP_NEQ_U = 0x04, CMP_NLT_U = 0x15, CMP_LT = 0x11,
       CMP_LE = 0x12, CMP_GE = 0x1D, CMP_GT = 0x1E };

static void compare(regs *r, int m, int a, int b, int pred)
{
    ot__x86_vrr(r->c, 1, r->pp, r->wig, 0xC2, r->c->evex ? 1 : m, a, b);
    ot__x86_put1(r->c, (uint8_t)pred);
}

/* d = 1 where mask m (k1) is set, else +0. */
static void one_if(regs *r, int d, int m)
{
    int32_t one = ot__jit_konst(r, K_ONE);
    if (r->c->evex) ot__x86_vrm_k(r->c, 1, r->pp, r->wig, 0x10, d, RSP, NO_INDEX, one, 1, true);
    else ot__jit_bitwise_const(r, BIT_AND, d, m, K_ONE);
}

/* d = mask m (k1) ? a : b. */
static void blend(regs *r, int d, int b, int a, int m)
{
    if (r->c->evex) {
        ot__x86_vrr_k(r->c, 2, 1, r->wig, 0x65, d, b, a, 1, false);             /* vblendmps/pd */
        return;
    }
    ot__x86_vrr(r->c, 3, 1, 0, r->pp ? 0x4B : 0x4A, d, b, a);                   /* vblendvps/pd */
    ot__x86_put1(r->c, (uint8_t)(m << 4));
}

/* x < 0 ? +0 : x (NaN and -0 stay). */
static int relu_steps(regs *r, int x, const int t[])
{
    ot__jit_zero_reg(r, t[0]);
    if (r->c->evex) {
        compare(r, 0, x, t[0], CMP_NLT_U);
        ot__x86_vrr_k(r->c, 1, r->pp, r->wig, 0x28, t[1], 0, x, 1, true);     /* x where !(x < 0) */
        return t[1];
    }
    compare(r, t[0], x, t[0], CMP_LT);
    ot__x86_vrr(r->c, 1, r->pp, 0, 0x55, t[1], t[0], x);                        /* vandnps */
    return t[1];
}

static int recip_steps(regs *r, int x, const int t[])
{
    ot__jit_vmov_load(r, t[0], RSP, NO_INDEX, ot__jit_konst(r, K_ONE));
    ot__x86_vrr(r->c, 1, r->pp, r->wig, 0x5E, t[0], t[0], x);
    return t[0];
}

/* vroundps / vrndscaleps to nearest, even on ties (imm 8: no exceptions). */
static int rint_steps(regs *r, int x, const int t[])
{
    ot__x86_vrr(r->c, 3, 1, r->wig, r->pp ? 0x09 : 0x08, t[0], 0, x);
    ot__x86_put1(r->c, 8);
    return t[0];
}

/* 1 where |x| < inf: the same set as x - x == 0 (inf - inf and NaN are
 * NaN), which needs no constant for inf in either dtype. */
static int finite_steps(regs *r, int x, const int t[])
{
    ot__x86_vrr(r->c, 1, r->pp, r->wig, 0x5C, t[0], x, x);
    ot__jit_zero_reg(r, t[1]);
    compare(r, t[0], t[0], t[1], CMP_EQ);
    one_if(r, t[0], t[0]);
    return t[0];
}

/* x > 0 ? 1 : x < 0 ? -1 : x + 0. */
static int sgn_steps(regs *r, int x, const int t[])
{
    int z = t[0], s = t[1], m = t[2], c = t[3];
    ot__jit_zero_reg(r, z);
    ot__x86_vrr(r->c, 1, r->pp, r->wig, 0x58, s, x, z);                         /* x + 0 */
    ot__jit_vmov_load(r, c, RSP, NO_INDEX, ot__jit_konst(r, K_ONE));
    ot__jit_bitwise_const(r, BIT_OR, c, c, K_SIGN);                             /* -1 */
    compare(r, m, x, z, CMP_LT);
    blend(r, s, s, c, m);
    ot__jit_vmov_load(r, c, RSP, NO_INDEX, ot__jit_konst(r, K_ONE));
    compare(r, m, x, z, CMP_GT);
    blend(r, s, s, c, m);
    return s;
}

/* 1 or +0 by the ordered compares (ne is unordered: true on NaN). */
static int compare_steps(regs *r, int op, int a, int b, const int t[])
{
    static const uint8_t pred[] = {[OT_OP_EQ] = CMP_EQ, [OT_OP_NE] = CMP_NEQ_U, [OT_OP_LT] = CMP_LT,
                                   [OT_OP_LE] = CMP_LE, [OT_OP_GT] = CMP_GT, [OT_OP_GE] = CMP_GE};
    compare(r, t[0], a, b, pred[op]);
    one_if(r, t[0], t[0]);
    return t[0];
}

/* minimum: (a <= b || isnan(a)) ? a : b; maximum the same with >=. */
static int extremum_steps(regs *r, int op, int a, int b, const int t[])
{
    int pred = op == OT_OP_MINIMUM ? CMP_LE : CMP_GE;
    if (r->c->evex) {
        compare(r, 0, a, b, pred);
        blend(r, t[0], b, a, 0);
        compare(r, 0, a, a, CMP_UNORD);
        ot__x86_vrr_k(r->c, 1, r->pp, r->wig, 0x28, t[0], 0, a, 1, false);      /* a where NaN */
        return t[0];
    }
    compare(r, t[0], a, b, pred);
    compare(r, t[1], a, a, CMP_UNORD);
    ot__x86_vrr(r->c, 1, r->pp, 0, 0x56, t[0], t[0], t[1]);                     /* vorps */
    blend(r, t[1], b, a, t[0]);
    return t[1];
}

/* The unary ops above: the steps and the scratch registers they take. */
static bool unary_steps(int op, unary_steps_fn *fn, int *n)
{
    switch (op) {
    case OT_OP_RELU: *fn = relu_steps, *n = 2; return true;
    case OT_OP_RECIP: *fn = recip_steps, *n = 1; return true;
    case OT_OP_RINT: *fn = rint_steps, *n = 1; return true;
    case OT_OP_FINITE: *fn = finite_steps, *n = 2; return true;
    case OT_OP_SGN: *fn = sgn_steps, *n = 4; return true;
    default: return false;
    }
}

/* fn of value a at body position pos, in n scratch registers; with floor,
 * in one more, fn runs on a clamped to safelog's floor. */
void ot__jit_emit_unary_steps(regs *r, int pos, int a, unary_steps_fn fn, int n, bool floor)
{
    int ra = ot__jit_use(r, a, 0);
    int t[16];
    ot__jit_scratch(r, 1u << ra, t, n + floor);
    int res = fn(r, floor ? safelog_clamp(r, ra, t[n], t[0]) : ra, t);
    ot__jit_retire(r, pos);
    ot__jit_bind(r, pos, res);
}

static void emit_binary_steps(regs *r, int pos, int op, int a, int b)
{
    int ra = ot__jit_use(r, a, 0);
    int rb = ot__jit_use(r, b, 1u << ra);
    int t[2];
    bool ext = op == OT_OP_MINIMUM || op == OT_OP_MAXIMUM;
    ot__jit_scratch(r, 1u << ra | 1u << rb, t, ext && !r->c->evex ? 2 : 1);
    int res = ext ? extremum_steps(r, op, ra, rb, t) : compare_steps(r, op, ra, rb, t);
    ot__jit_retire(r, pos);
    ot__jit_bind(r, pos, res);
}

void ot__jit_emit_unary(regs *r, int pos, int op, int a)
{
    unary_steps_fn fn;
    int n;
    if (unary_steps(op, &fn, &n)) {
        ot__jit_emit_unary_steps(r, pos, a, fn, n, false);
        return;
    }
    int ra = ot__jit_use(r, a, 0);
    ot__jit_retire(r, pos);
    int d = r->val_of[ra] < 0 ? ra : ot__jit_take(r, 1u << ra);
    switch (op) {
    case OT_OP_NEG: ot__jit_bitwise_const(r, BIT_XOR, d, ra, K_SIGN); break;
    case OT_OP_ABS: ot__jit_bitwise_const(r, BIT_AND, d, ra, K_ABS); break;
    case OT_OP_SQRT: ot__x86_vrr(r->c, 1, r->pp, r->wig, 0x51, d, 0, ra); break;
    default: ot__x86_vrr(r->c, 1, r->pp, r->wig, 0x59, d, ra, ra); break;          /* sqr */
    }
    ot__jit_bind(r, pos, d);
}

void ot__jit_emit_binary(regs *r, int pos, int op, int a, int b)
{
    if (op != OT_OP_ADD && op != OT_OP_SUB && op != OT_OP_MUL && op != OT_OP_DIV) {
        emit_binary_steps(r, pos, op, a, b);
        return;
    }
    int ra = ot__jit_use(r, a, 0);
    int rb = ot__jit_use(r, b, 1u << ra);
    ot__jit_retire(r, pos);
    int d = r->val_of[ra] < 0 ? ra : r->val_of[rb] < 0 ? rb : ot__jit_take(r, 1u << ra | 1u << rb);
    static const uint8_t opc[] = {[OT_OP_ADD] = 0x58, [OT_OP_MUL] = 0x59, [OT_OP_SUB] = 0x5C,
                                  [OT_OP_DIV] = 0x5E};
    ot__x86_vrr(r->c, 1, r->pp, r->wig, opc[op], d, ra, rb);
    ot__jit_bind(r, pos, d);
}

/* rsqrt of value a, a broadcast (pre's only: lane 0 is computed and
 * broadcast): 1 / sqrt in double lanes, as tile.inc's f64_rsqrt, and for
 * f32 widened first and rounded once at the end, as its f32 kernel (two
 * float roundings would differ), so the bits are the table's. */
void ot__jit_emit_rsqrt_bcast(regs *r, int pos, int a)
{
    code *c = r->c;
    int wd = c->evex;                                   /* W1 for double under EVEX */
    int ra = ot__jit_use(r, a, 0);
    int t[2];
    ot__jit_scratch(r, 1u << ra, t, 2);
    bool f32 = !r->pp;
    ot__jit_vmov_load(r, t[1], RSP, NO_INDEX, ot__jit_konst(r, K_ONE));
    if (f32) {
        ot__x86_vrr(c, 1, 0, 0, 0x5A, t[0], 0, ra);                             /* vcvtps2pd */
        ot__x86_vrr(c, 1, 0, 0, 0x5A, t[1], 0, t[1]);                           /* 1.0 too */
    }
    ot__x86_vrr(c, 1, 1, wd, 0x51, t[0], 0, f32 ? t[0] : ra);                   /* vsqrtpd */
    ot__x86_vrr(c, 1, 1, wd, 0x5E, t[0], t[1], t[0]);                           /* vdivpd 1 / . */
    if (f32) {
        ot__x86_vrr(c, 1, 1, wd, 0x5A, t[0], 0, t[0]);                          /* vcvtpd2ps */
        ot__x86_vrr(c, 2, 1, 0, 0x18, t[0], 0, t[0]);                           /* vbroadcastss */
    }
    ot__jit_retire(r, pos);
    ot__jit_bind(r, pos, t[0]);
}

/* a*b + c, or c - a*b as (-a)*b + c: the tile kernels' own instructions
 * (vfnmadd231 is the same function, but emulators such as valgrind give
 * its exact zeros the other sign), into a register holding c. */
void ot__jit_emit_fma(regs *r, int pos, bool sub, int a, int b, int cv)
{
    int ra = ot__jit_use(r, a, 0);
    int rb = ot__jit_use(r, b, 1u << ra);
    int rc = ot__jit_use(r, cv, 1u << ra | 1u << rb);
    unsigned keep = 1u << ra | 1u << rb | 1u << rc;
    ot__jit_retire(r, pos);
    int d = rc;
    if (r->val_of[rc] >= 0) {
        d = ot__jit_take(r, keep);
        ot__jit_vmovaps(r, d, rc);
    }
    int fa = ra;
    if (sub) {
        fa = ot__jit_take(r, keep | 1u << d);
        ot__jit_bitwise_const(r, BIT_XOR, fa, ra, K_SIGN);                      /* -a */
    }
    ot__x86_vrr(r->c, 2, 1, r->w, 0xB8, d, fa, rb);                             /* vfmadd231 */
    ot__jit_bind(r, pos, d);
}

#endif /* OT_JIT_X86 */
