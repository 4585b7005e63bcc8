#!/usr/bin/python3
"""diff_numpy.py - differential tests of optree's backends against NumPy.

    /usr/bin/python3 tests/diff_numpy.py build/liboptree.so [--seed N] [--only OPS] [-v]

Two phases. The first (most of this file) runs random, view, empty and
special-value trees on the ref backend, as described below. The second,
"special values through every backend" (the SV_ section near the end),
takes the op list from the library itself (ot_op_name/kind/arity/flags), so
that an op without a NumPy reference fails the run by name (an elementwise op
named like a NumPy ufunc, such as log1p, is tested against that ufunc without
an entry here: add_ufunc_ops), and runs a
table of special values (NaN, -NaN, +-inf, +-0, denormals, exp's and exp2's
edges, +-1000 logits, huge values, int32 extremes) through ref and the cpu
backend under every ISA the CPU has, OT_JIT=0 and 1, threads, OT_FUSION=0
and OT_ULP35, with classes compared exactly and values in ulp budgets; its
cases are named "op dtype special@backend", and "landmarks@backend" checks
the facts issue 13 names against literal values. "NaN gradients dtype
special@backend" checks the gradients of abs, relu, maximum, minimum (every
pair of special values, both operands), clip, max and min against the NaN
rule (optree.h, autodiff "Rules") written element by element in NumPy.
Last, "print@ref" prints random arrays with ot_tensor_print_opts and
compares the text with np.array2string's byte for byte (--only print runs
it alone).

Loads the shared library with ctypes, builds one op tree per trial through the
binding entry point ot_build_at, assigns it into an output tensor on the
"ref" backend (OT_BACKEND in the environment may name another backend) and
compares the result with NumPy computed in float64 from the same input values.

Layout: the ctypes bindings; value, shape and view generators; the op table
(OPS: name, kind, NumPy reference, dtypes, input domain); one trial generator
per op kind; the generic trial runner and comparison; main. A case is one
(op, dtype, scenario); it runs several trials and fails when any trial does.
Every failing case prints one line with the details of its first failures;
the output ends with exactly one line "N passed, M failed" (exit 1 if M > 0).

Tolerances. The ref backend computes every node in double and rounds it to
the node's dtype (f32 ops round, as NumPy's float32 does). So the expected
value of a one-op tree is the float64 NumPy computation on the (f32, f64 or
i32) input values, cast once to the output dtype; an f32 composite (var, std,
softmax, logsoftmax, cross_entropy) may also differ by its ops' roundings,
2^-18 (var, std) or 2^-20 of max(|ref|, scale, 1):
  - f64 outputs: |got - ref| <= 1e-12 * max(|ref|, scale), where scale is
    sum|terms| for sums, means, dots and the composites built on them (the
    usual backward-error bound) and |ref| otherwise; an absolute slack of
    four subnormal ulps (2e-323) covers results in the subnormal range, where
    a relative bound means nothing and libm and NumPy may differ by an ulp.
  - f32 outputs: within 1 ulp of float32(ref) (the double computations of
    optree and NumPy may differ in their last bits, which can flip the one
    rounding to float32); for sums, |got - ref| <= 1e-12 * scale + 1 ulp
    covers cancellation.
  - compares, finite, argmax/argmin, onehot, max/min, transpose, cast and
    every i32 output: exact.
  - NaN must match NaN, and +-inf must match exactly, everywhere. The one
    exception: when the |terms| of a sum overflow double (only possible with
    +-DBL_MAX-sized f64 inputs), IEEE summation is order-dependent and any
    result is accepted for that element.
Integers. Float values stored into i32 outputs (cast, onehot) truncate
toward zero, NaN gives 0, out-of-range values saturate. int32 elementwise
arithmetic (add sub mul neg abs sqr) wraps modulo 2^32 as NumPy's int32
does; the reference computes it exactly in int64 and wraps. An int32 sum is
exact (NumPy's int64 accumulation); one outside int32's range must fail
with OT_EOVERFLOW naming the sum (issue 31), where NumPy would wrap it.

Dtypes follow the promotion rules of include/optree.h: f32 with f64 gives f64; i32 with a float
tensor gives the float; an ot_const is weak and takes the tensor's dtype,
except that a float constant lifts an i32 tensor to f64; OT_FLAG_FLOAT ops
give f64 for i32 operands. Every trial checks the node's shape and dtype.
A weak constant also takes the tensor's dtype in value, as in NumPy: an f32
tensor minus 0.1 subtracts float32(0.1). Scenario 'const' uses constants
exact in float32; scenario 'const_weak' (f32 only) checks this rounding.

Scenarios: random (shapes 0-d to 4-d, broadcasting, every axis with and
without keepdims), views (transposed, stepped with steps 2, -1 and -2,
single columns), empty (zero-size; OT_EEMPTY at build where NumPy has no
identity), special (NaN, +-inf, -0.0, denormals, +-FLT_MAX/DBL_MAX, +-1 mixed
into the data, and every special value or pair of them once), outview
(results written into strided views of a sentinel-filled base, which must
stay untouched elsewhere; into an output the tree broadcasts to; and, for
elementwise ops, in place into operand 0 or its transpose), const, mixed
(binary ops on two dtypes), offset (var/std of data with a large mean),
large (softmax of inputs whose exp overflows), repro (rand), transposed (dot
and batched_dot, f64: every rank combination with transposed inputs - views
with the last two axes swapped and ot_T of a leaf - some with special values)
and blas (the same on shapes up to 70, around BLAS blocking edges). batched_dot
is compared with np.matmul (explicit IEEE products where a value is not finite).
"""

import argparse
import ctypes as C
import math
import os
import sys
import traceback
import warnings
import zlib

import numpy as np

# --------------------------------------------------------------------------
# Bindings (mirror include/optree.h exactly)
# --------------------------------------------------------------------------

MAX_DIMS = 8
F32, F64, I32 = 1, 2, 3
NP_DT = {F32: np.float32, F64: np.float64, I32: np.int32}
DT_NAME = {0: 'default', F32: 'f32', F64: 'f64', I32: 'i32'}
AXIS_ALL = -1000
OT_NONE = -(2 ** 63)
INDEX_ALL, INDEX_RANGE, INDEX_ONE = 0, 1, 2
OT_EEMPTY = -10
OT_EUNSUPPORTED = -7


class OtShape(C.Structure):
    _fields_ = [('ndim', C.c_int), ('dims', C.c_int64 * MAX_DIMS)]


class OtArgs(C.Structure):
    _fields_ = [('spec_', C.c_char_p), ('axis', C.c_int), ('keepdims', C.c_bool),
                ('dtype', C.c_int), ('depth', C.c_int64), ('seed', C.c_uint64),
                ('ddof', C.c_int), ('lo', C.c_double), ('hi', C.c_double),
                ('perm', C.c_int * MAX_DIMS), ('shape', OtShape), ('start', C.c_int64 * MAX_DIMS)]


class OtIndex(C.Structure):
    _fields_ = [('kind', C.c_int), ('start', C.c_int64), ('stop', C.c_int64),
                ('step', C.c_int64)]


class OtBackendOpts(C.Structure):
    _fields_ = [('threads', C.c_int), ('seed', C.c_uint64), ('dtype', C.c_int),
                ('accuracy', C.c_int), ('plan_cache', C.c_int), ('fusion', C.c_int),
                ('rewrite', C.c_char_p), ('isa', C.c_char_p), ('jit', C.c_int),
                ('stream_bytes', C.c_int64), ('stochastic_round', C.c_int)]


def load(path):
    lib = C.CDLL(path)
    P, I, D = C.c_void_p, C.c_int, C.c_double
    sigs = {
        'ot_backend_new': (P, [C.c_char_p, P]),
        'ot_backend_free': (None, [P]),
        'ot_backend_name': (C.c_char_p, [P]),
        'ot_empty': (P, [P, OtShape, I]),
        'ot_array': (P, [P, OtShape, I, P]),
        'ot_slice_at': (P, [P, I, P, C.c_char_p, I]),
        'ot_transpose': (P, [P, P]),
        'ot_tensor_free': (None, [P]),
        'ot_get': (I, [P, P]),
        'ot_build_at': (P, [I, P, P, P, C.c_char_p, I]),
        'ot_tensor_node': (P, [P]),
        'ot_const': (P, [D]),
        'ot_node_shape': (OtShape, [P]),
        'ot_node_dtype': (I, [P]),
        'ot_assign_node': (I, [P, P]),
        'ot_pool_push': (P, []),
        'ot_pool_pop': (I, [P]),
        'ot_errcode': (I, []),
        'ot_errmsg': (C.c_char_p, []),
        'ot_clear_error': (None, []),
        'ot_op_lookup': (I, [C.c_char_p]),
        'ot_op_name': (C.c_char_p, [I]),
        'ot_op_kind': (I, [I]),
        'ot_op_arity': (I, [I]),
        'ot_op_flags': (C.c_uint, [I]),
        'ot_autodiff_new': (P, [P, P]),
        'ot_autodiff_grad': (P, [P, P]),
        'ot_autodiff_free': (None, [P]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


def mkshape(shape):
    s = OtShape()
    s.ndim = len(shape)
    for i, d in enumerate(shape):
        s.dims[i] = int(d)
    return s


def shape_tuple(s):
    return tuple(int(s.dims[i]) for i in range(s.ndim))


def mkargs(axis=None, keepdims=False, dtype=0, depth=0, seed=0, ddof=0, lo=0.0, hi=0.0,
           perm=None, shape=None, start=None):
    a = OtArgs()
    a.spec_ = None
    a.axis = AXIS_ALL if axis is None else int(axis)
    a.keepdims = bool(keepdims)
    a.dtype = dtype
    a.depth = depth
    a.seed = seed
    a.ddof = ddof
    a.lo = lo
    a.hi = hi
    for i, p in enumerate(perm or ()):
        a.perm[i] = int(p)
    if shape is not None:
        a.shape = mkshape(shape)
    for i, v in enumerate(start or ()):
        a.start[i] = int(v)
    return a


class Lib:
    """The library, one ref backend and the op ids, looked up by name."""

    def __init__(self, path):
        self.c = load(path)
        self.be = self.c.ot_backend_new(b'ref', None)
        if not self.be:
            raise SystemExit('ot_backend_new("ref") failed: %s' % self.errmsg())
        self.ids = {}

    def op(self, name):
        if name not in self.ids:
            self.ids[name] = self.c.ot_op_lookup(name.encode())
        return self.ids[name]

    def errmsg(self):
        m = self.c.ot_errmsg()
        return m.decode(errors='replace') if m else ''

    def build(self, name, a, b=None, args=None):
        args = args if args is not None else mkargs()
        return self.c.ot_build_at(self.op(name), a, b, C.byref(args), None, 0)

    def array(self, arr, dt):
        arr = np.array(arr, dtype=NP_DT[dt], order='C')   # keeps 0-d arrays 0-d
        return self.c.ot_array(self.be, mkshape(arr.shape), dt, arr.ctypes.data)

    def get(self, t, shape, dt):
        host = np.zeros(shape, dtype=NP_DT[dt])
        rc = self.c.ot_get(t, host.ctypes.data)
        return rc, host


# --------------------------------------------------------------------------
# Values, shapes and views
# --------------------------------------------------------------------------

FLT_MAX = float(np.finfo(np.float32).max)
DBL_MAX = float(np.finfo(np.float64).max)
SPECIALS = {
    F32: [math.nan, math.inf, -math.inf, -0.0, 0.0, 1e-45, -1e-45, 1.1754944e-38,
          FLT_MAX, -FLT_MAX, 1.0, -1.0],
    F64: [math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, -5e-324, 2.2250738585072014e-308,
          DBL_MAX, -DBL_MAX, FLT_MAX, 1.0, -1.0],
    I32: [0, 1, -1, 2, 2147483647, -2147483648, -2147483647, 65536, -65536],
}
SENTINEL = {F32: 12345.5, F64: 12345.5, I32: 12345}
OUT_SENTINEL = {F32: -7777.25, F64: -7777.25, I32: -7777}


def values(rng, shape, dt, dom):
    """Random values of a domain, in dtype dt."""
    if dt == I32:
        if dom in ('pos', 'nonzero'):
            v = rng.integers(1, 21, shape)
        elif dom == 'cmp':
            v = rng.integers(-3, 4, shape)
        else:
            v = rng.integers(-20, 21, shape)
        return np.asarray(v, dtype=np.int32)
    if dom == 'real':
        v = rng.standard_normal(shape) * 3
    elif dom == 'pos':
        v = np.exp(rng.uniform(-5, 5, shape))
    elif dom == 'exp':
        v = rng.uniform(-30, 30, shape)
    elif dom == 'trig':
        v = rng.uniform(-20, 20, shape)
    elif dom == 'nonzero':
        v = rng.standard_normal(shape) * 3
        v = np.where(np.abs(v) < 1e-3, 1.0, v)
    elif dom == 'cmp':                  # small set: equal pairs are frequent
        v = rng.integers(-3, 4, shape) / 2.0
    elif dom == 'rint':                 # many exact ties
        v = np.where(rng.random(shape) < 0.5, rng.integers(-10, 11, shape) / 2.0,
                     rng.standard_normal(shape) * 4)
    elif dom == 'safelog':              # around the exp(-50) floor, and below 0
        v = rng.choice([0.0, 1e-30, -1.0, np.exp(-50), 2e-22, 1e-21], shape)
        v = np.where(rng.random(shape) < 0.5, np.exp(rng.uniform(-60, 5, shape)), v)
    elif dom == 'prob':
        v = rng.uniform(0.001, 1.0, shape)
    elif dom == 'unit':
        v = rng.uniform(0.0, 1.0, shape)
    elif dom == 'pow_exp':
        v = np.where(rng.random(shape) < 0.3, rng.integers(-3, 4, shape) * 1.0,
                     rng.standard_normal(shape) * 2)
    else:
        raise ValueError(dom)
    return np.asarray(v, dtype=NP_DT[dt])


def inject(rng, arr, dt, frac=0.4):
    """Replaces about frac of the elements with special values."""
    arr = np.array(arr, dtype=NP_DT[dt])
    if arr.size:
        mask = rng.random(arr.shape) < frac
        sp = np.array(SPECIALS[dt], dtype=NP_DT[dt])
        arr[mask] = rng.choice(sp, int(mask.sum()))
    return arr


def rand_shape(rng, nd=None, zero=False, lo=1, hi=5):
    nd = int(rng.integers(0, 5)) if nd is None else nd
    dims = [int(d) for d in rng.integers(lo, hi + 1, nd)]
    if zero and nd:
        dims[int(rng.integers(nd))] = 0
    return tuple(dims)


def bcast_operand(rng, shape, keep_dim=None):
    """A shape that broadcasts to shape: some leading dims dropped, some 1s."""
    nd = len(shape)
    drop = int(rng.integers(0, nd + 1)) if rng.random() < 0.4 else 0
    if keep_dim is not None and keep_dim < drop:
        drop = keep_dim
    dims = list(shape[drop:])
    for i in range(len(dims)):
        if i + drop != keep_dim and rng.random() < 0.3:
            dims[i] = 1
    return tuple(dims)


class View:
    """How a logical array of shape `shape` is laid out as a view of a larger
    base: np_view(base) is the NumPy view, ot_view(lib, t) makes the optree
    view of a base tensor t, base_shape is the base's shape."""

    def __init__(self, rng, shape, kind):
        self.kind = kind
        self.shape = tuple(shape)
        nd = len(shape)
        if kind == 'contig':
            self.base_shape = self.shape
            self.desc = 'contig'
        elif kind == 'T' or kind == 'Tlast':
            if kind == 'Tlast':          # the last two axes swapped
                self.kind = kind = 'T'
                p = list(range(nd))
                if nd >= 2:
                    p[-2], p[-1] = p[-1], p[-2]
                self.perm = p
            elif nd < 2 or rng.random() < 0.5:
                self.perm = None
                p = list(range(nd))[::-1]
            else:
                p = [int(i) for i in rng.permutation(nd)]
                self.perm = p
            self.p = p
            base = [0] * nd
            for i in range(nd):
                base[p[i]] = shape[i]
            self.base_shape = tuple(base)
            self.desc = 'T%s' % ('' if self.perm is None else str(tuple(p)))
        elif kind == 'step':
            choices = []
            for i in range(nd):
                choices.append(['all', 's2', 'r1', 'r2'][int(rng.integers(0, 4))])
            if nd and all(c == 'all' for c in choices):
                choices[int(rng.integers(nd))] = 'r2'
            self.choices = choices
            base, self.np_idx, self.ot_idx = [], [], []
            for d, c in zip(shape, choices):
                if c == 'all':
                    base.append(d)
                    self.np_idx.append(slice(None))
                    self.ot_idx.append((INDEX_ALL, 0, 0, 1))
                elif c == 's2':
                    base.append(2 * d + 1)
                    self.np_idx.append(slice(1, None, 2))
                    self.ot_idx.append((INDEX_RANGE, 1, OT_NONE, 2))
                elif c == 'r1':
                    base.append(d)
                    self.np_idx.append(slice(None, None, -1))
                    self.ot_idx.append((INDEX_RANGE, OT_NONE, OT_NONE, -1))
                else:
                    base.append(2 * d)
                    self.np_idx.append(slice(-1, None, -2))
                    self.ot_idx.append((INDEX_RANGE, -1, OT_NONE, -2))
            self.base_shape = tuple(base)
            names = {'all': ':', 's2': '1::2', 'r1': '::-1', 'r2': '-1::-2'}
            self.desc = '[%s]' % ','.join(names[c] for c in choices)
        elif kind == 'col':
            k = int(rng.integers(1, 4))
            self.j = int(rng.integers(0, k))
            self.base_shape = self.shape + (k,)
            self.np_idx = [slice(None)] * nd + [self.j]
            self.ot_idx = [(INDEX_ALL, 0, 0, 1)] * nd + [(INDEX_ONE, self.j, 0, 1)]
            self.desc = '[%s%d]' % (':,' * nd, self.j)
        else:
            raise ValueError(kind)

    def np_view(self, base):
        if self.kind == 'contig':
            return base
        if self.kind == 'T':
            return np.transpose(base, self.p)
        return base[tuple(self.np_idx) + (Ellipsis,)]     # a view, even when 0-d

    def ot_view(self, lib, t):
        if self.kind == 'contig':
            return None
        if self.kind == 'T':
            if self.perm is None:
                return lib.c.ot_transpose(t, None)
            perm = (C.c_int * MAX_DIMS)(*self.perm)
            return lib.c.ot_transpose(t, C.cast(perm, C.c_void_p))
        idx = (OtIndex * len(self.ot_idx))(*[OtIndex(*x) for x in self.ot_idx])
        return lib.c.ot_slice_at(t, len(self.ot_idx), C.cast(idx, C.c_void_p), None, 0)


def make_input(lib, rng, arr, dt, kind, owned):
    """An optree tensor holding arr (logical values), laid out as view kind.
    Everything created is appended to owned (freed by the caller)."""
    if kind == 'step' and not arr.shape:
        kind = 'col'                 # a 0-d operand has no dim to step over
    v = View(rng, arr.shape, kind)
    if kind == 'contig':
        t = lib.array(arr, dt)
        if not t:
            raise TrialError('ot_array%s failed: %s' % (arr.shape, lib.errmsg()))
        owned.append(t)
        return t, v.desc
    base = np.full(v.base_shape, SENTINEL[dt], dtype=NP_DT[dt])
    v.np_view(base)[...] = arr
    t = lib.array(base, dt)
    if not t:
        raise TrialError('ot_array%s failed: %s' % (base.shape, lib.errmsg()))
    owned.append(t)
    tv = v.ot_view(lib, t)
    if not tv:
        raise TrialError('view %s of %s failed: %s' % (v.desc, base.shape, lib.errmsg()))
    owned.append(tv)
    return tv, v.desc


class TrialError(Exception):
    pass


def input_on(lib, rng, be, arr, dt, kind, owned):
    """make_input's tensor on backend be (the structured ops' checks run
    each case on ref and cpu)."""
    saved, lib.be = lib.be, be
    try:
        return make_input(lib, rng, np.asarray(arr), dt, kind, owned)[0]
    finally:
        lib.be = saved


def node_value(lib, be, node, owned):
    """node assigned into a new tensor on be (appended to owned), as a
    float64 array; TrialError naming the builder's or the assignment's
    error."""
    c = lib.c
    if not node:
        raise TrialError('build: %s' % lib.errmsg())
    shape, dt = shape_tuple(c.ot_node_shape(node)), c.ot_node_dtype(node)
    out = c.ot_empty(be, mkshape(shape), dt)
    owned.append(out)
    if not out or c.ot_assign_node(out, node):
        raise TrialError('assign: %s' % lib.errmsg())
    return lib.get(out, shape, dt)[1].astype(np.float64)


# --------------------------------------------------------------------------
# NumPy references (float64 in, float64 out)
# --------------------------------------------------------------------------

LN2 = math.log(2.0)
SAFELOG_FLOOR = math.exp(-50.0)


class Empty(Exception):
    """The reference has no value: a reduction without identity over zero
    elements (NumPy raises ValueError); optree must fail with OT_EEMPTY."""


def np_call(fn, *a, **kw):
    try:
        return fn(*a, **kw)
    except ValueError as e:
        if 'zero-size' in str(e) or 'empty' in str(e):
            raise Empty() from None
        raise


def safelog(x):
    return np.log(np.maximum(x, SAFELOG_FLOOR))     # maximum keeps NaN


def finite_abs(x):
    return np.where(np.isfinite(x), np.abs(x), 0.0)


def overflowed(scale):
    """Elements whose finite |terms| sum overflows: order-dependent in IEEE."""
    return ~np.isfinite(np.asarray(scale, dtype=np.float64))


def to_i32(v):
    v = np.asarray(v, dtype=np.float64)
    with np.errstate(invalid='ignore'):
        r = np.where(np.isnan(v), 0.0, np.clip(np.trunc(v), -2147483648.0, 2147483647.0))
    return r.astype(np.int32)


def red_sum(x, axis, kd):
    scale = np.sum(finite_abs(x), axis=axis, keepdims=kd)
    return np.sum(x, axis=axis, keepdims=kd), scale, overflowed(scale)


def red_mean(x, axis, kd):
    n = x.size if axis is None else x.shape[axis]
    scale = np.sum(finite_abs(x), axis=axis, keepdims=kd)
    return np.mean(x, axis=axis, keepdims=kd), scale / max(n, 1), overflowed(scale)


def red_var(x, axis, kd, ddof, root):
    s = np.sum(finite_abs(x), axis=axis, keepdims=kd)
    fn = np.std if root else np.var
    r = fn(x, axis=axis, keepdims=kd, ddof=ddof)
    return r, np.abs(r), overflowed(s)


def ref_softmax(x, axis, log):
    if (x.size if axis is None else x.shape[axis]) == 0:
        # an empty axis: an empty result, as PyTorch's (NumPy's max of it,
        # which the shift would take, has no identity)
        return x.copy(), np.zeros_like(x), None
    m = np_call(np.max, x, axis=axis, keepdims=True)
    s = x - m
    tot = np.sum(np.exp(s), axis=axis, keepdims=True)
    if log:
        lse = np.log(tot)
        # tot >= 1 carries a relative rounding error of a few eps, which log
        # turns into an absolute error of a few eps: hence the + 1
        return s - lse, np.abs(s) + np.abs(lse) + 1.0, None
    r = np.exp(s) / tot
    return r, np.abs(r), None


def ref_xent(p, t, axis, kd):
    terms = t * safelog(p)
    scale = np.sum(finite_abs(terms), axis=axis, keepdims=kd)
    return -np.sum(terms, axis=axis, keepdims=kd), scale, overflowed(scale)


def ref_dot(a, b):
    a2 = a if a.ndim == 2 else a[None, :]
    b2 = b if b.ndim == 2 else b[:, None]
    # explicit products and sums: IEEE-faithful (no BLAS shortcuts for 0*inf)
    prod = a2[:, :, None] * b2[None, :, :]
    r = prod.sum(axis=1)
    scale = (finite_abs(a2)[:, :, None] * finite_abs(b2)[None, :, :]).sum(axis=1)
    amb = overflowed(scale)
    if a.ndim == 1:
        r, scale, amb = r[0], scale[0], amb[0]
    if b.ndim == 1:
        r, scale, amb = r[..., 0], scale[..., 0], amb[..., 0]
    return r, scale, amb


def ref_batched_dot(a, b):
    """neon's batched_dot, (B, M, K) . (B, K, N), a batch of 1 shared: the
    value is np.matmul's; where a product or sum is not finite, the explicit
    IEEE products and sums decide (NaN, +-inf), as in ref_dot."""
    prod = a[:, :, :, None] * b[:, None, :, :]          # (B, M, K, N), broadcast B
    explicit = prod.sum(axis=2)
    mm = np.matmul(a, b)
    r = np.where(np.isfinite(explicit), mm, explicit)
    scale = (finite_abs(a)[:, :, :, None] * finite_abs(b)[:, None, :, :]).sum(axis=2)
    return r, scale, overflowed(scale)


def ref_onehot(idx, depth, axis):
    r = (idx[..., None] == np.arange(depth, dtype=np.float64)).astype(np.float64)
    return np.moveaxis(r, -1, axis)


def ref_cast(x, dt):
    if dt == I32:
        return to_i32(x).astype(np.float64)
    return x.astype(NP_DT[dt]).astype(np.float64)


# --------------------------------------------------------------------------
# The op table
# --------------------------------------------------------------------------

FD = (F32, F64)
FDI = (F32, F64, I32)


class Op:
    """name: optree's name; kind: which trial generator drives it; ref: the
    NumPy reference; dtypes: input dtypes tested; dom: input domain of the
    random trials (a pair for binary ops); res: result dtype rule ('same',
    'float': i32 gives f64, 'index': i32); exact: compare exactly; wrap: on
    i32 operands the op is int32 arithmetic modulo 2^32, as in NumPy."""

    def __init__(self, name, kind, ref=None, dtypes=FD, dom='real', res='same', exact=False,
                 wrap=False):
        self.name, self.kind, self.ref, self.dtypes = name, kind, ref, dtypes
        self.dom, self.res, self.exact, self.wrap = dom, res, exact, wrap


# NumPy has no erf: math.erf element by element, in float64.
erf = np.vectorize(math.erf, otypes=[np.float64])


def f2(fn):
    return lambda x: fn(x).astype(np.float64)


OPS = [
    # unary elementwise
    Op('finite', 'unary', f2(np.isfinite), FDI, 'real', exact=True),
    Op('neg', 'unary', np.negative, FDI, wrap=True),
    Op('abs', 'unary', np.abs, FDI, wrap=True),
    Op('sgn', 'unary', np.sign, FDI, exact=True),
    Op('sqrt', 'unary', np.sqrt, FD, 'pos', 'float'),
    Op('sqr', 'unary', lambda x: x * x, FDI, wrap=True),
    Op('exp', 'unary', np.exp, FDI, 'exp', 'float'),
    Op('exp2', 'unary', np.exp2, FD, 'exp', 'float'),
    Op('log', 'unary', np.log, FD, 'pos', 'float'),
    Op('log2', 'unary', np.log2, FD, 'pos', 'float'),
    Op('safelog', 'unary', safelog, FD, 'safelog', 'float'),
    Op('sig', 'unary', lambda x: 1.0 / (1.0 + np.exp(-x)), FD, 'real', 'float'),
    Op('sig2', 'unary', lambda x: 1.0 / (1.0 + np.exp2(-x)), FD, 'real', 'float'),
    Op('tanh', 'unary', np.tanh, FD, 'real', 'float'),
    Op('tanh2', 'unary', lambda x: np.tanh(x * LN2), FD, 'real', 'float'),
    Op('rint', 'unary', np.rint, FD, 'rint', exact=True),
    Op('rsqrt', 'unary', lambda x: 1.0 / np.sqrt(x), FD, 'pos', 'float'),
    Op('recip', 'unary', lambda x: 1.0 / x, FD, 'nonzero', 'float'),
    Op('relu', 'unary', lambda x: np.maximum(x, 0.0), FDI),
    Op('sin', 'unary', np.sin, FD, 'trig', 'float'),
    Op('cos', 'unary', np.cos, FD, 'trig', 'float'),
    Op('erf', 'unary', erf, FD, 'real', 'float'),
    # binary elementwise, broadcasting
    Op('add', 'binary', np.add, FDI, ('real', 'real'), wrap=True),
    Op('sub', 'binary', np.subtract, FDI, ('real', 'real'), wrap=True),
    Op('mul', 'binary', np.multiply, FDI, ('real', 'real'), wrap=True),
    Op('div', 'binary', np.divide, FD, ('real', 'nonzero'), 'float'),
    Op('pow', 'binary', np.power, FD, ('pos', 'pow_exp')),
    Op('eq', 'binary', lambda a, b: (a == b) * 1.0, FDI, ('cmp', 'cmp'), exact=True),
    Op('ne', 'binary', lambda a, b: (a != b) * 1.0, FDI, ('cmp', 'cmp'), exact=True),
    Op('lt', 'binary', lambda a, b: (a < b) * 1.0, FDI, ('cmp', 'cmp'), exact=True),
    Op('le', 'binary', lambda a, b: (a <= b) * 1.0, FDI, ('cmp', 'cmp'), exact=True),
    Op('gt', 'binary', lambda a, b: (a > b) * 1.0, FDI, ('cmp', 'cmp'), exact=True),
    Op('ge', 'binary', lambda a, b: (a >= b) * 1.0, FDI, ('cmp', 'cmp'), exact=True),
    Op('minimum', 'binary', np.minimum, FDI, ('cmp', 'real'), exact=True),
    Op('maximum', 'binary', np.maximum, FDI, ('cmp', 'real'), exact=True),
    Op('dot', 'dot', ref_dot, FD),
    Op('batched_dot', 'batched_dot', ref_batched_dot, FD),
    # reductions: ref(x, axis, keepdims) -> value or (value, scale, ambiguous)
    Op('sum', 'reduce', red_sum, FDI, wrap=True),
    Op('max', 'reduce', lambda x, ax, kd: np_call(np.max, x, axis=ax, keepdims=kd), FDI,
       exact=True),
    Op('min', 'reduce', lambda x, ax, kd: np_call(np.min, x, axis=ax, keepdims=kd), FDI,
       exact=True),
    Op('mean', 'reduce', red_mean, FDI, res='float'),
    Op('argmax', 'reduce', lambda x, ax, kd: np_call(np.argmax, x, axis=ax, keepdims=kd) * 1.0,
       FDI, 'cmp', 'index', exact=True),
    Op('argmin', 'reduce', lambda x, ax, kd: np_call(np.argmin, x, axis=ax, keepdims=kd) * 1.0,
       FDI, 'cmp', 'index', exact=True),
    # others
    Op('transpose', 'transpose', None, FDI, exact=True),
    Op('cast', 'cast', ref_cast, FDI, exact=True),
    Op('onehot', 'onehot', ref_onehot, FDI, exact=True),
    Op('rand', 'rand', None, FD),
    # a checkpoint: the identity, stored by the cpu backend (driven as a unary op)
    Op('keep', 'unary', lambda x: x, FDI, exact=True),
    # layout ops of expressions (as ot_build_at's args: start, step, count)
    Op('slice', 'slice', None, FDI, exact=True),
    Op('reshape', 'reshape', None, FDI, exact=True),
    Op('concat', 'concat', None, FDI, exact=True),
    # composites
    Op('var', 'var', lambda x, ax, kd, dd: red_var(x, ax, kd, dd, False), FD, res='float'),
    Op('std', 'var', lambda x, ax, kd, dd: red_var(x, ax, kd, dd, True), FD, res='float'),
    Op('clip', 'clip', lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi), FD),
    Op('softmax', 'softmax', lambda x, ax: ref_softmax(x, ax, False), FD, res='float'),
    Op('logsoftmax', 'softmax', lambda x, ax: ref_softmax(x, ax, True), FD, res='float'),
    Op('cross_entropy', 'xent', ref_xent, FD, ('prob', 'unit'), 'float'),
    Op('squared_l2', 'reduce',
       lambda x, ax, kd: (np.sum(x * x, axis=ax, keepdims=kd),) * 2 + (None,), FD),
]

SCENARIOS = {
    'unary': ['random', 'views', 'empty', 'special', 'outview'],
    'binary': ['random', 'views', 'empty', 'special', 'outview', 'const', 'const_weak'],
    'reduce': ['random', 'views', 'empty', 'special', 'outview'],
    'dot': ['random', 'views', 'empty', 'special', 'outview', 'transposed', 'blas'],
    'batched_dot': ['random', 'views', 'empty', 'special', 'outview', 'transposed', 'blas'],
    'transpose': ['random', 'views', 'empty', 'special', 'outview'],
    'slice': ['random', 'views', 'empty', 'special', 'outview'],
    'reshape': ['random', 'views', 'empty', 'special', 'outview'],
    'concat': ['random', 'views', 'empty', 'special', 'outview'],
    'cast': ['random', 'views', 'empty', 'special', 'outview'],
    'onehot': ['random', 'views', 'empty', 'special', 'outview'],
    'rand': ['random', 'repro', 'empty', 'outview'],
    'var': ['random', 'views', 'empty', 'special', 'outview', 'offset'],
    'clip': ['random', 'views', 'empty', 'special', 'outview'],
    'softmax': ['random', 'views', 'empty', 'special', 'outview', 'large'],
    'xent': ['random', 'views', 'empty', 'special', 'outview'],
}
# Scenarios that only make sense for some dtypes.
SCENARIO_DTYPES = {'const_weak': (F32,), 'transposed': (F64,), 'blas': (F64,)}
# Binary ops also get one 'mixed' case: operands of different dtypes.
MIXED_PAIRS = [(F32, F64), (F64, F32), (I32, F32), (F32, I32), (I32, F64)]


def promote(*dts):
    dts = set(dts)
    if len(dts) == 1:
        return dts.pop()
    return F64 if F64 in dts else F32


def result_dtype(op, dt):
    if op.res == 'index':
        return I32
    if op.res == 'float' and dt == I32:
        return F64
    return dt


# --------------------------------------------------------------------------
# Trials
# --------------------------------------------------------------------------

class Trial:
    """One tree to build and check. operands: ('t', array, view kind) or
    ('c', value); inner: an op applied to operand 0 first (ref must include
    it); ref(*float64 operands) gives the value or (value, scale, ambiguous)
    and raises Empty when optree must refuse with OT_EEMPTY."""

    def __init__(self, desc, operands, ref, dtype, args=None, exact=False, out='contig',
                 inner=None):
        self.desc, self.operands, self.ref, self.dtype = desc, operands, ref, dtype
        self.args = args if args is not None else mkargs()
        self.exact, self.out, self.inner = exact, out, inner


VIEW_KINDS = ['T', 'step', 'col']
# Output kinds: a view of a sentinel-filled base (T, step, col); an output
# with an extra leading dim of 2 that the tree broadcasts to (bcast); and,
# for elementwise ops, operand 0's own tensor (alias, in place) or its
# transpose (aliasT, square 2-D): every input is read before out is written.
OUT_KINDS = ['T', 'step', 'col', 'bcast']
EW_OUT_KINDS = ['T', 'step', 'col', 'bcast', 'alias', 'aliasT']


def shapes_for(rng, scen, count=6):
    """Shapes for a scenario: 0-d to 4-d, zero-size ones for 'empty'."""
    if scen == 'empty':
        fixed = [(0,), (0, 3), (3, 0), (1, 0, 5), (2, 0, 0), (3, 0, 1, 0), (0, 2, 3, 1)]
        return fixed + [rand_shape(rng, int(rng.integers(1, 5)), zero=True)
                        for _ in range(max(0, count - len(fixed)))]
    if scen in ('views', 'outview'):
        return [rand_shape(rng, nd) for nd in (1, 2, 2, 3, 4)] + \
               [rand_shape(rng, int(rng.integers(1, 5))) for _ in range(max(0, count - 5))]
    return [rand_shape(rng, nd) for nd in range(5)] + \
           [rand_shape(rng, int(rng.integers(0, 5)), lo=1, hi=7) for _ in range(max(0, count - 5))]


def in_values(rng, shape, dt, dom, scen):
    v = values(rng, shape, dt, dom)
    return inject(rng, v, dt) if scen == 'special' else v


def ew_out(i, scen, same_dtype):
    """The output kind of trial i of an elementwise op."""
    if scen != 'outview':
        return 'contig'
    kind = EW_OUT_KINDS[i % len(EW_OUT_KINDS)]
    if kind.startswith('alias') and not same_dtype:
        kind = 'bcast'                  # operand 0 cannot hold the result
    return kind


def gen_unary(op, dt, scen, rng):
    out_dt = result_dtype(op, dt)
    ref = op.ref
    trials = []
    for i, shape in enumerate(shapes_for(rng, scen)):
        out = ew_out(i, scen, out_dt == dt)
        if out == 'aliasT':
            shape = (shape[0], shape[0])
        x = in_values(rng, shape, dt, op.dom, scen)
        view = VIEW_KINDS[i % 3] if scen == 'views' else 'contig'
        trials.append(Trial('', [('t', x, view)], ref, out_dt, exact=op.exact, out=out))
    if scen == 'special':            # every special value at least once
        x = np.array(SPECIALS[dt], dtype=NP_DT[dt])
        trials.append(Trial('', [('t', x, 'contig')], ref, out_dt, exact=op.exact))
        trials.append(Trial('', [('t', x[::-1].copy(), 'step')], ref, out_dt, exact=op.exact))
    return trials


def gen_binary(op, dt, scen, rng):
    da, db = op.dom
    trials = []
    if scen == 'mixed':
        for ta, tb in MIXED_PAIRS:
            shape = rand_shape(rng, int(rng.integers(1, 4)))
            a = values(rng, bcast_operand(rng, shape), ta, da)
            b = values(rng, bcast_operand(rng, shape), tb, db)
            out_dt = result_dtype(op, promote(ta, tb))
            trials.append(Trial('', [('t', a, 'contig'), ('t', b, 'contig')], op.ref, out_dt,
                                exact=op.exact))
        return trials
    out_dt = result_dtype(op, dt)
    if scen == 'const':
        consts = [0.5, -2.0, 3.0, 0.0, 1.25, -0.75]
        if op.name == 'pow':
            consts = [0.5, 2.0, -1.0, 3.0, 0.0, -0.5]
        # a float constant lifts an i32 tensor to f64 (node.c's promote_weak)
        cdt = result_dtype(op, F64 if dt == I32 else dt)
        for i, c in enumerate(consts):
            x = values(rng, rand_shape(rng), dt, da if i % 2 == 0 else db)
            ops = [('t', x, 'contig'), ('c', c)] if i % 2 == 0 else [('c', c), ('t', x, 'contig')]
            trials.append(Trial('const %r' % c, ops, op.ref, cdt, exact=op.exact))
        return trials
    if scen == 'const_weak':
        # A weak constant that float32 cannot hold exactly, with an f32 tensor:
        # NumPy (value-based casting in 1.24, NEP 50 in 2.x) rounds the
        # constant to float32 first, so f32(0.1) - 0.1 == 0 and
        # f32(0.1) == 0.1 holds. The reference does the same.
        for i, c in enumerate([0.1, 1.0 / 3.0, -0.7, 1e-3, 2.2]):
            c32 = float(np.float32(c))
            x = values(rng, (7,), dt, da if i % 2 == 0 else db)
            x[:3] = [c32, -c32, np.nextafter(np.float32(c32), np.float32(np.inf))]
            ops = [('t', x, 'contig'), ('c', c, c32)] if i % 2 == 0 else \
                  [('c', c, c32), ('t', x, 'contig')]
            trials.append(Trial('weak const %r' % c, ops, op.ref, out_dt, exact=op.exact))
        return trials
    for i, shape in enumerate(shapes_for(rng, scen, 8)):
        out = ew_out(i, scen, out_dt == dt)
        keep = None
        if scen == 'empty':
            keep = shape.index(0)
        if out == 'aliasT':
            shape = (shape[0], shape[0])
        sa = bcast_operand(rng, shape, keep)
        sb = bcast_operand(rng, shape)
        if i % 2:
            sa, sb = sb, sa
        if out.startswith('alias'):
            sa = shape                  # operand 0 has the result's shape
        a = in_values(rng, sa, dt, da, scen)
        b = in_values(rng, sb, dt, db, scen)
        va = vb = 'contig'
        if scen == 'views':
            va = VIEW_KINDS[i % 3]
            vb = ['contig', 'T', 'step', 'col'][int(rng.integers(0, 4))]
        trials.append(Trial('', [('t', a, va), ('t', b, vb)], op.ref, out_dt, exact=op.exact,
                            out=out))
    if scen == 'special':            # every pair of special values
        sp = np.array(SPECIALS[dt], dtype=NP_DT[dt])
        trials.append(Trial('all pairs', [('t', sp[:, None], 'contig'), ('t', sp[None, :], 'contig')],
                            op.ref, out_dt, exact=op.exact))
        trials.append(Trial('all pairs', [('t', sp[:, None], 'step'), ('t', sp, 'T')],
                            op.ref, out_dt, exact=op.exact))
    return trials


def axis_choices(nd):
    return [None] + list(range(-nd, nd))


def gen_reduce(op, dt, scen, rng):
    out_dt = result_dtype(op, dt)
    trials = []
    shapes = shapes_for(rng, scen, 6)
    if scen == 'special':
        shapes.append((len(SPECIALS[dt]),))
    for i, shape in enumerate(shapes):
        x = in_values(rng, shape, dt, op.dom, scen)
        if scen == 'special' and i == len(shapes) - 1:
            x = np.array(SPECIALS[dt], dtype=NP_DT[dt])
        view = VIEW_KINDS[i % 3] if scen == 'views' else 'contig'
        for axis in axis_choices(len(shape)):
            for kd in (False, True):
                out = OUT_KINDS[(i + (axis or 0)) % len(OUT_KINDS)] if scen == 'outview' else 'contig'
                ref = (lambda x, axis=axis, kd=kd: op.ref(x, axis, kd))
                trials.append(Trial('axis=%s keepdims=%s' % (axis, kd), [('t', x, view)], ref,
                                    out_dt, mkargs(axis=axis, keepdims=kd), op.exact, out))
    return trials


def gen_var(op, dt, scen, rng):
    out_dt = result_dtype(op, dt)
    trials = []
    for i, shape in enumerate(shapes_for(rng, scen, 5)):
        x = in_values(rng, shape, dt, 'real', scen)
        if scen == 'offset':         # a large mean: needs the two-pass form
            x = np.asarray(1e4 + x.astype(np.float64), dtype=NP_DT[dt])
        view = VIEW_KINDS[i % 3] if scen == 'views' else 'contig'
        for axis in axis_choices(len(shape)):
            for kd in (False, True):
                for ddof in (0, 1):
                    out = OUT_KINDS[(i + ddof) % len(OUT_KINDS)] if scen == 'outview' else 'contig'
                    ref = (lambda x, axis=axis, kd=kd, ddof=ddof: op.ref(x, axis, kd, ddof))
                    trials.append(Trial('axis=%s keepdims=%s ddof=%d' % (axis, kd, ddof),
                                        [('t', x, view)], ref, out_dt,
                                        mkargs(axis=axis, keepdims=kd, ddof=ddof), out=out))
    return trials


def gen_softmax(op, dt, scen, rng):
    out_dt = result_dtype(op, dt)
    trials = []
    for i, shape in enumerate(shapes_for(rng, scen, 5)):
        x = in_values(rng, shape, dt, 'real', 'special' if scen == 'special' else 'random')
        if scen == 'large':          # exp overflows without the max shift
            x = np.asarray(x.astype(np.float64) * 300 + 800, dtype=NP_DT[dt])
        view = VIEW_KINDS[i % 3] if scen == 'views' else 'contig'
        for axis in axis_choices(len(shape)):
            out = OUT_KINDS[(i + (axis or 0)) % len(OUT_KINDS)] if scen == 'outview' else 'contig'
            ref = (lambda x, axis=axis: op.ref(x, axis))
            trials.append(Trial('axis=%s' % axis, [('t', x, view)], ref, out_dt,
                                mkargs(axis=axis), out=out))
    return trials


def gen_xent(op, dt, scen, rng):
    out_dt = result_dtype(op, dt)
    trials = []
    for i, shape in enumerate(shapes_for(rng, scen, 5)):
        keep = shape.index(0) if scen == 'empty' else None
        sp, st = shape, (bcast_operand(rng, shape, keep) if i % 2 else shape)
        if i % 4 == 3:
            sp, st = st, sp
        p = in_values(rng, sp, dt, 'prob', scen)
        t = in_values(rng, st, dt, 'unit', scen)
        vp = vt = 'contig'
        if scen == 'views':
            vp, vt = VIEW_KINDS[i % 3], VIEW_KINDS[(i + 1) % 3]
        nd = len(np.broadcast_shapes(sp, st))
        for axis in axis_choices(nd):
            for kd in (False, True):
                out = OUT_KINDS[(i + kd) % len(OUT_KINDS)] if scen == 'outview' else 'contig'
                ref = (lambda p, t, axis=axis, kd=kd: op.ref(p, t, axis, kd))
                trials.append(Trial('axis=%s keepdims=%s' % (axis, kd), [('t', p, vp), ('t', t, vt)],
                                    ref, out_dt, mkargs(axis=axis, keepdims=kd), out=out))
    return trials


def dot_sizes(rng, scen):
    """(m, k, n) for a dot trial: 1..6, or for 'blas' around BLAS blocking
    edges (1..3, 7, 31, 63..65) and random up to 70."""
    if scen != 'blas':
        return tuple(int(v) for v in rng.integers(1, 7, 3))
    edges = [1, 2, 3, 7, 31, 63, 64, 65]
    return tuple(int(rng.choice(edges)) if rng.random() < 0.6 else int(rng.integers(1, 71))
                 for _ in range(3))


def gen_dot_transposed(op, dt, scen, rng):
    """dot: every rank combination with transposed inputs (views of the
    swapped base, and ot_T of a leaf as operand 0), stepped and reversed
    vectors, random shapes ('blas': larger), special values in some."""
    trials = []
    combos = [(1, 1), (2, 1), (1, 2), (2, 2)]
    for i in range(16):
        ra, rb = combos[i % 4]
        m, k, n = dot_sizes(rng, scen)
        sa = (m, k) if ra == 2 else (k,)
        sb = (k, n) if rb == 2 else (k,)
        a = values(rng, sa, dt, 'real')
        b = values(rng, sb, dt, 'real')
        if i % 5 == 4:                 # NaN, +-inf, 0, denormals, huge values
            a, b = inject(rng, a, dt, 0.1), inject(rng, b, dt, 0.1)
        va = ['Tlast', 'contig', 'Tlast', 'step'][(i // 4) % 4] if ra == 2 else \
            ['step', 'contig', 'col'][i % 3]
        vb = ['Tlast', 'Tlast', 'contig', 'col'][(i // 4) % 4] if rb == 2 else \
            ['contig', 'step', 'col'][i % 3]
        trials.append(Trial('%dD.%dD' % (ra, rb), [('t', a, va), ('t', b, vb)], op.ref, dt))
        if ra == 2 and (i // 4) % 2 == 0:  # operand 0 as ot_T of a leaf of the swapped shape
            at = np.ascontiguousarray(a.T)
            trials.append(Trial('T(leaf) %dD.%dD' % (ra, rb), [('t', at, 'contig'), ('t', b, vb)],
                                lambda x, y: ref_dot(x.T, y), dt, inner='transpose'))
    return trials


def gen_batched_dot(op, dt, scen, rng):
    """batched_dot: batches (B, B), (1, B), (B, 1), (1, 1) with B in 2..4,
    every view kind, last two axes transposed, zero sizes, specials."""
    if scen == 'mixed':
        return []
    trials = []
    bats = [(3, 3), (1, 3), (3, 1), (1, 1), (2, 2), (1, 4), (4, 1), (2, 2)]
    for i in range(8 if scen != 'transposed' else 12):
        ba, bb = bats[i % len(bats)]
        m, k, n = dot_sizes(rng, scen)
        if scen == 'empty':
            m, k, n = [(m, 0, n), (0, k, n), (m, k, 0), (0, 0, 0)][i % 4]
            if i >= 4:                 # an empty batch, the other side shared
                ba, bb = [(0, 1), (1, 0), (0, 0), (0, 1)][i % 4]
                m, k, n = (int(v) for v in rng.integers(1, 5, 3))
        sa, sb = (ba, m, k), (bb, k, n)
        a = in_values(rng, sa, dt, 'real', scen)
        b = in_values(rng, sb, dt, 'real', scen)
        va = vb = 'contig'
        if scen == 'views':
            va = VIEW_KINDS[i % 3]
            vb = ['contig', 'T', 'step', 'col'][int(rng.integers(0, 4))]
        elif scen in ('transposed', 'blas'):
            va = ['Tlast', 'contig', 'Tlast', 'step'][i % 4]
            vb = ['contig', 'Tlast', 'Tlast', 'col'][(i // 2) % 4]
            if scen == 'transposed' and i % 3 == 2:
                a, b = inject(rng, a, dt, 0.1), inject(rng, b, dt, 0.1)
        out = OUT_KINDS[i % len(OUT_KINDS)] if scen == 'outview' else 'contig'
        trials.append(Trial('batches (%d, %d)' % (ba, bb), [('t', a, va), ('t', b, vb)], op.ref,
                            dt, out=out))
    if scen == 'random':             # f32 with f64 promotes to f64
        a = values(rng, (2, 3, 4), F32, 'real')
        b = values(rng, (1, 4, 5), F64, 'real')
        trials.append(Trial('mixed f32.f64', [('t', a, 'contig'), ('t', b, 'contig')], op.ref, F64))
    if scen == 'special':            # every special value against every other
        sp = np.array(SPECIALS[dt], dtype=NP_DT[dt])
        trials.append(Trial('all pairs', [('t', sp[None, :, None], 'contig'),
                                          ('t', sp[None, None, :], 'contig')], op.ref, dt))
        trials.append(Trial('row . column', [('t', sp[None, None, :], 'step'),
                                             ('t', sp[::-1][None, :, None].copy(), 'T')],
                            op.ref, dt))
    return trials


def gen_dot(op, dt, scen, rng):
    if scen in ('transposed', 'blas'):
        return gen_dot_transposed(op, dt, scen, rng)
    trials = []
    combos = [(1, 1), (2, 1), (1, 2), (2, 2)]
    for i in range(8):
        ra, rb = combos[i % 4]
        m, k, n = (int(v) for v in rng.integers(1, 7, 3))
        if scen == 'empty':
            m, k, n = [(m, 0, n), (0, k, n), (m, k, 0), (0, 0, 0)][i % 4]
        sa = (m, k) if ra == 2 else (k,)
        sb = (k, n) if rb == 2 else (k,)
        a = in_values(rng, sa, dt, 'real', scen)
        b = in_values(rng, sb, dt, 'real', scen)
        va = vb = 'contig'
        if scen == 'views':
            va = VIEW_KINDS[i % 3]
            vb = VIEW_KINDS[(i // 3) % 3]
        out = OUT_KINDS[i % len(OUT_KINDS)] if scen == 'outview' else 'contig'
        trials.append(Trial('', [('t', a, va), ('t', b, vb)], op.ref, dt, out=out))
    if scen == 'random':             # f32 with f64 promotes to f64
        a = values(rng, (3, 4), F32, 'real')
        b = values(rng, (4,), F64, 'real')
        trials.append(Trial('mixed f32.f64', [('t', a, 'contig'), ('t', b, 'contig')], op.ref, F64))
    return trials


def gen_transpose(op, dt, scen, rng):
    trials = []
    for i, shape in enumerate(shapes_for(rng, scen, 8)):
        nd = len(shape)
        x = in_values(rng, shape, dt, 'real', scen)
        if i % 2 == 0 or nd < 2:
            perm, p = None, list(range(nd))[::-1]
        else:
            p = [int(v) for v in rng.permutation(nd)]
            perm = p
        inner = 'neg' if i % 3 == 1 else None
        view = VIEW_KINDS[i % 3] if scen == 'views' else 'contig'
        out = OUT_KINDS[i % len(OUT_KINDS)] if scen == 'outview' else 'contig'
        if inner:
            ref = (lambda x, p=p: np.transpose(-x, p))
        else:
            ref = (lambda x, p=p: np.transpose(x, p))
        trials.append(Trial('perm=%s%s' % ('reverse' if perm is None else tuple(p),
                                           ' of neg' if inner else ''),
                            [('t', x, view)], ref, dt, mkargs(perm=perm), True, out, inner))
    return trials


def layout_case(i, scen):
    """The inner op, input view and output kind of layout trial i."""
    return ('neg' if i % 3 == 1 else None, VIEW_KINDS[i % 3] if scen == 'views' else 'contig',
            OUT_KINDS[i % len(OUT_KINDS)] if scen == 'outview' else 'contig')


def draw_slice(rng, shape):
    """NumPy indices of shape and the slice's args: per dim an index or a
    range (steps 1, 2, -1, -3, empty ranges too)."""
    starts, steps, counts, idx = [], [], [], []
    for n in shape:
        if n > 0 and rng.random() < 0.3:
            first = int(rng.integers(0, n))
            starts.append(first), steps.append(0), counts.append(0), idx.append(first)
            continue
        step = int(rng.choice([1, 2, -1, -3]))
        cnt = int(rng.integers(0, n + 1))
        span = (cnt - 1) * abs(step) if cnt else 0
        if span >= max(n, 1):
            cnt, span = min(n, 1), 0
        lo = int(rng.integers(0, n - span)) if n - span > 0 else 0
        first = lo if step > 0 else lo + span
        if cnt <= 1:
            step = 1
        stop = first + cnt * step
        starts.append(first if cnt else 0), steps.append(step), counts.append(cnt)
        idx.append(slice(first, stop if stop >= 0 else None, step))
    return tuple(idx), mkargs(perm=steps, shape=counts, start=starts)


def gen_slice(op, dt, scen, rng):
    trials = []
    for i, shape in enumerate(shapes_for(rng, scen, 8)):
        x = in_values(rng, shape, dt, 'real', scen)
        idx, args = draw_slice(rng, shape)
        inner, view, out = layout_case(i, scen)
        ref = (lambda x, idx=idx, neg=bool(inner): (-x if neg else x)[idx])
        trials.append(Trial('x[%s]' % (idx,), [('t', x, view)], ref, dt, args, True, out, inner))
    return trials


def gen_reshape(op, dt, scen, rng):
    trials = []
    for i, shape in enumerate(shapes_for(rng, scen, 8)):
        x = in_values(rng, shape, dt, 'real', scen)
        new = [(-1,), tuple(shape[::-1]), (1,) + tuple(shape)][i % 3]
        inner, view, out = layout_case(i, scen)
        ref = (lambda x, new=new, neg=bool(inner): np.reshape(-x if neg else x, new))
        trials.append(Trial('reshape %s' % (new,), [('t', x, view)], ref, dt, mkargs(shape=new),
                            True, out, inner))
    return trials


def gen_concat(op, dt, scen, rng):
    trials = []
    for i, shape in enumerate(shapes_for(rng, scen, 8)):
        shape = tuple(shape) or (1,)
        ax = int(rng.integers(0, len(shape)))
        other = shape[:ax] + (int(rng.integers(0, 4)),) + shape[ax + 1:]
        x = in_values(rng, shape, dt, 'real', scen)
        y = in_values(rng, other, dt, 'real', scen)
        inner, view, out = layout_case(i, scen)
        ref = (lambda x, y, ax=ax, neg=bool(inner): np.concatenate([-x if neg else x, y], ax))
        trials.append(Trial('axis=%d' % ax, [('t', x, view), ('t', y, 'contig')], ref, dt,
                            mkargs(axis=ax - len(shape) * (i % 2)), True, out, inner))
    return trials


def gen_cast(op, dt, scen, rng):
    trials = []
    for i, shape in enumerate(shapes_for(rng, scen, 6)):
        if dt == I32:
            x = in_values(rng, shape, dt, 'real', scen)
        else:
            x = values(rng, shape, F64, 'real') * 10 ** rng.uniform(0, 10, shape)
            x = np.asarray(x, dtype=NP_DT[dt])
            if scen == 'special':
                x = inject(rng, x, dt)
                extra = [3e9, -3e9, 2147483647.0, -2147483648.0, 2147483647.5, -2147483649.0,
                         0.5, -0.5, 1.5, -1.99999, 1e-300, 3.4e38]
                mask = rng.random(shape) < 0.2
                x[mask] = rng.choice(np.array(extra, dtype=NP_DT[dt]), int(mask.sum()))
        view = VIEW_KINDS[i % 3] if scen == 'views' else 'contig'
        for target in (F32, F64, I32):
            out = OUT_KINDS[(i + target) % len(OUT_KINDS)] if scen == 'outview' else 'contig'
            ref = (lambda x, target=target: ref_cast(x, target))
            trials.append(Trial('to %s' % DT_NAME[target], [('t', x, view)], ref, target,
                                mkargs(dtype=target), True, out))
    return trials


def gen_onehot(op, dt, scen, rng):
    trials = []
    for i, shape in enumerate(shapes_for(rng, scen, 6)):
        if len(shape) > 3:
            shape = shape[:3]
        depth = int(rng.integers(1, 6))
        x = rng.integers(-2, depth + 2, shape).astype(np.float64)
        if dt != I32:
            x = np.where(rng.random(shape) < 0.15, x + 0.5, x)
            if scen == 'special':
                x = inject(rng, x, dt, 0.3)
        elif scen == 'special':
            x = inject(rng, x.astype(np.int32), dt, 0.3)
        x = np.asarray(x, dtype=NP_DT[dt])
        view = VIEW_KINDS[i % 3] if scen == 'views' else 'contig'
        nd = len(shape) + 1
        for j, axis in enumerate([None] + list(range(-nd, nd))):
            odt = [0, F32, F64, I32][(i + j) % 4]
            out = OUT_KINDS[j % len(OUT_KINDS)] if scen == 'outview' else 'contig'
            pos = -1 if axis is None else axis
            ref = (lambda x, depth=depth, pos=pos: ref_onehot(x, depth, pos))
            trials.append(Trial('depth=%d axis=%s dtype=%s' % (depth, axis, DT_NAME[odt]),
                                [('t', x, view)], ref, odt or F32,
                                mkargs(axis=axis, depth=depth, dtype=odt), True, out))
    return trials


def gen_clip(op, dt, scen, rng):
    trials = []
    bounds = [(-1.0, 1.0), (0.0, math.inf), (-math.inf, 0.5), (0.25, 0.25), (2.0, -2.0),
              (-3.5, 7.125)]
    for i, shape in enumerate(shapes_for(rng, scen, 6)):
        out = ew_out(i, scen, True)
        if out == 'aliasT':
            shape = (shape[0], shape[0])
        x = in_values(rng, shape, dt, 'real', scen)
        lo, hi = bounds[i % len(bounds)]
        view = VIEW_KINDS[i % 3] if scen == 'views' else 'contig'
        ref = (lambda x, lo=lo, hi=hi: op.ref(x, lo, hi))
        trials.append(Trial('lo=%r hi=%r' % (lo, hi), [('t', x, view)], ref, dt,
                            mkargs(lo=lo, hi=hi), out=out))
    return trials


GENERATORS = {
    'unary': gen_unary, 'binary': gen_binary, 'reduce': gen_reduce, 'dot': gen_dot,
    'batched_dot': gen_batched_dot,
    'transpose': gen_transpose, 'slice': gen_slice, 'reshape': gen_reshape,
    'concat': gen_concat, 'cast': gen_cast, 'onehot': gen_onehot, 'var': gen_var,
    'clip': gen_clip, 'softmax': gen_softmax, 'xent': gen_xent,
}


# --------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------

def ulp_dist32(a, b):
    def ordered(x):
        i = np.array(x, dtype=np.float32, order='C').view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7fffffff), i)
    return np.abs(ordered(a) - ordered(b))


def mismatches(got, ref, dt, scale, amb, exact, several_ops=None):
    """Boolean mask of the elements of got (dtype dt) that do not match the
    float64 reference ref. several_ops: for a composite, whose f32 ops each
    round (as NumPy's float32 does), the relative error their roundings may
    add up to (var and std of data far from 0 lose the most)."""
    ref = np.asarray(ref, dtype=np.float64)
    if dt == I32:
        bad = got != to_i32(ref)
    else:
        g = got.astype(np.float64)
        e = ref.astype(NP_DT[dt]).astype(np.float64)     # rounded once
        nan_e, nan_g = np.isnan(e), np.isnan(g)
        bad = nan_e != nan_g
        both = ~nan_e & ~nan_g
        if exact:
            bad |= both & (g != e)
        else:
            inf = both & (np.isinf(e) | np.isinf(g))
            bad |= inf & (g != e)
            fin = both & ~inf
            with np.errstate(all='ignore'):
                diff = np.abs(g - ref)
                sc = np.abs(ref) if scale is None else np.maximum(np.abs(ref), np.abs(scale))
                if dt == F64:
                    ok = diff <= 1e-12 * sc + 2e-323
                else:
                    ok = ulp_dist32(got, e) <= 1
                    if scale is not None:
                        sp = np.spacing(np.abs(got.astype(np.float32))).astype(np.float64)
                        ok |= diff <= 1e-12 * np.abs(scale) + sp
                    if several_ops:
                        ok |= diff <= several_ops * np.maximum(sc, 1.0)
            bad |= fin & ~ok
    if amb is not None:
        bad &= ~np.broadcast_to(np.asarray(amb, dtype=bool), bad.shape)
    return bad


def fmt(v):
    v = np.asarray(v)
    if v.size > 24:
        return 'array%s' % (v.shape,)
    if v.ndim == 0:
        return repr(v.item())
    return repr(v.tolist())


# --------------------------------------------------------------------------
# The generic trial runner
# --------------------------------------------------------------------------

def make_output(lib, rng, shape, dt, kind, owned):
    """The output tensor (a view of kind over a sentinel-filled base) and a
    function that checks that nothing outside the view was written."""
    if kind == 'step' and not shape:
        kind = 'col'                 # a 0-d output has no dim to step over
    if kind == 'contig':
        t = lib.c.ot_empty(lib.be, mkshape(shape), dt)
        if not t:
            raise TrialError('ot_empty%s failed: %s' % (shape, lib.errmsg()))
        owned.append(t)
        return t, (lambda: None)
    v = View(rng, shape, kind)
    base = np.full(v.base_shape, OUT_SENTINEL[dt], dtype=NP_DT[dt])
    t = lib.array(base, dt)
    if not t:
        raise TrialError('ot_array%s failed: %s' % (base.shape, lib.errmsg()))
    owned.append(t)
    tv = v.ot_view(lib, t)
    if not tv:
        raise TrialError('output view %s failed: %s' % (v.desc, lib.errmsg()))
    owned.append(tv)
    mask = np.ones(v.base_shape, dtype=bool)
    v.np_view(mask)[...] = False

    def check_outside():
        rc, got = lib.get(t, v.base_shape, dt)
        if rc != 0:
            return 'ot_get of the output base failed (%d)' % rc
        if not np.all(got[mask] == base[mask]):
            return 'assign into output view %s of base %s wrote outside the view' % (
                v.desc, v.base_shape)
        return None
    return tv, check_outside


OT_EOVERFLOW = -9


def fits_i32(v):
    v = np.asarray(v, dtype=np.int64)
    return bool(np.all((v >= -2 ** 31) & (v < 2 ** 31)))


def expect_int_overflow(lib, assign, node, dt, where):
    """An int32 sum outside int32's range: assign(out, node) must fail with
    OT_EOVERFLOW naming the sum; returns None or a failure text."""
    shape = shape_tuple(lib.c.ot_node_shape(node))
    out = lib.c.ot_empty(lib.be, mkshape(shape), dt)
    try:
        rc = assign(out, node)
        if rc != OT_EOVERFLOW or 'sum' not in lib.errmsg():
            return '%s: int32 sum outside int32: expected OT_EOVERFLOW naming the sum, got %d ' \
                   '(%s)' % (where, rc, lib.errmsg())
        return None
    finally:
        lib.c.ot_tensor_free(out)


def run_trial(lib, rng, op, t):
    """Builds, assigns and checks one trial; returns None or a failure text."""
    owned = []
    descs = []
    try:
        nodes, vals, tens = [], [], []
        for o in t.operands:
            if o[0] == 'c':             # ('c', value[, value the reference uses])
                tens.append(None)
                nodes.append(lib.c.ot_const(o[1]))
                vals.append(np.float64(o[-1]))
                descs.append('const %r' % o[1])
            else:
                arr, view = o[1], o[2]
                odt = {np.float32: F32, np.float64: F64, np.int32: I32}[arr.dtype.type]
                tp, vd = make_input(lib, rng, arr, odt, view, owned)
                tens.append(tp)
                nodes.append(lib.c.ot_tensor_node(tp))
                vals.append(arr.astype(np.float64))
                descs.append('%s%s %s=%s' % (DT_NAME[odt], arr.shape, vd, fmt(arr)))
        a = nodes[0] if nodes else None
        b = nodes[1] if len(nodes) > 1 else None
        if t.inner:
            a = lib.build(t.inner, a)
        where = '%s%s%s' % (t.desc + ': ' if t.desc else '', ', '.join(descs),
                            '' if t.out == 'contig' else ' out=%s' % t.out)
        # int32 elementwise arithmetic wraps modulo 2^32 (NumPy's int32;
        # ref.c does the same), so it is computed exactly in int64 and
        # wrapped; an int32 sum is exact in int64, and one outside int32's
        # range must be OT_EOVERFLOW (issue 31), not NumPy's wrapped value;
        # everything else on i32 operands is exact in float64
        wrap = t.dtype == I32 and (op.wrap or t.inner == 'neg') and \
            all(o[0] == 't' and o[1].dtype == np.int32 for o in t.operands)
        int_sum = wrap and op.kind == 'reduce'
        if wrap:
            vals = [v.astype(np.int64) for v in vals]
        try:
            res = t.ref(*vals)
            empty = False
        except Empty:
            empty = True
        lib.c.ot_clear_error()
        node = lib.build(op.name, a, b, t.args)
        if empty:
            if node:
                return '%s: expected OT_EEMPTY at build, the build succeeded' % where
            if lib.c.ot_errcode() != OT_EEMPTY:
                return '%s: expected OT_EEMPTY, got %d (%s)' % (where, lib.c.ot_errcode(),
                                                                 lib.errmsg())
            return None
        if not node:
            return '%s: build failed: %d %s' % (where, lib.c.ot_errcode(), lib.errmsg())
        scale = amb = None
        if isinstance(res, tuple):
            res, scale, amb = res
        if int_sum and not fits_i32(res):
            return expect_int_overflow(lib, lib.c.ot_assign_node, node, t.dtype, where)
        if wrap and not int_sum:
            res = (np.asarray(res, dtype=np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31
        res = np.asarray(res, dtype=np.float64)
        shape = shape_tuple(lib.c.ot_node_shape(node))
        if shape != res.shape:
            return '%s: node shape %s, expected %s' % (where, shape, res.shape)
        ndt = lib.c.ot_node_dtype(node)
        if ndt != t.dtype:
            return '%s: node dtype %s, expected %s' % (where, DT_NAME.get(ndt, ndt),
                                                       DT_NAME[t.dtype])
        oshape = (2,) + shape if t.out == 'bcast' else shape
        if t.out == 'alias':
            out, check_outside = tens[0], (lambda: None)
        elif t.out == 'aliasT':
            out, check_outside = lib.c.ot_transpose(tens[0], None), (lambda: None)
            if not out:
                return '%s: ot_transpose of operand 0 failed: %s' % (where, lib.errmsg())
            owned.append(out)
        else:
            out, check_outside = make_output(lib, rng, oshape, t.dtype,
                                             'contig' if t.out == 'bcast' else t.out, owned)
        rc = lib.c.ot_assign_node(out, node)
        if rc != 0:
            return '%s: assign failed: %d %s' % (where, rc, lib.errmsg())
        rc, got = lib.get(out, oshape, t.dtype)
        if rc != 0:
            return '%s: ot_get failed: %d' % (where, rc)
        if oshape != shape:
            res = np.broadcast_to(res, oshape)
            if scale is not None:
                scale = np.broadcast_to(scale, oshape)
        bad = mismatches(got, res, t.dtype, scale, amb, t.exact,
                         {'var': 2.0 ** -18, 'softmax': 2.0 ** -20,
                          'xent': 2.0 ** -20}.get(op.kind))
        if bad.any():
            idx = np.argwhere(bad)[:3]
            parts = []
            for ix in idx:
                ix = tuple(int(i) for i in ix)
                item = 'at %s: expected %r got %r' % (ix, float(res[ix]), got[ix].item())
                if op.kind in ('unary', 'binary', 'clip') and len(vals) and \
                        all(np.ndim(v) <= len(oshape) for v in vals):
                    ins = [float(np.broadcast_to(v, oshape)[ix]) for v in vals]
                    item += ' (inputs %s)' % ', '.join(repr(x) for x in ins)
                parts.append(item)
            return '%s: %d of %d wrong, %s' % (where, int(bad.sum()), bad.size, '; '.join(parts))
        return check_outside()
    except TrialError as e:
        return '%s: %s' % (', '.join(descs), e)
    except Exception:                   # a bug in this script: say where
        tb = traceback.format_exc(limit=-2).strip().replace('\n', ' / ')
        return 'internal error in %s: %s' % (', '.join(descs), tb)
    finally:
        for p in reversed(owned):
            lib.c.ot_tensor_free(p)


# --------------------------------------------------------------------------
# rand: no NumPy counterpart; range, reproducibility and independence
# --------------------------------------------------------------------------

def draw(lib, shape, dt, seed, out='contig', rng=None, be=None):
    """Assigns rand(shape, seed, dtype dt) into a fresh output; returns
    (values or None, failure text or None)."""
    owned = []
    try:
        args = mkargs(dtype=dt, seed=seed, shape=shape)
        node = lib.c.ot_build_at(lib.op('rand'), None, None, C.byref(args), None, 0)
        if not node:
            return None, 'rand%s build failed: %s' % (shape, lib.errmsg())
        if shape_tuple(lib.c.ot_node_shape(node)) != tuple(shape):
            return None, 'rand%s node shape %s' % (shape, shape_tuple(lib.c.ot_node_shape(node)))
        if lib.c.ot_node_dtype(node) != dt:
            return None, 'rand%s node dtype %d, expected %d' % (shape, lib.c.ot_node_dtype(node), dt)
        saved = lib.be
        if be is not None:
            lib.be = be
        try:
            o, check_outside = make_output(lib, rng, tuple(shape), dt, out, owned)
        finally:
            lib.be = saved
        rc = lib.c.ot_assign_node(o, node)
        if rc:
            return None, 'rand%s assign failed: %d %s' % (shape, rc, lib.errmsg())
        rc, got = lib.get(o, tuple(shape), dt)
        if rc:
            return None, 'rand%s ot_get failed: %d' % (shape, rc)
        bad = check_outside()
        if bad:
            return None, bad
        return got, None
    except TrialError as e:
        return None, str(e)
    finally:
        for p in reversed(owned):
            lib.c.ot_tensor_free(p)


def run_rand_case(lib, dt, scen, rng):
    fails = []

    def check_range(v, what):
        if v is None:
            return
        if v.size and not (np.all(np.isfinite(v)) and v.min() >= 0.0 and v.max() < 1.0):
            fails.append('%s: values outside [0, 1): min %r max %r' % (what, float(np.nanmin(v)),
                                                                         float(np.nanmax(v))))

    if scen == 'random':
        for nd in range(5):
            shape = rand_shape(rng, nd)
            v, err = draw(lib, shape, dt, int(rng.integers(0, 1000)), rng=rng)
            if err:
                fails.append(err)
            check_range(v, 'rand%s' % (shape,))
        v, err = draw(lib, (200, 100), dt, 7, rng=rng)
        if err:
            fails.append(err)
        elif v is not None:
            check_range(v, 'rand(200, 100)')
            m, var = float(v.mean()), float(v.var())
            hist = np.histogram(v, bins=10, range=(0.0, 1.0))[0]
            if abs(m - 0.5) > 0.01 or abs(var - 1 / 12) > 0.005 or hist.min() < 1800:
                fails.append('rand(200, 100): not uniform: mean %.4f var %.4f bins %s' % (
                    m, var, hist.tolist()))
            if len(np.unique(v)) < v.size * 0.99:
                fails.append('rand(200, 100): only %d distinct values' % len(np.unique(v)))
    elif scen == 'repro':
        a, e1 = draw(lib, (4, 5), dt, 3, rng=rng)
        b, e2 = draw(lib, (4, 5), dt, 3, rng=rng)
        c, e3 = draw(lib, (4, 5), dt, 4, rng=rng)
        flat, e4 = draw(lib, (20,), dt, 3, rng=rng)
        longer, e5 = draw(lib, (30,), dt, 3, rng=rng)
        fails += [e for e in (e1, e2, e3, e4, e5) if e]
        if not fails:
            if not np.array_equal(a, b):
                fails.append('rand(4, 5) seed 3 drawn twice differs')
            if np.sum(a == c) > 2:
                fails.append('rand(4, 5) seeds 3 and 4 agree on %d of 20 values' % np.sum(a == c))
            if not np.array_equal(a.reshape(-1), flat):
                fails.append('rand(4, 5) and rand(20,) with one seed differ (counter is the '
                             'row-major index)')
            if not np.array_equal(longer[:20], flat):
                fails.append('rand(20,) is not a prefix of rand(30,) with one seed')
        # another backend seed draws other values
        opts = OtBackendOpts()
        opts.seed = 12345
        be2 = lib.c.ot_backend_new(b'ref', C.cast(C.pointer(opts), C.c_void_p))
        if not be2:
            fails.append('ot_backend_new(ref, seed=12345) failed: %s' % lib.errmsg())
        else:
            d, err = draw(lib, (4, 5), dt, 3, rng=rng, be=be2)
            if err:
                fails.append(err)
            elif a is not None and np.sum(a == d) > 2:
                fails.append('backend seeds 0 and 12345 agree on %d of 20 values' % np.sum(a == d))
            check_range(d, 'rand on seeded backend')
            lib.c.ot_backend_free(be2)
    elif scen == 'empty':
        for shape in [(0,), (3, 0), (0, 2, 5)]:
            v, err = draw(lib, shape, dt, 1, rng=rng)
            if err:
                fails.append(err)
            elif v.size:
                fails.append('rand%s gave %d values' % (shape, v.size))
    elif scen == 'outview':
        for i, kind in enumerate(['T', 'step', 'col'] * 2):
            shape = rand_shape(rng, 2 + i % 3)
            ref, e1 = draw(lib, shape, dt, 11 + i, rng=rng)
            got, e2 = draw(lib, shape, dt, 11 + i, out=kind, rng=rng)
            if e1 or e2:
                fails.append(e1 or e2)
            elif not np.array_equal(ref, got):
                fails.append('rand%s into a %s output view differs from a contiguous output'
                             % (shape, kind))
    return fails


# --------------------------------------------------------------------------
# Special values through every backend, driven by the op table
# --------------------------------------------------------------------------
#
# The ops come from the library (ot_op_name(i) for i = 0.. until NULL, with
# ot_op_kind, ot_op_arity and ot_op_flags), not from OPS: every op must have
# a case in OPS and, when it is elementwise, a reduction, a product or a
# composite, an entry in SV_REF below, or the run fails naming it. Each such
# op runs on a table of special values (NaN, -NaN, +-inf, +-0.0, denormals,
# exp's edges +-88.7 and +-88.8, +-709.8, exp2's edges, +-1000 logits, +-1,
# huge values, pi; int32 extremes for the ops that take i32) in every dtype
# it takes, through the ref backend and the cpu backend under every ISA this
# CPU runs with generated code off and on (OT_ISA, OT_JIT), on every core
# with and without fusion, and at OT_ULP35 (sv_configs). Elementwise ops see
# the table contiguous, reversed and as strided views; binary ops see all its
# pairs, in both orders, as a broadcast grid, as two flat vectors (so that
# SIMD lanes and tails see every pair), as strided views, with one side an
# ot_const, and f32 against f64. Reductions, products and the row composites
# see rows (+-1000, +-inf, all -inf, NaN in every position, denormals, ties)
# along the last axis, along axis 0 of the transpose, whole (axis=None), and
# rows of SV_LONG elements that span several tiles and chunks.
#
# Comparison: the reference is NumPy in float64 (int64 for i32, wrapped
# where int32 arithmetic wraps) on the same input values, rounded once to
# the output dtype. The class must match exactly: NaN, +inf, -inf or
# finite; the sign of a zero result where NumPy defines it (elementwise ops,
# except where SV_NO_ZERO_SIGN says why not). Finite values: exact for the
# ops in SV_EXACT; otherwise within 1 ulp (ref) or 4 ulp (cpu, SLEEF u10) in
# f32, 2 ulp in f64 (NumPy itself is not correctly rounded), 2 more for
# SV_FORMULA references and 6 at OT_ULP35; ulps in the subnormal range are
# subnormal ulps. Sums, products and the composites built on them may also
# differ by 4 * n * eps * sum|terms| (SV_TOL; summation order is the
# backend's). A cpu backend computing f32 in f32 may also give NumPy's own
# float32 result where intermediates overflow or underflow (squares of 1e30
# or of denormals in var/std). SV_LANDMARKS checks the facts issue 13 names
# against written-out values.
#
# Where optree's documented semantics differ from plain NumPy, the reference
# follows the header and SV_EXCEPTIONS says why (sv_check_table fails on an
# entry that names no op).

SV_NAN_NEG = -math.nan                  # a NaN with the sign bit set
SV_BASE = [math.nan, SV_NAN_NEG, math.inf, -math.inf, 0.0, -0.0, 1.4e-45, -1.4e-45, 1e-40,
           -1e-40, 88.7, -88.7, 88.8, -88.8, 709.8, -709.8, 1000.0, -1000.0, 1.0, -1.0,
           1e30, -1e30, math.pi, 0.5, 2.0, -3.0, 128.5, -149.5]       # (exp2's f32 edges)
SV_VALUES = {F32: SV_BASE,
             F64: SV_BASE + [5e-324, -5e-324, 1e-310, -1e-310, 1e300, -1e300, 1024.5, -1074.5],
             I32: SPECIALS[I32] + [46341, -46341, 3]}     # 46341**2 wraps
SV_COLS = 19                            # a 16-lane vector and a tail of 3

SV_EXCEPTIONS = {
    'safelog': 'log(maximum(x, exp(-50))): the header floors the argument at exp(-50), '
               'so safelog(0) = safelog(-1) = -50 where np.log gives -inf / NaN',
    'sig': 'NumPy has no sigmoid; the header defines 1 / (1 + exp(-x)), computed '
           'without overflow (sig(-1000) = 0, sig(-709.8) = 5.5e-309 in f64)',
    'sig2': 'NumPy has no sig2; the header defines 1 / (1 + exp2(-x)), as sig',
    'tanh2': 'NumPy has no tanh2; the header defines (exp2(2x)-1)/(exp2(2x)+1) = tanh(x ln 2)',
    'rsqrt': 'NumPy has no rsqrt; 1 / sqrt(x)',
    'recip': 'NumPy has no recip; 1 / x',
    'relu': 'NumPy has no relu; the header defines maximum(x, 0) (NaN stays NaN)',
    'cross_entropy': '-sum(t * safelog(p)); of a softmax(x), log p is logsoftmax(x) floored '
                     'at -65504 (header), so a -inf logit with target 0 adds 0, not NaN',
}
# Ops whose zero results may have either sign: NumPy itself does not define
# it (np.maximum(-0.0, 0.0) is 0.0 and np.maximum(0.0, -0.0) is -0.0 in its
# SIMD loops), so optree need not match it.
SV_NO_ZERO_SIGN = {'minimum', 'maximum', 'relu', 'clip'}

XENT_LOG_FLOOR = -65504.0   # cross_entropy's floor of log p (optree.h)


def sv_sig(x, ex):
    """1 / (1 + ex(-x)), written so that ex never overflows: the plain form
    gives 1 / inf = 0 for sig(-709.8) in double, whose value is 5.5e-309."""
    e = ex(-np.abs(x))
    return np.where(x < 0, e, 1.0) / (1.0 + e)


def sv_xent_sm(x, t, axis):
    ls = ref_softmax(x, axis, True)[0]
    return -np.sum(t * np.maximum(ls, XENT_LOG_FLOOR), axis=axis)


# name -> NumPy reference in float64. Elementwise: f(x) or f(a, b);
# reductions and row composites: f(x, axis).
SV_REF = {
    'finite': lambda x: np.isfinite(x) * 1.0,
    'neg': np.negative, 'abs': np.abs, 'sgn': np.sign, 'sqrt': np.sqrt,
    'sqr': lambda x: x * x, 'exp': np.exp, 'exp2': np.exp2, 'log': np.log, 'log2': np.log2,
    'safelog': safelog,
    'sig': lambda x: sv_sig(x, np.exp),
    'sig2': lambda x: sv_sig(x, np.exp2),
    'tanh': np.tanh, 'tanh2': lambda x: np.tanh(x * LN2), 'rint': np.rint,
    'rsqrt': lambda x: 1.0 / np.sqrt(x), 'recip': lambda x: 1.0 / x,
    'relu': lambda x: np.maximum(x, 0.0), 'sin': np.sin, 'cos': np.cos, 'erf': erf,
    'add': np.add, 'sub': np.subtract, 'mul': np.multiply, 'div': np.divide,
    'pow': np.power,
    'eq': lambda a, b: (a == b) * 1.0, 'ne': lambda a, b: (a != b) * 1.0,
    'lt': lambda a, b: (a < b) * 1.0, 'le': lambda a, b: (a <= b) * 1.0,
    'gt': lambda a, b: (a > b) * 1.0, 'ge': lambda a, b: (a >= b) * 1.0,
    'minimum': np.minimum, 'maximum': np.maximum,
    'sum': lambda x, ax: np.sum(x, axis=ax),
    'max': lambda x, ax: np.max(x, axis=ax),
    'min': lambda x, ax: np.min(x, axis=ax),
    'mean': lambda x, ax: np.mean(x, axis=ax),
    'argmax': lambda x, ax: np.argmax(x, axis=ax) * 1.0,
    'argmin': lambda x, ax: np.argmin(x, axis=ax) * 1.0,
    'var': lambda x, ax: np.var(x, axis=ax),
    'std': lambda x, ax: np.std(x, axis=ax),
    'squared_l2': lambda x, ax: np.sum(x * x, axis=ax),
    'softmax': lambda x, ax: ref_softmax(x, ax, False)[0],
    'logsoftmax': lambda x, ax: ref_softmax(x, ax, True)[0],
    'clip': lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi),
    'cross_entropy': lambda p, t, ax: -np.sum(t * safelog(p), axis=ax),
    'dot': lambda a, b: ref_dot(a, b)[0],
    'batched_dot': lambda a, b: ref_batched_dot(a, b)[0],
}
# Elementwise ops computed exactly (no rounding budget).
SV_EXACT = {'finite', 'neg', 'abs', 'sgn', 'sqr', 'rint', 'relu', 'add', 'sub', 'mul', 'div',
            'eq', 'ne', 'lt', 'le', 'gt', 'ge', 'minimum', 'maximum', 'max', 'min', 'argmax',
            'argmin', 'clip', 'sqrt'}
# int32 arithmetic that wraps modulo 2^32 (computed exactly in int64), and
# sum, which is exact and OT_EOVERFLOW outside int32's range.
SV_WRAP = {'neg', 'abs', 'sqr', 'add', 'sub', 'mul', 'sum'}
# Formulas of several NumPy calls, each rounded: the reference itself is off
# by up to about 2 ulp in f64, which the f64 budget adds.
SV_FORMULA = {'sig', 'sig2', 'tanh2', 'rsqrt', 'pow'}


def sv_configs():
    """(label, backend name, environment, threads, accuracy) for ref, each
    cpu ISA x JIT on one thread, and the default cpu backend on every core,
    with and without fusion (OT_FUSION=0 materialises every node of a
    composite), and at OT_ULP35."""
    out = [('ref', b'ref', {}, 1, 0)]
    for isa in ('scalar', 'sse2', 'avx2', 'avx512'):
        for jit in ('0', '1'):
            out.append(('cpu/%s/jit%s' % (isa, jit), b'cpu', {'OT_ISA': isa, 'OT_JIT': jit}, 1,
                        0))
    out.append(('cpu/threads', b'cpu', {}, 0, 0))
    out.append(('cpu/threads/fusion0', b'cpu', {'OT_FUSION': '0'}, 0, 0))
    out.append(('cpu/ulp35', b'cpu', {}, 1, 1))
    return out


def sv_backend(lib, name, env, threads=1, accuracy=0):
    """A backend made under env (OT_BACKEND cleared); None when the CPU lacks
    the ISA; raises on any other failure."""
    saved = {k: os.environ.get(k) for k in list(env) + ['OT_BACKEND']}
    os.environ.pop('OT_BACKEND', None)
    os.environ.update(env)
    try:
        opts = OtBackendOpts()
        opts.threads = threads
        opts.accuracy = accuracy
        be = lib.c.ot_backend_new(name, C.cast(C.pointer(opts), C.c_void_p))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if not be and lib.c.ot_errcode() == OT_EUNSUPPORTED:
        return None
    if not be:
        raise SystemExit('ot_backend_new(%s, %s) failed: %s' % (name, env, lib.errmsg()))
    return be


def sv_ulps(a, b, dt):
    """Distance in units in the last place between arrays of dtype dt (+-0
    are 0 apart, the largest finite value and inf 1), as float64: exact
    below 2^53, and only ever compared with small budgets."""
    it, mask = (np.int32, 0x7fffffff) if dt == F32 else (np.int64, 0x7fffffffffffffff)

    def ordered(x):
        i = np.array(x, dtype=NP_DT[dt], order='C').view(it).astype(np.int64)
        return np.where(i < 0, -(i & mask), i)
    oa, ob = ordered(a), ordered(b)
    same = (oa < 0) == (ob < 0)                 # no overflow in oa - ob
    with np.errstate(over='ignore'):
        near = np.abs(np.where(same, oa - ob, 0)).astype(np.float64)
    far = np.abs(oa).astype(np.float64) + np.abs(ob).astype(np.float64)
    return np.where(same, near, far)


def sv_rows(dt):
    """(label, row) pairs of SV_COLS values for reductions and row composites."""
    n = SV_COLS
    if dt == I32:
        iv = SV_VALUES[I32]
        lo, hi = -2147483648, 2147483647
        return [('ints', [iv[i % len(iv)] for i in range(n)]),
                ('ints+4', [iv[(i + 4) % len(iv)] for i in range(n)]),
                ('ties', [(1, 3, 3, 2, 0, hi, lo, hi, lo)[i % 9] for i in range(n)]),
                ('all min', [lo] * n), ('all max', [hi] * n),
                ('max last', [lo] * (n - 1) + [hi]), ('min last', [hi] * (n - 1) + [lo])]
    vals = SV_VALUES[dt]
    fin = [v for v in vals if math.isfinite(v)]
    logit = [1000.0, -1000.0, 88.7, -88.8, 1.0, -1.0, 0.5, math.pi, -0.0, 0.0, 2.0, -3.0]
    denorm = [v for v in fin if v != 0 and abs(v) < 1e-37]

    def cyc(src, k=0):
        return [src[(i + k) % len(src)] for i in range(n)]

    def put(row, pos, v):
        row = list(row)
        row[pos] = v
        return row
    base = cyc(logit)
    rows = [('finite', cyc(fin)), ('logits', base), ('logits+3', cyc(logit, 3)),
            ('+1000', [1000.0] * n), ('-1000', [-1000.0] * n),
            ('+-1000', [1000.0 * (-1) ** i for i in range(n)]),
            ('all -inf', [-math.inf] * n), ('all +inf', [math.inf] * n),
            ('+inf,-inf', put(put(base, 2, math.inf), n - 2, -math.inf)),
            ('all nan', [math.nan] * n), ('nan,+inf', put(put(base, 5, math.inf), 9, math.nan)),
            ('-nan,nan', put(put(base, 3, SV_NAN_NEG), 7, math.nan)),
            ('denormals', cyc(denorm)), ('-0.0', [-0.0] * n),
            ('+-0', [(-0.0, 0.0)[i % 2] for i in range(n)]),
            ('ties', cyc([1.0, 3.0, 3.0, 2.0, -0.0, 0.0])),
            ('-inf ties', [-math.inf] * (n - 1) + [-1e30])]
    for j in (0, n // 2, n - 1):
        rows.append(('+inf at %d' % j, put(base, j, math.inf)))
        rows.append(('-inf at %d' % j, put(base, j, -math.inf)))
        rows.append(('-nan at %d' % j, put(base, j, SV_NAN_NEG)))
    for j in range(n):
        rows.append(('nan at %d' % j, put(base, j, math.nan)))
    return rows


SV_LONG = 70001       # > 16 tiles of 4096: several chunks of partial results


def sv_long_rows(dt):
    """Rows long enough that the cpu backend reduces them in several tiles
    and chunks, combined afterwards: a NaN in a late chunk must still win
    (the first one for argmax/argmin), and so must a late +inf."""
    rng = np.random.default_rng(7)
    npd = NP_DT[dt]
    if dt == I32:
        r = rng.integers(-100000, 100000, SV_LONG).astype(npd)
        r[40000], r[SV_LONG - 1] = 2147483647, -2147483648
        return [('ints, extremes late', r)]
    base = rng.choice(np.array([1000.0, -1000.0, 88.7, -88.8, 1.0, -0.0, 0.5], dtype=npd), SV_LONG)
    nan = base.copy()
    nan[40000], nan[SV_LONG - 3], nan[SV_LONG - 1] = math.nan, SV_NAN_NEG, math.nan
    inf = np.full(SV_LONG, -math.inf, dtype=npd)
    inf[SV_LONG - 1] = math.inf
    return [('logits', base), ('NaN late', nan), ('-inf, +inf last', inf)]


SV_DT = {np.float32: F32, np.float64: F64, np.int32: I32}


class SvView:
    """An operand laid out as a View of kind ('step', 'col') with seed."""

    def __init__(self, arr, kind, seed):
        self.arr, self.kind, self.seed = arr, kind, seed

    def astype(self, t):
        return self.arr.astype(t)


OT_FLAG_FLOAT = 1
OT_FLAG_CUSTOM = 16


def add_ufunc_ops(lib):
    """An elementwise op of the library that OPS does not list is tested
    against the NumPy ufunc of its name (np.log1p for log1p), in the dtypes
    its flags allow, so that adding such an op to src/core/ops.def needs no entry
    here. An op without a same-named ufunc still fails by name
    (sv_check_table)."""
    known = {o.name for o in OPS}
    for op in sv_ops(lib):
        uf = getattr(np, op.name, None)
        if (op.name in known or op.kind not in (OT_KIND_UNARY, OT_KIND_BINARY)
                or not isinstance(uf, np.ufunc) or uf.nin != op.arity):
            continue
        flt = bool(op.flags & OT_FLAG_FLOAT)
        unary = op.kind == OT_KIND_UNARY
        OPS.append(Op(op.name, 'unary' if unary else 'binary', uf, FD if flt else FDI,
                      'real' if unary else ('real', 'real'), 'float' if flt else 'same'))
        SV_REF.setdefault(op.name, uf)


class SvOp:
    """An op of the library's table: id, name, kind, arity, flags."""

    def __init__(self, lib, i):
        self.id = i
        self.name = lib.c.ot_op_name(i).decode()
        self.kind, self.arity = lib.c.ot_op_kind(i), lib.c.ot_op_arity(i)
        self.flags = lib.c.ot_op_flags(i)


def sv_ops(lib):
    """The table's ops, but the placeholders of registered ops (custom1,
    custom2: OT_FLAG_CUSTOM), which build nothing by themselves."""
    ops, i = [], 0
    while lib.c.ot_op_name(i) is not None:
        op = SvOp(lib, i)
        if not op.flags & OT_FLAG_CUSTOM:
            ops.append(op)
        i += 1
    return ops


def sv_eval(lib, be, op, arrays, args=None, inner=None):
    """op(arrays...) on backend be ((inner_op, args) is applied to operand 0
    first); returns (values, None) or (None, failure text)."""
    owned = []
    try:
        nodes = []
        for arr in arrays:
            if isinstance(arr, float):      # a weak constant
                nodes.append(lib.c.ot_const(arr))
                continue
            if isinstance(arr, SvView):     # a strided view of a larger base
                saved, lib.be = lib.be, be
                try:
                    tv, _ = make_input(lib, np.random.default_rng(arr.seed), arr.arr,
                                       SV_DT[arr.arr.dtype.type], arr.kind, owned)
                except TrialError as e:
                    return None, str(e)
                finally:
                    lib.be = saved
                nodes.append(lib.c.ot_tensor_node(tv))
                continue
            dt = {np.float32: F32, np.float64: F64, np.int32: I32}[arr.dtype.type]
            arr = np.ascontiguousarray(arr)
            t = lib.c.ot_array(be, mkshape(arr.shape), dt, arr.ctypes.data)
            if not t:
                return None, 'ot_array failed: %s' % lib.errmsg()
            owned.append(t)
            nodes.append(lib.c.ot_tensor_node(t))
        if callable(op):                # a tree of several ops: op(nodes)
            node = op(nodes)
        else:
            a = nodes[0]
            if inner:
                a = lib.c.ot_build_at(lib.op(inner[0]), a, None, C.byref(inner[1]), None, 0)
            b = nodes[1] if len(nodes) > 1 else None
            node = lib.c.ot_build_at(op.id, a, b, C.byref(args or mkargs()), None, 0)
        if not node:
            return None, 'build failed: %s' % lib.errmsg()
        shape = shape_tuple(lib.c.ot_node_shape(node))
        dt = lib.c.ot_node_dtype(node)
        out = lib.c.ot_empty(be, mkshape(shape), dt)
        if not out:
            return None, 'ot_empty failed: %s' % lib.errmsg()
        owned.append(out)
        rc = lib.c.ot_assign_node(out, node)
        if rc:
            return None, 'assign failed: %d %s' % (rc, lib.errmsg())
        host = np.zeros(shape, dtype=NP_DT[dt])
        rc = lib.c.ot_get(out, host.ctypes.data)
        if rc:
            return None, 'ot_get failed: %d' % rc
        return host, None
    finally:
        for p in reversed(owned):
            lib.c.ot_tensor_free(p)


def class_bad(e, g, zero_sign=True):
    """(bad, fin): the elements of g whose class differs from e's (NaN,
    +-inf, and the sign of zero when zero_sign), and those finite in both,
    left to a closeness check. Shared with half_check.py."""
    bad = np.isnan(e) != np.isnan(g)
    both = ~np.isnan(e) & ~np.isnan(g)
    inf = both & (np.isinf(e) | np.isinf(g))
    bad |= inf & (e != g)
    fin = both & ~inf
    if zero_sign:
        bad |= fin & (e == 0) & (g == 0) & (np.signbit(e) != np.signbit(g))
    return bad, fin


def sv_bad(got, ref, dt, ulps, scale=None, tol=0.0, zero_sign=True):
    """Mask of elements of got (dtype dt) that do not match the float64
    reference: class (NaN, +-inf, finite, the sign of zero when zero_sign),
    then within ulps of the once-rounded reference, or within tol * scale."""
    ref = np.asarray(ref, dtype=np.float64)
    if dt == I32:
        return got != ref
    e = ref.astype(NP_DT[dt])
    g = got.astype(NP_DT[dt])
    bad, fin = class_bad(e, g, zero_sign)
    if ulps is None:
        return bad | (fin & (e != g))
    far = sv_ulps(np.where(fin, g, 0), np.where(fin, e, 0), dt) > ulps
    if scale is not None:
        with np.errstate(all='ignore'):
            far &= ~(np.abs(g.astype(np.float64) - ref) <= tol * np.abs(scale))
    return bad | (fin & far)


def sv_softmax_tol(x, ax, en):
    m = np.max(x, axis=ax, keepdims=True)
    s = x - m
    r = np.exp(s) / np.sum(np.exp(s), axis=ax, keepdims=True)
    return en * finite_abs(r) * (1.0 + finite_abs(s))


def sv_logsoftmax_tol(x, ax, en):
    m = np.max(x, axis=ax, keepdims=True)
    s = x - m
    lse = np.log(np.sum(np.exp(s), axis=ax, keepdims=True))
    return en * (finite_abs(s) + finite_abs(lse) + 1.0)


def sv_var_scale(x, ax):
    mu = np.mean(finite_abs(x), axis=ax, keepdims=True)
    return np.mean((finite_abs(x) + mu) ** 2, axis=ax)


# Allowed absolute error of the reductions and composites built on sums, for
# en = 4 * n * eps (n terms, eps of the dtype the backend computes in).
SV_TOL = {
    'sum': lambda x, ax, en: en * np.sum(finite_abs(x), axis=ax),
    'mean': lambda x, ax, en: en * np.mean(finite_abs(x), axis=ax),
    'squared_l2': lambda x, ax, en: en * np.sum(finite_abs(x) ** 2, axis=ax),
    'var': lambda x, ax, en: en * sv_var_scale(x, ax),
    'std': lambda x, ax, en: np.sqrt(en * sv_var_scale(x, ax)),
    'softmax': sv_softmax_tol,
    'logsoftmax': sv_logsoftmax_tol,
    'cross_entropy': lambda p, t, ax, en: en * np.sum(finite_abs(t * safelog(p)), axis=ax),
    'dot': lambda a, b, en: en * ref_dot(a, b)[1],
    'batched_dot': lambda a, b, en: en * ref_batched_dot(a, b)[1],
}


def sv_xent_sm_tol(x, t, ax, en):
    return np.sum(finite_abs(t) * sv_logsoftmax_tol(x, ax, en), axis=ax)


def sv_trials(lib, op, dt):
    """(description, arrays, args, inner, reference, tolerance) for op in dt;
    reference and tolerance take the float64 arrays (tolerance also en)."""
    npd = NP_DT[dt]
    v = np.array(SV_VALUES[dt], dtype=npd)
    ref, tol = SV_REF[op.name], SV_TOL.get(op.name)
    out = []
    if op.kind == OT_KIND_UNARY:
        out.append(('table', [v], None, None, ref, None))
        out.append(('table reversed', [v[::-1].copy()], None, None, ref, None))
        for k, kind in enumerate(('step', 'step', 'col')):
            out.append(('table as a %s view' % kind, [SvView(v, kind, k)], None, None, ref, None))
    elif op.kind == OT_KIND_BINARY:
        n = len(v)
        out.append(('all pairs, broadcast', [v[:, None], v[None, :]], None, None, ref, None))
        out.append(('all pairs, flat', [np.repeat(v, n), np.tile(v, n)], None, None, ref, None))
        if dt == F64:                   # f32 with f64 gives f64: the f32 side is widened
            v32 = v.astype(np.float32)
            out.append(('all pairs, f32 . f64', [np.repeat(v32, n), np.tile(v, n)], None, None,
                        ref, None))
            out.append(('all pairs, f64 . f32', [np.repeat(v, n), np.tile(v32, n)], None, None,
                        ref, None))
        for k, kind in enumerate(('step', 'col')):
            out.append(('all pairs, %s views' % kind, [SvView(np.repeat(v, n), kind, k),
                                                       SvView(np.tile(v, n), 'step', k + 1)],
                        None, None, ref, None))
        for c in (v if dt != I32 else ()):  # a constant operand: generated code embeds it
            out.append(('x op const %r' % c, [v, float(c)], None, None, ref, None))
            out.append(('const %r op x' % c, [float(c), v], None, None, ref, None))
    elif op.kind == OT_KIND_DOT:         # products of every row with every row
        x = np.array([r for _, r in sv_rows(dt)], dtype=npd)
        xt = np.ascontiguousarray(x.T)
        if op.name == 'batched_dot':
            x, xt = x[None], xt[None]
        out.append(('rows . rows^T', [x, xt], None, None, ref, tol))
        if op.name == 'dot':
            out.append(('row . row', [x[10], x[11]], None, None, ref, tol))
            out.append(('rows . row', [x, x[12]], None, None, ref, tol))
    elif op.name == 'clip' or (op.kind == OT_KIND_COMPOSITE and op.arity == 1 and
                               op.name not in SV_TOL and op.name not in ('max', 'min')):
        for lo, hi in [(-1.0, 1.0), (0.0, math.inf), (-math.inf, 0.5), (-1000.0, 88.7)]:
            out.append(('lo=%r hi=%r' % (lo, hi), [v], mkargs(lo=lo, hi=hi), None,
                        lambda x, lo=lo, hi=hi: ref(x, lo, hi), None))
    elif op.arity == 1:                 # reductions and row composites
        rows = sv_rows(dt)
        x = np.array([r for _, r in rows], dtype=npd)

        def mk(ax):
            return (lambda x: ref(x, ax)), (None if tol is None else
                                            (lambda x, en: tol(x, ax, en)))
        f, t = mk(-1)
        out.append(('rows, axis=-1', [x], mkargs(axis=-1), None, f, t))
        f, t = mk(0)
        out.append(('rows transposed, axis=0', [np.ascontiguousarray(x.T)], mkargs(axis=0),
                    None, f, t))
        # the middle axis of (2, n, rows): a reduced dim between two kept ones
        x3 = np.ascontiguousarray(np.stack([x.T, x.T[:, ::-1]]))
        f, t = mk(1)
        out.append(('rows in the middle axis of (2, n, rows), axis=1', [x3], mkargs(axis=1),
                    None, f, t))
        f, t = mk(None)
        out.append(('rows, axis=None', [x], mkargs(), None, f, t))
        for label, r in sv_long_rows(dt):
            out.append(('long row %s, axis=None' % label, [r], mkargs(), None, f, t))
        for label, r in rows:
            out.append(('row %s, axis=None' % label, [np.array(r, dtype=npd)], mkargs(), None,
                        f, t))
    else:                               # (p, t) rows: cross_entropy
        rows = sv_rows(dt)
        x = np.array([r for _, r in rows], dtype=npd)
        tg = np.resize(np.array([1.0, 0.0, 0.5, 0.25, 0.0, 0.125], dtype=npd), x.shape)
        half = np.full(x.shape, 0.5, dtype=npd)
        for ax in (-1, 0):
            tp = (lambda a: a) if ax == -1 else (lambda a: np.ascontiguousarray(a.T))
            what = 'rows, axis=-1' if ax == -1 else 'rows transposed, axis=0'
            out.append(('p=%s' % what, [tp(x), tp(tg)], mkargs(axis=ax), None,
                        lambda p, t, ax=ax: ref(p, t, ax),
                        lambda p, t, en, ax=ax: tol(p, t, ax, en)))
            out.append(('t=%s' % what, [tp(half), tp(x)], mkargs(axis=ax), None,
                        lambda p, t, ax=ax: ref(p, t, ax),
                        lambda p, t, en, ax=ax: tol(p, t, ax, en)))
            out.append(('p=softmax(%s)' % what, [tp(x), tp(tg)], mkargs(axis=ax),
                        ('softmax', mkargs(axis=ax)),
                        lambda x, t, ax=ax: sv_xent_sm(x, t, ax),
                        lambda x, t, en, ax=ax: sv_xent_sm_tol(x, t, ax, en)))
    return out


# Ops whose NumPy checks are scripts of their own, run by the same phase
# (tools/test.sh's phase_numpy).
CHECKED_ELSEWHERE = {'conv', 'conv_transpose', 'conv_wgrad',   # tests/conv_check.py
                     'max_pool', 'max_pool_grad', 'max_pool_take', 'avg_pool',
                     'avg_pool_grad',   # tests/pool_check.py
                     'take', 'scatter_add', 'select', 'tril', 'triu',
                     'cumulative_sum',   # tests/index_check.py
                     'attention', 'attention_grad',   # tests/attn_check.py
                     'topk', 'take_along', 'scatter_along'}   # tests/topk_check.py


def sv_check_table(lib, ops):
    """Failure lines for library ops that no test covers."""
    known = {o.name for o in OPS} | CHECKED_ELSEWHERE
    lines = []
    for op in ops:
        if op.name not in known:
            lines.append('FAIL %s: op %d of the library has no case in OPS (diff_numpy.py)'
                         % (op.name, op.id))
        if op.kind in SV_KINDS and op.name not in SV_REF:
            lines.append('FAIL %s special: op %d (kind %d) has no NumPy reference in SV_REF '
                         '(diff_numpy.py)' % (op.name, op.id, op.kind))
    names = {op.name for op in ops}
    for name in sorted(set(SV_EXCEPTIONS) - names):
        lines.append('FAIL %s special: SV_EXCEPTIONS names an op the library does not have'
                     % name)
    return lines


OT_KIND_UNARY, OT_KIND_BINARY, OT_KIND_REDUCE, OT_KIND_DOT, OT_KIND_COMPOSITE = 1, 2, 3, 4, 7
SV_KINDS = (OT_KIND_UNARY, OT_KIND_BINARY, OT_KIND_REDUCE, OT_KIND_DOT, OT_KIND_COMPOSITE)


NAN, INF = math.nan, math.inf
# Facts the issue names, checked against literal values on every backend
# (independent of SV_REF): (op, dtype, operands, args, expected), where an
# expected -0.0 or +0.0 must have that sign and NaN must be NaN.
SV_LANDMARKS = [
    ('sig', F32, [[-1000.0, 1000.0, -88.8]], None, [0.0, 1.0, 2.7205e-39]),
    ('sig', F64, [[-1000.0, 1000.0]], None, [0.0, 1.0]),
    ('exp', F32, [[88.8, -1000.0, 88.7]], None, [INF, 0.0, 3.3260e38]),
    ('exp', F64, [[709.8, -1000.0, -745.2]], None, [INF, 0.0, 0.0]),
    ('log', F32, [[0.0, -0.0, -1.0, INF]], None, [-INF, -INF, NAN, INF]),
    ('log', F64, [[0.0, -1.0]], None, [-INF, NAN]),
    ('sqrt', F32, [[-0.0, -1.0]], None, [-0.0, NAN]),
    ('sqrt', F64, [[-0.0]], None, [-0.0]),
    ('add', F32, [[-0.0, -0.0, 0.0], [0.0, -0.0, -0.0]], None, [0.0, -0.0, 0.0]),
    ('mul', F64, [[-0.0, INF], [1.0, 0.0]], None, [-0.0, NAN]),
    ('div', F32, [[1.0, -1.0, 0.0], [-0.0, 0.0, 0.0]], None, [-INF, -INF, NAN]),
    ('sgn', F32, [[-0.0, NAN]], None, [0.0, NAN]),
    ('maximum', F32, [[NAN, 1.0, -INF, NAN], [1.0, NAN, NAN, -INF]], None, [NAN] * 4),
    ('minimum', F64, [[NAN, 1.0, INF, NAN], [1.0, NAN, NAN, INF]], None, [NAN] * 4),
    ('max', F32, [[1.0, NAN, INF, 2.0]], mkargs(), NAN),
    ('min', F64, [[-INF, 2.0, 3.0, NAN]], mkargs(), NAN),
    ('argmax', F32, [[1.0, INF, NAN, -NAN, 5.0]], mkargs(), 2),
    ('argmin', F64, [[1.0, -INF, 5.0, NAN]], mkargs(), 3),
    ('softmax', F32, [[[1000.0, -1000.0], [-1000.0, -1000.0]]], mkargs(axis=-1),
     [[1.0, 0.0], [0.5, 0.5]]),
    ('logsoftmax', F64, [[[1000.0, -1000.0]]], mkargs(axis=-1), [[0.0, -2000.0]]),
]


def sv_landmarks(lib, be, ops):
    """Failure texts of the SV_LANDMARKS on backend be."""
    byname = {o.name: o for o in ops}
    fails = []
    for name, dt, operands, args, want in SV_LANDMARKS:
        if name not in byname:
            fails.append('%s: not in the op table' % name)
            continue
        arrays = [np.array(o, dtype=NP_DT[dt]) for o in operands]
        got, err = sv_eval(lib, be, byname[name], arrays, args)
        want = np.array(want, dtype=np.float64)
        if err:
            fails.append('%s%s: %s' % (name, operands, err))
            continue
        g = got.astype(np.float64)
        close = np.isclose(g, want, rtol=1e-4, atol=0) | (np.isnan(g) & np.isnan(want))
        close &= (np.signbit(g) == np.signbit(want)) | np.isnan(want)
        if g.shape != want.shape or not close.all():
            fails.append('%s %s%s: got %s, expected %s' % (name, DT_NAME[dt], operands,
                                                          g.tolist(), want.tolist()))
    return fails


def sv_fma(lib, be, dt, is_ref):
    """Failure texts of a*b + c and c - a*b over every triple of special
    values. The cpu backend fuses mul+add into one fma (README: 'mul+add
    becomes fma'), which rounds a*b once with c: 1e30f * 1e30f + -inf is -inf
    fused and NaN unfused, as NumPy computes it. Either is accepted, and
    nothing else: the unfused value is NumPy's in the dtype, the fused one
    NumPy's in a wider type (float64 for f32, long double for f64)."""
    npd = NP_DT[dt]
    v = np.array(SV_VALUES[dt], dtype=npd)
    a, b, c = (g.reshape(-1).copy() for g in np.meshgrid(v, v, v, indexing='ij'))
    wide = np.float64 if dt == F32 else np.longdouble
    mul, add, sub = lib.op('mul'), lib.op('add'), lib.op('sub')
    fails = []
    for name, op, plain, fused in [
            ('a*b + c', add, a * b + c, a.astype(wide) * b + c),
            ('c - a*b', sub, c - a * b, c - a.astype(wide) * b)]:
        def tree(n, op=op):
            m = lib.c.ot_build_at(mul, n[0], n[1], None, None, 0)
            x, y = (m, n[2]) if op == add else (n[2], m)
            return lib.c.ot_build_at(op, x, y, None, None, 0)
        got, err = sv_eval(lib, be, tree, [a, b, c])
        if err:
            fails.append('%s: %s' % (name, err))
            continue
        ulps = 1 if is_ref else 2
        bad = sv_bad(got, plain.astype(np.float64), dt, ulps) & \
            sv_bad(got, fused.astype(npd).astype(np.float64), dt, ulps)
        if bad.any():
            ix = np.argwhere(bad)[:3].ravel()
            fails.append('%s: %d of %d wrong, %s' % (name, int(bad.sum()), bad.size, '; '.join(
                'a, b, c = %r, %r, %r: got %r, expected %r or %r' % (
                    float(a[i]), float(b[i]), float(c[i]), got[i].item(), float(plain[i]),
                    float(fused[i].astype(npd))) for i in ix)))
    return fails


def nan_rule_select(a, b, wins):
    """The gradient share of operand a of maximum (wins: a > b) or minimum
    (wins: a < b) under the NaN rule (optree.h, autodiff "Rules"): NaN where
    a is NaN, 0 where b is (the NaN won), else 1, 0.5 at a tie, 0."""
    with np.errstate(invalid='ignore'):
        share = np.where(wins, 1.0, np.where(a == b, 0.5, 0.0))
    return np.where(np.isnan(a), np.nan, np.where(np.isnan(b), 0.0, share))


def nan_rule_max_row(x, mx):
    """d max(x)/dx (mx) or d min(x)/dx of one row: NaN at each NaN and 0
    elsewhere when the row holds one, else 1/ties at the extremes."""
    nan = np.isnan(x)
    if nan.any():
        return np.where(nan, np.nan, 0.0)
    ext = (x == (x.max() if mx else x.min())).astype(np.float64)
    return ext / ext.sum()


def sv_grad(lib, be, dt, build, arrays, wrt):
    """The gradient (next_error ones) of build(nodes) w.r.t. arrays[wrt] on
    be, as float64 values, or (None, failure text)."""
    owned = []
    pool = lib.c.ot_pool_push()
    ad = None
    try:
        tens = []
        for arr in arrays:
            arr = np.ascontiguousarray(arr, dtype=NP_DT[dt])
            t = lib.c.ot_array(be, mkshape(arr.shape), dt, arr.ctypes.data)
            if not t:
                return None, 'ot_array failed: %s' % lib.errmsg()
            owned.append(t)
            tens.append(t)
        f = build([lib.c.ot_tensor_node(t) for t in tens])
        ad = lib.c.ot_autodiff_new(f, None) if f else None
        g = lib.c.ot_autodiff_grad(ad, tens[wrt]) if ad else None
        if not g:
            return None, 'gradient failed: %s' % lib.errmsg()
        shape = arrays[wrt].shape
        out = lib.c.ot_empty(be, mkshape(shape), dt)
        owned.append(out)
        rc = lib.c.ot_assign_node(out, g)
        if rc:
            return None, 'assign failed: %d %s' % (rc, lib.errmsg())
        rc, host = lib.get(out, shape, dt)
        return (host.astype(np.float64), None) if rc == 0 else (None, 'ot_get failed')
    finally:
        if ad:
            lib.c.ot_autodiff_free(ad)
        lib.c.ot_pool_pop(pool)
        for t in reversed(owned):
            lib.c.ot_tensor_free(t)


def sv_nan_grads(lib, be, dt, is_ref):
    """Failure texts of the NaN rule for gradients over the special values
    (every pair for maximum and minimum, both operands): the reference is
    the rule written element by element in NumPy, compared exactly (NaN
    matches NaN)."""
    del is_ref                          # the rule is exact on every backend
    v = np.array(SV_VALUES[dt], dtype=NP_DT[dt]).astype(np.float64)
    a, b = np.repeat(v, len(v)), np.tile(v, len(v))
    rows = np.stack([v, np.where(np.isnan(v), 0.0, v), np.where(np.isnan(v), 1.0, v)])
    fl = (lambda r: np.asarray(r, dtype=NP_DT[dt]).astype(np.float64))
    un = (lambda name: lambda n: lib.build(name, n[0]))
    bi = (lambda name: lambda n: lib.build(name, n[0], n[1]))
    with np.errstate(invalid='ignore'):
        cases = [
            ('abs', un('abs'), [v], 0, np.sign(v)),
            ('relu', un('relu'), [v], 0, np.where(np.isnan(v), np.nan, (v > 0) * 1.0)),
            ('maximum da', bi('maximum'), [a, b], 0, nan_rule_select(a, b, a > b)),
            ('maximum db', bi('maximum'), [a, b], 1, nan_rule_select(b, a, b > a)),
            ('minimum da', bi('minimum'), [a, b], 0, nan_rule_select(a, b, a < b)),
            ('minimum db', bi('minimum'), [a, b], 1, nan_rule_select(b, a, b < a)),
            ('clip(-1, 2)', lambda n: lib.build('clip', n[0], None, mkargs(lo=-1.0, hi=2.0)),
             [v], 0, np.where(np.isnan(v), np.nan, ((v >= -1) & (v <= 2)) * 1.0)),
            ('max rows', lambda n: lib.build('max', n[0], None, mkargs(axis=1)), [rows], 0,
             np.stack([nan_rule_max_row(r, True) for r in fl(rows)])),
            ('min rows', lambda n: lib.build('min', n[0], None, mkargs(axis=1)), [rows], 0,
             np.stack([nan_rule_max_row(r, False) for r in fl(rows)])),
        ]
    fails = []
    for name, build, arrays, wrt, want in cases:
        got, err = sv_grad(lib, be, dt, build, arrays, wrt)
        if err:
            fails.append('NaN gradient of %s: %s' % (name, err))
            continue
        want = fl(want)
        bad = ~((np.isnan(got) & np.isnan(want)) | (got == want))
        if bad.any():
            ix = np.argwhere(bad)[:3]
            fails.append('NaN gradient of %s: %d of %d wrong, %s' % (
                name, int(bad.sum()), bad.size, '; '.join(
                    'at %s (inputs %s): got %r, the rule says %r' % (
                        tuple(int(i) for i in k),
                        ', '.join(repr(float(x[tuple(k)] if x.ndim == len(k) else x[k[-1]]))
                                  for x in arrays), got[tuple(k)], want[tuple(k)])
                    for k in ix)))
    return fails


def sv_sigmoid_tree(lib, be, dt, is_ref):
    """Failure texts of 1 / (1 + exp(-x)) written out as a tree, in both
    orders of the add. The cpu backend folds it into its sigmoid (README:
    '1/(1+exp(-x)) becomes one sigmoid pass'), which has no exp overflow:
    for x = -88.8 in f32 it gives 2.7e-39 where NumPy's float32 formula gives
    1 / inf = 0. Either is accepted (and the ref backend's double formula)."""
    npd = NP_DT[dt]
    x = np.array(SV_VALUES[dt], dtype=npd)
    x64 = x.astype(np.float64)
    want = [1.0 / (1.0 + np.exp(-x)), 1.0 / (1.0 + np.exp(-x64)), sv_sig(x64, np.exp)]
    ids = {n: lib.op(n) for n in ('div', 'add', 'exp', 'neg')}
    ulps = 4 if dt == F64 or not is_ref else 1       # f64: a formula (SV_FORMULA)
    fails = []
    for swap in (False, True):
        def tree(n, swap=swap):
            e = lib.c.ot_build_at(ids['exp'], lib.c.ot_build_at(ids['neg'], n[0], None, None,
                                                                None, 0), None, None, None, 0)
            one = lib.c.ot_const(1.0)
            s = lib.c.ot_build_at(ids['add'], *((e, one) if swap else (one, e)), None, None, 0)
            return lib.c.ot_build_at(ids['div'], lib.c.ot_const(1.0), s, None, None, 0)
        got, err = sv_eval(lib, be, tree, [x])
        name = '1 / (%s)' % ('exp(-x) + 1' if swap else '1 + exp(-x)')
        if err:
            fails.append('%s: %s' % (name, err))
            continue
        bad = np.ones(x.shape, dtype=bool)
        for w in want:
            bad &= sv_bad(got, np.asarray(w, dtype=np.float64), dt, ulps)
        if bad.any():
            fails.append('%s: %s' % (name, '; '.join(
                'x = %r: got %r, expected one of %s' % (float(x[i]), got[i].item(), [
                    float(np.asarray(w[i], dtype=npd)) for w in want])
                for i in np.argwhere(bad)[:3].ravel())))
    return fails


def sv_run(lib, ops, only, max_fails, verbose):
    """Runs the special-value cases; returns (passed, failed)."""
    passed = failed = 0
    todo = [op for op in ops if op.kind in SV_KINDS and op.name in SV_REF and
            (not only or op.name in only) and op.name in {o.name for o in OPS}]
    table = {o.name: o for o in OPS}
    dtypes = {op.name: [dt for dt in FDI if dt in table[op.name].dtypes and
                        (dt != I32 or op.kind != OT_KIND_COMPOSITE)] for op in todo}
    trials = {(op.name, dt): sv_trials(lib, op, dt) for op in todo for dt in dtypes[op.name]}
    for label, name, env, threads, accuracy in sv_configs():
        be = sv_backend(lib, name, env, threads, accuracy)
        if be is None:
            if verbose:
                print('skip special@%s: the CPU lacks it' % label)
            continue
        is_ref = name == b'ref'
        try:
            if not only:
                fails = sv_landmarks(lib, be, ops)
                if fails:
                    failed += 1
                    print('FAIL landmarks@%s: %s' % (label, ' | '.join(fails)))
                else:
                    passed += 1
                for dt in FD:
                    for what, fn in (('fma', sv_fma), ('sigmoid tree', sv_sigmoid_tree),
                                     ('NaN gradients', sv_nan_grads)):
                        fails = fn(lib, be, dt, is_ref)
                        if fails:
                            failed += 1
                            print('FAIL %s %s special@%s: %s' % (what, DT_NAME[dt], label,
                                                               ' | '.join(fails)))
                        else:
                            passed += 1
            for op in todo:
                for dt in dtypes[op.name]:
                    fails = []
                    for desc, arrays, args, inner, ref, tol in trials[(op.name, dt)]:
                        f = sv_trial(lib, be, op, dt, is_ref, accuracy, desc, arrays, args,
                                     inner, ref, tol)
                        if f:
                            fails.append(f)
                    if fails:
                        failed += 1
                        more = '' if len(fails) <= max_fails else \
                            ' [and %d more trials]' % (len(fails) - max_fails)
                        print('FAIL %s %s special@%s: %d of %d trials: %s%s' % (
                            op.name, DT_NAME[dt], label, len(fails), len(trials[(op.name, dt)]),
                            ' | '.join(fails[:max_fails]), more))
                    else:
                        passed += 1
                        if verbose:
                            print('ok   %s %s special@%s' % (op.name, DT_NAME[dt], label))
                    sys.stdout.flush()
        finally:
            lib.c.ot_backend_free(be)
    return passed, failed


def sv_trial(lib, be, op, dt, is_ref, accuracy, desc, arrays, args, inner, ref, tol):
    try:
        vals = [np.float64(a) if isinstance(a, float) else
                a.astype(np.int64 if dt == I32 else np.float64) for a in arrays]
        exp = ref(*vals)
        if dt == I32 and op.name in SV_WRAP and op.kind == OT_KIND_REDUCE:
            if not fits_i32(exp):       # an exact int32 sum outside int32's range
                _, err = sv_eval(lib, be, op, arrays, args, inner)
                if err and err.startswith('assign failed: %d ' % OT_EOVERFLOW) and 'sum' in err:
                    return None
                return '%s: int32 sum outside int32: expected OT_EOVERFLOW, got %s' % (
                    desc, err or 'a result')
        elif dt == I32 and op.name in SV_WRAP:   # int32 arithmetic wraps, as NumPy's
            exp = (np.asarray(exp, dtype=np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31
        exp = np.asarray(exp, dtype=np.float64)
        got, err = sv_eval(lib, be, op, arrays, args, inner)
        if err:
            return '%s: %s' % (desc, err)
        if got.shape != exp.shape:
            return '%s: shape %s, expected %s' % (desc, got.shape, exp.shape)
        odt = {np.float32: F32, np.float64: F64, np.int32: I32}[got.dtype.type]
        exact = op.name in SV_EXACT
        if exact:
            ulps = None
        elif accuracy:              # OT_ULP35: SLEEF's u35 functions
            ulps = 6 + 2 * (op.name in SV_FORMULA)
        elif odt == F32:
            ulps = 1 if is_ref else 4
        else:
            ulps = 2 + 2 * (op.name in SV_FORMULA)
        scale = None
        if tol is not None:
            shp = arrays[0].shape
            if op.kind == OT_KIND_DOT:
                n = shp[-1]
            else:
                n = int(np.prod(shp)) if args is None or args.axis == AXIS_ALL else shp[args.axis]
            eps = 2.0 ** -52 if dt == F64 else 2.0 ** -23
            scale = tol(*vals, 4.0 * n * eps)
        zsign = op.name not in SV_NO_ZERO_SIGN and op.kind in (OT_KIND_UNARY, OT_KIND_BINARY)
        bad = sv_bad(got, exp, odt, ulps, scale, 1.0, zsign)
        if bad.any() and dt == F32 and op.kind in (OT_KIND_REDUCE, OT_KIND_DOT,
                                                                 OT_KIND_COMPOSITE):
            # every backend computes f32 in f32, so it may overflow or underflow in
            # intermediates (squares of 1e30, of denormals) exactly where
            # NumPy's own float32 computation of the formula does
            native = np.asarray(ref(*arrays), dtype=np.float64)   # arrays: no consts
            bad &= sv_bad(got, native, odt, ulps, scale, 1.0, zsign)
        if not bad.any():
            return None
        parts = []
        for ix in np.argwhere(bad)[:3]:
            ix = tuple(int(i) for i in ix)
            item = 'at %s: expected %r got %r' % (ix, float(exp[ix]), got[ix].item())
            if op.kind in (OT_KIND_UNARY, OT_KIND_BINARY) or op.name == 'clip':
                ins = [float(np.broadcast_to(v, exp.shape)[ix]) for v in vals]
                item += ' (inputs %s)' % ', '.join(repr(x) for x in ins)
            parts.append(item)
        return '%s: %d of %d wrong, %s' % (desc, int(bad.sum()), bad.size, '; '.join(parts))
    except Exception:                   # a bug in this script: say where
        tb = traceback.format_exc(limit=-2).strip().replace('\n', ' / ')
        return 'internal error in %s: %s' % (desc, tb)


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------

def case_rng(seed, *key):
    return np.random.default_rng([seed, zlib.crc32('/'.join(map(str, key)).encode())])


def run_case(lib, seed, op, dtlabel, dt, scen):
    rng = case_rng(seed, op.name, dtlabel, scen)
    pool = lib.c.ot_pool_push()
    try:
        if op.kind == 'rand':
            return run_rand_case(lib, dt, scen, rng), 1
        trials = GENERATORS[op.kind](op, dt, scen, rng)
        fails = []
        for t in trials:
            f = run_trial(lib, rng, op, t)
            if f:
                fails.append(f)
        return fails, len(trials)
    finally:
        if pool:
            lib.c.ot_pool_pop(pool)


# ---- printing: ot_tensor_print_opts against np.array2string ----------------------


class OtPrintOptions(C.Structure):
    _fields_ = [('threshold', C.c_int64), ('edgeitems', C.c_int), ('precision', C.c_int)]


def printed(lib, arr, dt, precision):
    """What ot_tensor_print_opts writes for arr, through a libc memstream."""
    libc = C.CDLL(None)
    libc.open_memstream.restype = C.c_void_p
    libc.open_memstream.argtypes = [C.POINTER(C.c_char_p), C.POINTER(C.c_size_t)]
    libc.fclose.argtypes = [C.c_void_p]
    fn = lib.c.ot_tensor_print_opts
    fn.argtypes = [C.c_void_p, C.c_void_p, C.c_void_p]
    t = lib.array(arr, dt)
    buf, n = C.c_char_p(), C.c_size_t()
    f = libc.open_memstream(C.byref(buf), C.byref(n))
    rc = fn(t, f, C.byref(OtPrintOptions(0, 0, precision)))
    libc.fclose(f)
    lib.c.ot_tensor_free(t)
    text = C.string_at(buf, n.value).decode()
    C.CDLL(None).free(C.cast(buf, C.c_void_p))
    return text if rc == 0 else 'rc %d: %s' % (rc, lib.errmsg())


def print_values(rng):
    """Values of every layout NumPy picks: plain, over many decades, whole,
    few decimals, zeros, nan and inf among them."""
    n = int(rng.integers(1, 7))
    kind = int(rng.integers(0, 6))
    if kind == 0:
        return rng.standard_normal(n) * 10.0 ** int(rng.integers(-12, 12))
    if kind == 1:
        return 10.0 ** rng.uniform(-6, 10, n) * rng.choice([-1, 1], n)
    if kind == 2:
        return np.round(rng.standard_normal(n) * 100, int(rng.integers(0, 6)))
    if kind == 3:
        return rng.integers(-5, 5, n) / 8.0
    if kind == 4:
        return rng.integers(0, 3, n) * rng.standard_normal() * 1000
    return np.array([rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, 1e-5, 123456789.0,
                                 0.1, 1 / 3]) for _ in range(n)])


def print_case(lib, seed, max_fails):
    """'print@ref': 2000 random arrays of both float dtypes at nine precisions
    (0 is the default, 8) print as NumPy's array2string, byte for byte."""
    rng = np.random.default_rng(seed)
    fails, trials = [], 0
    for _ in range(1000):
        v = print_values(rng)
        for dt in (F32, F64):
            a = v.astype(NP_DT[dt])
            precision = int(rng.choice([0, 1, 2, 3, 4, 6, 8, 12, 17]))
            want = np.array2string(a, separator=' ', max_line_width=10 ** 9,
                                   precision=precision or 8) + '\n'
            got = printed(lib, a, dt, precision)
            trials += 1
            if got != want and len(fails) < max_fails:
                fails.append('%s %s precision %d: %r, NumPy %r' % (
                    DT_NAME[dt], a.tolist(), precision, got, want))
    return fails, trials


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('lib', nargs='?', default='build/liboptree.so')
    ap.add_argument('--seed', type=int, default=20240601)
    ap.add_argument('--only', default='', help='comma-separated op names')
    ap.add_argument('--max-fails', type=int, default=3, help='failures shown per case')
    ap.add_argument('-v', '--verbose', action='store_true', help='print every case')
    opt = ap.parse_args(argv)

    warnings.simplefilter('ignore')
    np.seterr(all='ignore')
    lib = Lib(opt.lib)
    add_ufunc_ops(lib)
    only = set(s for s in opt.only.split(',') if s)
    passed = failed = 0
    for op in OPS:
        if only and op.name not in only:
            continue
        cases = [(DT_NAME[dt], dt, scen) for dt in op.dtypes for scen in SCENARIOS[op.kind]
                 if dt in SCENARIO_DTYPES.get(scen, (dt,))]
        if op.kind == 'binary':
            cases.append(('mixed', None, 'mixed'))
        if lib.op(op.name) < 0:
            for c in cases:
                print('FAIL %s %s %s: ot_op_lookup("%s") is OT_OP_NONE' % (op.name, c[0], c[2],
                                                                           op.name))
            failed += len(cases)
            continue
        for dtlabel, dt, scen in cases:
            try:
                fails, ntrials = run_case(lib, opt.seed, op, dtlabel, dt, scen)
            except Exception as e:         # a bug in this script: report, go on
                fails, ntrials = ['internal error: %r' % e], 0
            if fails:
                failed += 1
                shown = fails[:opt.max_fails]
                more = '' if len(fails) <= len(shown) else ' [and %d more trials]' % (
                    len(fails) - len(shown))
                print('FAIL %s %s %s: %d of %d trials: %s%s' % (
                    op.name, dtlabel, scen, len(fails), ntrials, ' | '.join(shown), more))
            else:
                passed += 1
                if opt.verbose:
                    print('ok   %s %s %s (%d trials)' % (op.name, dtlabel, scen, ntrials))
            sys.stdout.flush()
    ops = sv_ops(lib)
    for line in sv_check_table(lib, ops):
        print(line)
        failed += 1
    p, f = sv_run(lib, ops, only, opt.max_fails, opt.verbose)
    passed, failed = passed + p, failed + f
    if not only or 'print' in only:
        fails, ntrials = print_case(lib, opt.seed, opt.max_fails)
        if fails or opt.verbose:
            print('%s print@ref: %s' % ('FAIL' if fails else 'ok  ', ' | '.join(fails) or
                                         '%d arrays as NumPy prints them' % ntrials))
        passed, failed = passed + (not fails), failed + bool(fails)
    lib.c.ot_backend_free(lib.be)
    print('%d passed, %d failed' % (passed, failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
