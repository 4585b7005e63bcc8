/*
 * optree_ops.h - generated from src/core/ops.def by tools/gen_ops.sh; do not
 * edit (make regenerates it). Included by optree.h, never on its own.
 *
 * Public op numbers are append-only: a new op is added at the end of
 * src/core/ops.def, and an existing op keeps its number in every release.
 */
#ifndef OPTREE_OPS_H
#define OPTREE_OPS_H

/* The ops: X(ENUM, name, arity, kind, symbol, flags, ref), where symbol is
 * the infix form used by ot_pp (or NULL) and ref is the op's name where
 * the reference backend (src/ref/ref.c) evaluates it elementwise from the
 * table's formula, none where it evaluates the op structurally. */
#define OT_OP_LIST(X) \
    X(FINITE, "finite", 1, OT_KIND_UNARY, NULL, OT_FLAG_COMPARE | OT_FLAG_NODIFF, finite) \
    X(NEG, "neg", 1, OT_KIND_UNARY, NULL, 0, neg) \
    X(ABS, "abs", 1, OT_KIND_UNARY, NULL, 0, abs) \
    X(SGN, "sgn", 1, OT_KIND_UNARY, NULL, OT_FLAG_NODIFF, sgn) \
    X(SQRT, "sqrt", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, sqrt) \
    X(SQR, "sqr", 1, OT_KIND_UNARY, NULL, 0, sqr) \
    X(EXP, "exp", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, exp) \
    X(EXP2, "exp2", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, exp2) \
    X(LOG, "log", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, log) \
    X(LOG2, "log2", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, log2) \
    X(SAFELOG, "safelog", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, safelog) \
    X(SIG, "sig", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, sig) \
    X(SIG2, "sig2", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, sig2) \
    X(TANH, "tanh", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, tanh) \
    X(TANH2, "tanh2", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, tanh2) \
    X(RINT, "rint", 1, OT_KIND_UNARY, NULL, OT_FLAG_NODIFF, rint) \
    X(RSQRT, "rsqrt", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, rsqrt) \
    X(RECIP, "recip", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, recip) \
    X(RELU, "relu", 1, OT_KIND_UNARY, NULL, 0, relu) \
    X(SIN, "sin", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, sin) \
    X(COS, "cos", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, cos) \
    X(ADD, "add", 2, OT_KIND_BINARY, "+", 0, add) \
    X(SUB, "sub", 2, OT_KIND_BINARY, "-", 0, sub) \
    X(MUL, "mul", 2, OT_KIND_BINARY, "*", 0, mul) \
    X(DIV, "div", 2, OT_KIND_BINARY, "/", OT_FLAG_FLOAT, div) \
    X(POW, "pow", 2, OT_KIND_BINARY, "**", 0, pow) \
    X(EQ, "eq", 2, OT_KIND_BINARY, NULL, OT_FLAG_COMPARE | OT_FLAG_NODIFF, eq) \
    X(NE, "ne", 2, OT_KIND_BINARY, NULL, OT_FLAG_COMPARE | OT_FLAG_NODIFF, ne) \
    X(LT, "lt", 2, OT_KIND_BINARY, NULL, OT_FLAG_COMPARE | OT_FLAG_NODIFF, lt) \
    X(LE, "le", 2, OT_KIND_BINARY, NULL, OT_FLAG_COMPARE | OT_FLAG_NODIFF, le) \
    X(GT, "gt", 2, OT_KIND_BINARY, NULL, OT_FLAG_COMPARE | OT_FLAG_NODIFF, gt) \
    X(GE, "ge", 2, OT_KIND_BINARY, NULL, OT_FLAG_COMPARE | OT_FLAG_NODIFF, ge) \
    X(MINIMUM, "minimum", 2, OT_KIND_BINARY, NULL, 0, minimum) \
    X(MAXIMUM, "maximum", 2, OT_KIND_BINARY, NULL, 0, maximum) \
    X(DOT, "dot", 2, OT_KIND_DOT, NULL, 0, none) \
    X(BATCHED_DOT, "batched_dot", 2, OT_KIND_DOT, NULL, 0, none) \
    X(SUM, "sum", 1, OT_KIND_REDUCE, NULL, 0, none) \
    X(MAX, "max", 1, OT_KIND_REDUCE, NULL, 0, none) \
    X(MIN, "min", 1, OT_KIND_REDUCE, NULL, 0, none) \
    X(MEAN, "mean", 1, OT_KIND_REDUCE, NULL, OT_FLAG_FLOAT, none) \
    X(ARGMAX, "argmax", 1, OT_KIND_REDUCE, NULL, OT_FLAG_INDEX | OT_FLAG_NODIFF, none) \
    X(ARGMIN, "argmin", 1, OT_KIND_REDUCE, NULL, OT_FLAG_INDEX | OT_FLAG_NODIFF, none) \
    X(TRANSPOSE, "transpose", 1, OT_KIND_SHAPE, NULL, 0, none) \
    X(CAST, "cast", 1, OT_KIND_SPECIAL, NULL, 0, none) \
    X(ONEHOT, "onehot", 1, OT_KIND_SPECIAL, NULL, OT_FLAG_NODIFF, none) \
    X(RAND, "rand", 0, OT_KIND_SPECIAL, NULL, OT_FLAG_NODIFF, none) \
    X(VAR, "var", 1, OT_KIND_COMPOSITE, NULL, OT_FLAG_FLOAT, none) \
    X(STD, "std", 1, OT_KIND_COMPOSITE, NULL, OT_FLAG_FLOAT, none) \
    X(CLIP, "clip", 1, OT_KIND_COMPOSITE, NULL, 0, none) \
    X(SOFTMAX, "softmax", 1, OT_KIND_COMPOSITE, NULL, OT_FLAG_FLOAT, none) \
    X(LOGSOFTMAX, "logsoftmax", 1, OT_KIND_COMPOSITE, NULL, OT_FLAG_FLOAT, none) \
    X(CROSS_ENTROPY, "cross_entropy", 2, OT_KIND_COMPOSITE, NULL, OT_FLAG_FLOAT, none) \
    X(SQUARED_L2, "squared_l2", 1, OT_KIND_COMPOSITE, NULL, 0, none) \
    X(EXPM1, "expm1", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, expm1) \
    X(CUSTOM1, "custom1", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT | OT_FLAG_CUSTOM, none) \
    X(CUSTOM2, "custom2", 2, OT_KIND_BINARY, NULL, OT_FLAG_FLOAT | OT_FLAG_CUSTOM, none) \
    X(KEEP, "keep", 1, OT_KIND_SPECIAL, NULL, 0, none) \
    X(SLICE, "slice", 1, OT_KIND_SHAPE, NULL, 0, none) \
    X(RESHAPE, "reshape", 1, OT_KIND_SHAPE, NULL, 0, none) \
    X(CONCAT, "concat", 2, OT_KIND_SPECIAL, NULL, 0, none) \
    X(ERF, "erf", 1, OT_KIND_UNARY, NULL, OT_FLAG_FLOAT, erf) \
    X(CUSTOM_STRUCT, "custom_struct", 2, OT_KIND_SPECIAL, NULL, OT_FLAG_FLOAT | OT_FLAG_CUSTOM, none) \
    X(CONV, "conv", 2, OT_KIND_CONV, NULL, 0, none) \
    X(CONV_TRANSPOSE, "conv_transpose", 2, OT_KIND_CONV, NULL, 0, none) \
    X(CONV_WGRAD, "conv_wgrad", 2, OT_KIND_CONV, NULL, 0, none) \
    X(MAX_POOL, "max_pool", 1, OT_KIND_CONV, NULL, 0, none) \
    X(MAX_POOL_GRAD, "max_pool_grad", 2, OT_KIND_CONV, NULL, 0, none) \
    X(MAX_POOL_TAKE, "max_pool_take", 2, OT_KIND_CONV, NULL, 0, none) \
    X(AVG_POOL, "avg_pool", 1, OT_KIND_CONV, NULL, 0, none) \
    X(AVG_POOL_GRAD, "avg_pool_grad", 1, OT_KIND_CONV, NULL, 0, none) \
    X(TAKE, "take", 2, OT_KIND_CONV, NULL, 0, none) \
    X(SCATTER_ADD, "scatter_add", 2, OT_KIND_CONV, NULL, 0, none) \
    X(SELECT, "select", 2, OT_KIND_CONV, NULL, 0, none) \
    X(TRIL, "tril", 1, OT_KIND_CONV, NULL, 0, none) \
    X(TRIU, "triu", 1, OT_KIND_CONV, NULL, 0, none) \
    X(CUMSUM, "cumulative_sum", 1, OT_KIND_CONV, NULL, 0, none) \
    X(TOPK, "topk", 1, OT_KIND_CONV, NULL, 0, none) \
    X(TAKE_ALONG, "take_along", 2, OT_KIND_CONV, NULL, 0, none) \
    X(SCATTER_ALONG, "scatter_along", 2, OT_KIND_CONV, NULL, 0, none) \
    X(ATTENTION, "attention", 2, OT_KIND_CONV, NULL, 0, none) \
    X(ATTENTION_GRAD, "attention_grad", 2, OT_KIND_CONV, NULL, 0, none)

typedef enum ot_op {
    OT_OP_NONE = -1,
    OT_OP_FINITE = 0,
    OT_OP_NEG = 1,
    OT_OP_ABS = 2,
    OT_OP_SGN = 3,
    OT_OP_SQRT = 4,
    OT_OP_SQR = 5,
    OT_OP_EXP = 6,
    OT_OP_EXP2 = 7,
    OT_OP_LOG = 8,
    OT_OP_LOG2 = 9,
    OT_OP_SAFELOG = 10,
    OT_OP_SIG = 11,
    OT_OP_SIG2 = 12,
    OT_OP_TANH = 13,
    OT_OP_TANH2 = 14,
    OT_OP_RINT = 15,
    OT_OP_RSQRT = 16,
    OT_OP_RECIP = 17,
    OT_OP_RELU = 18,
    OT_OP_SIN = 19,
    OT_OP_COS = 20,
    OT_OP_ADD = 21,
    OT_OP_SUB = 22,
    OT_OP_MUL = 23,
    OT_OP_DIV = 24,
    OT_OP_POW = 25,
    OT_OP_EQ = 26,
    OT_OP_NE = 27,
    OT_OP_LT = 28,
    OT_OP_LE = 29,
    OT_OP_GT = 30,
    OT_OP_GE = 31,
    OT_OP_MINIMUM = 32,
    OT_OP_MAXIMUM = 33,
    OT_OP_DOT = 34,
    OT_OP_BATCHED_DOT = 35,
    OT_OP_SUM = 36,
    OT_OP_MAX = 37,
    OT_OP_MIN = 38,
    OT_OP_MEAN = 39,
    OT_OP_ARGMAX = 40,
    OT_OP_ARGMIN = 41,
    OT_OP_TRANSPOSE = 42,
    OT_OP_CAST = 43,
    OT_OP_ONEHOT = 44,
    OT_OP_RAND = 45,
    OT_OP_VAR = 46,
    OT_OP_STD = 47,
    OT_OP_CLIP = 48,
    OT_OP_SOFTMAX = 49,
    OT_OP_LOGSOFTMAX = 50,
    OT_OP_CROSS_ENTROPY = 51,
    OT_OP_SQUARED_L2 = 52,
    OT_OP_EXPM1 = 53,
    OT_OP_CUSTOM1 = 54,
    OT_OP_CUSTOM2 = 55,
    OT_OP_KEEP = 56,
    OT_OP_SLICE = 57,
    OT_OP_RESHAPE = 58,
    OT_OP_CONCAT = 59,
    OT_OP_ERF = 60,
    OT_OP_CUSTOM_STRUCT = 61,
    OT_OP_CONV = 62,
    OT_OP_CONV_TRANSPOSE = 63,
    OT_OP_CONV_WGRAD = 64,
    OT_OP_MAX_POOL = 65,
    OT_OP_MAX_POOL_GRAD = 66,
    OT_OP_MAX_POOL_TAKE = 67,
    OT_OP_AVG_POOL = 68,
    OT_OP_AVG_POOL_GRAD = 69,
    OT_OP_TAKE = 70,
    OT_OP_SCATTER_ADD = 71,
    OT_OP_SELECT = 72,
    OT_OP_TRIL = 73,
    OT_OP_TRIU = 74,
    OT_OP_CUMSUM = 75,
    OT_OP_TOPK = 76,
    OT_OP_TAKE_ALONG = 77,
    OT_OP_SCATTER_ALONG = 78,
    OT_OP_ATTENTION = 79,
    OT_OP_ATTENTION_GRAD = 80,
    OT_OP_COUNT = 81
} ot_op;

/* Unary elementwise. */
#define ot_finite(x) OT__UN(OT_OP_FINITE, x)     /* 1 where finite, else 0 */
#define ot_neg(x) OT__UN(OT_OP_NEG, x)
#define ot_abs(x) OT__UN(OT_OP_ABS, x)
#define ot_sgn(x) OT__UN(OT_OP_SGN, x)           /* -1, 0, 1; NaN stays NaN */
#define ot_sqrt(x) OT__UN(OT_OP_SQRT, x)
#define ot_sqr(x) OT__UN(OT_OP_SQR, x)
#define ot_exp(x) OT__UN(OT_OP_EXP, x)
#define ot_exp2(x) OT__UN(OT_OP_EXP2, x)
#define ot_log(x) OT__UN(OT_OP_LOG, x)
#define ot_log2(x) OT__UN(OT_OP_LOG2, x)
#define ot_safelog(x) OT__UN(OT_OP_SAFELOG, x)   /* log(maximum(x, exp(-50))) */
#define ot_sig(x) OT__UN(OT_OP_SIG, x)           /* 1 / (1 + exp(-x)) */
#define ot_sig2(x) OT__UN(OT_OP_SIG2, x)         /* 1 / (1 + exp2(-x)) */
#define ot_tanh(x) OT__UN(OT_OP_TANH, x)
#define ot_tanh2(x) OT__UN(OT_OP_TANH2, x)       /* (exp2(2x)-1)/(exp2(2x)+1) */
#define ot_rint(x) OT__UN(OT_OP_RINT, x)         /* round half to even */
#define ot_rsqrt(x) OT__UN(OT_OP_RSQRT, x)
#define ot_recip(x) OT__UN(OT_OP_RECIP, x)
#define ot_relu(x) OT__UN(OT_OP_RELU, x)         /* maximum(x, 0) */
#define ot_sin(x) OT__UN(OT_OP_SIN, x)
#define ot_cos(x) OT__UN(OT_OP_COS, x)
#define ot_expm1(x) OT__UN(OT_OP_EXPM1, x)       /* exp(x) - 1, accurate near 0 */
#define ot_erf(x) OT__UN(OT_OP_ERF, x)           /* the error function */

/* Binary elementwise, NumPy broadcasting. Compares give 1 or 0. minimum and
 * maximum propagate NaN. */
#define ot_add(x, y) OT__BIN(OT_OP_ADD, x, y)
#define ot_sub(x, y) OT__BIN(OT_OP_SUB, x, y)
#define ot_mul(x, y) OT__BIN(OT_OP_MUL, x, y)
#define ot_div(x, y) OT__BIN(OT_OP_DIV, x, y)
#define ot_pow(x, y) OT__BIN(OT_OP_POW, x, y)
#define ot_eq(x, y) OT__BIN(OT_OP_EQ, x, y)
#define ot_ne(x, y) OT__BIN(OT_OP_NE, x, y)
#define ot_lt(x, y) OT__BIN(OT_OP_LT, x, y)
#define ot_le(x, y) OT__BIN(OT_OP_LE, x, y)
#define ot_gt(x, y) OT__BIN(OT_OP_GT, x, y)
#define ot_ge(x, y) OT__BIN(OT_OP_GE, x, y)
#define ot_minimum(x, y) OT__BIN(OT_OP_MINIMUM, x, y)
#define ot_maximum(x, y) OT__BIN(OT_OP_MAXIMUM, x, y)

#endif /* OPTREE_OPS_H */
