"""half_check.py - f16 and bf16 tensors (OT_F16, OT_BF16: docs/half.md)
against NumPy on the ref and cpu backends, every op of the library's table
(ot_op_name ...: an op that no part covers fails by name). Run by make
check's numpy phase (tools/test.sh):
  python3 tests/half_check.py build/liboptree.so
Prints "N passed, N failed"; exits 1 on a failure.

The reference. Inputs are 16-bit values (drawn, then rounded to the dtype
in NumPy), handed to ot_array as f32 (exact). The expected value is the
op computed by NumPy in float64 on those values, rounded once to the
output's dtype - what optree promises (ref computes in double and rounds at
the store; cpu computes in f32 and rounds at the store).
  - f16 natively: np.float64 -> np.float16 is NumPy's own correctly rounded
    conversion (round to nearest even, overflow to inf).
  - bf16 via f32: NumPy has no bf16. A bf16 value is an f32 whose low 16
    bits are 0 (a pattern widens by << 16); float64 rounds to bf16 in NumPy
    integer ops: first to f32 rounded to odd (the f32 conversion, then the
    last bit set where it was inexact, moved toward zero first where it
    rounded up in magnitude), then round to nearest even on the bit pattern
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16); rounding to odd first makes the
    two roundings one. Case "bf16 rounding" checks it against a second
    definition (frexp and np.rint in float64) on values around every
    rounding boundary.
Tolerances (in units of the 16-bit dtype, ulps, of the once-rounded
expected value; NaN must be NaN and +-inf exactly +-inf everywhere; zeros
keep their sign except where optree does not define it, SV_NO_ZERO_SIGN):
  - exact (0 ulps): ops correctly rounded in f32 (add sub mul div sqrt sqr
    and the other exact ops of diff_numpy's SV_EXACT): f32 has 24 >= 2*11+2
    bits, so rounding to f32 and then to f16/bf16 equals one rounding;
    compares, min/max, argmax, casts, shape ops, indexing.
  - 1 ulp: the transcendental ops (exp, log, tanh, pow, ...) - cpu's f32
    result is within an f32 ulp or so of the true value, which can move
    the rounding to the 16-bit neighbour; ref's double differs from NumPy's
    libm in the last bits likewise.
  - sums, dots and their composites (mean, var, std, softmax, logsoftmax,
    squared_l2, cross_entropy): 1 ulp plus diff_numpy's SV_TOL bound for
    4 n eps_f32 (cpu adds in f32).
  - the structured ops (conv, pooling, take, scatter_add, where, tril,
    triu, cumsum, topk, take_along, scatter_add_along, attention and their
    gradients) run through the other checks' cases and NumPy references
    (conv_check, pool_check, index_check, topk_check, attn_check) with the
    16-bit dtype, their inputs rounded to bf16 first (so exact in f16 and
    bf16): within 2 ulps of (1 + max |expected|).
Shapes: random (0-d to 4-d, size-0 and size-1 dims), broadcasts, transposed
and stepped views; special values (NaN, +-inf, -0.0, f16 subnormals, 65504,
values past it: 70000 is inf once stored); every 2^16 bit pattern through
every unary op; mixed dtypes (f16 with f32 gives f32, with bf16 f32, with
f64 f64, with i32 the 16-bit dtype, a constant rounded to it). Files:
ot_save/ot_savez of f16 ('<f2') and bf16 ('<V2', as numpy.save writes an
ml_dtypes bfloat16 array) read by np.load, and NumPy's files read by
ot_load/ot_loadz, bits compared.
"""
import ctypes as C
import math
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attn_check  # noqa: E402
import conv_check  # noqa: E402
import diff_numpy as dn  # noqa: E402
import index_check  # noqa: E402
import pool_check  # noqa: E402
import topk_check  # noqa: E402
from diff_numpy import (F32, F64, I32, Lib, TrialError, input_on, mkargs,  # noqa: E402
                        node_value)

F16, BF16 = 4, 5
NAME = {F16: 'f16', BF16: 'bf16', F32: 'f32', F64: 'f64', I32: 'i32'}
# Host copies of a 16-bit tensor are f32 arrays (ot_array rounds, ot_get
# widens): the helpers of diff_numpy look their host dtype up here.
for _d in (F16, BF16):
    dn.NP_DT.setdefault(_d, np.float32)
    dn.SENTINEL.setdefault(_d, 12344.0)
UNIT = {F16: 2.0 ** -10, BF16: 2.0 ** -7}


# ---- rounding to the 16-bit dtypes ------------------------------------------

def to_f16(x):
    with np.errstate(over='ignore', invalid='ignore'):
        return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)


def bf16_bits(x):
    """float64 -> bf16 patterns (uint32 holding 16 bits), rounded once."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over='ignore', invalid='ignore'):
        f = x.astype(np.float32)
        back = f.astype(np.float64)
        inexact = (back != x) & ~np.isnan(x)
        up = np.abs(back) > np.abs(x)
    b = np.atleast_1d(f).view(np.uint32).astype(np.int64).reshape(x.shape)
    b = np.where(inexact & up, b - 1, b)          # toward zero: sign-magnitude bits
    b = np.where(inexact, b | 1, b)               # round to odd
    r = (b + 0x7fff + ((b >> 16) & 1)) >> 16
    r = np.where(np.isnan(x), (b >> 16) | 0x40, r)   # NaN stays NaN, quiet
    return r.astype(np.uint32)


def to_bf16(x):
    b = np.atleast_1d(bf16_bits(x).astype(np.uint32) << np.uint32(16)).view(np.float32)
    b = b.astype(np.float64)
    return b.reshape(np.shape(x))


def to_bf16_frexp(x):
    """A second definition of the bf16 rounding, for the check of to_bf16."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over='ignore', invalid='ignore'):
        _, e = np.frexp(x)
        e = np.maximum(e, -125)                   # bf16's subnormals: units of 2^-133
        r = np.ldexp(np.rint(np.ldexp(x, 8 - e)), e - 8)
        r = np.where(np.abs(r) > 3.3895313892515355e38, np.copysign(np.inf, x), r)
    return np.where(np.isfinite(x), r, x)


def rnd(x, dt):
    x = np.asarray(x, dtype=np.float64)
    if dt == F16:
        return to_f16(x)
    if dt == BF16:
        return to_bf16(x)
    if dt == F32:
        with np.errstate(over='ignore', invalid='ignore'):
            return x.astype(np.float32).astype(np.float64)
    if dt == I32:
        return dn.to_i32(x).astype(np.float64)
    return x


def ordered(v, dt):
    """Integers in the order of dt's values (+-0 are 0 apart)."""
    if dt == F16:
        i = np.asarray(v, dtype=np.float64).astype(np.float16).view(np.int16).astype(np.int64)
        return np.where(i < 0, -(i & 0x7fff), i)
    i = (bf16_bits(v).astype(np.int64) << 48) >> 48      # sign-extended 16 bits
    return np.where(i < 0, -(i & 0x7fff), i)


def bad16(got, want, dt, ulps, tol=None, zero_sign=True):
    """Mask of got (dtype dt) not matching float64 want rounded to dt."""
    e = rnd(want, dt)
    g = np.asarray(got, dtype=np.float64)
    bad, fin = dn.class_bad(e, g, zero_sign)
    far = np.abs(ordered(np.where(fin, g, 0), dt) - ordered(np.where(fin, e, 0), dt)) > ulps
    if tol is not None:
        with np.errstate(invalid='ignore'):
            far &= ~(np.abs(g - want) <= tol)
    return bad | (fin & far)


def bad_any(got, want, dt, ulps, tol=None, zero_sign=True):
    if dt in (F16, BF16):
        return bad16(got, want, dt, ulps, tol, zero_sign)
    return dn.sv_bad(got, want, dt, ulps if dt != I32 else None, None if tol is None else 1.0,
                     0.0 if tol is None else tol, zero_sign)


# ---- values -----------------------------------------------------------------

SPECIAL = [math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, 2.0 ** -24, -2.0 ** -24,
           3 * 2.0 ** -20, 2.0 ** -14, 65504.0, -65504.0, 70000.0, 65520.0, 1.0, -1.0, 0.5,
           1 + 2.0 ** -10, 3.140625, -2.75, 100.0, 1e-3, 1e30, -3e38, 1e-40]


def values(rng, shape, dt, special=0.0, dom='real'):
    if dom == 'pos':
        v = np.exp(rng.uniform(-6, 6, shape))
    elif dom == 'cmp':
        v = rng.integers(-3, 4, shape) / 2.0
    else:
        v = rng.standard_normal(shape) * 3
    v = np.asarray(v, dtype=np.float64)
    if special and v.size:
        m = rng.random(v.shape) < special
        v[m] = rng.choice(np.array(SPECIAL), int(m.sum()))
    return rnd(v, dt) if dt != I32 else np.asarray(np.nan_to_num(np.trunc(v)), dtype=np.int32)


def rshape(rng, lo=0, hi=4):
    nd = int(rng.integers(lo, hi + 1))
    return tuple(0 if rng.random() < 0.08 else int(rng.integers(1, 5)) for _ in range(nd))


def all_patterns(dt):
    if dt == F16:
        return np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float64)
    with np.errstate(invalid='ignore'):
        return (np.arange(65536, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)


# ---- running a tree ---------------------------------------------------------

class Check:
    def __init__(self, path):
        self.lib = Lib(path)
        self.c = self.lib.c
        self.passed = self.failed = 0
        self.rng = np.random.default_rng(36)
        self.covered = set()

    def ok(self, what, good, detail=''):
        if good:
            self.passed += 1
        else:
            self.failed += 1
            print('FAIL %s%s' % (what, detail))

    def run(self, be, build, arrays, kinds=None):
        """build(nodes) on tensors of arrays ((array, dtype) pairs or float
        constants) on be: (values, dtype) or raises TrialError."""
        c, owned = self.c, []
        pool = c.ot_pool_push()
        try:
            nodes = []
            for i, a in enumerate(arrays):
                if isinstance(a, float):
                    nodes.append(c.ot_const(a))
                    continue
                arr, dt = a
                kind = kinds[i] if kinds else 'contig'
                if kind == 'step' and not np.ndim(arr):
                    kind = 'contig'
                t = input_on(self.lib, self.rng, be, np.asarray(arr), dt, kind, owned)
                nodes.append(c.ot_tensor_node(t))
            node = build(nodes)
            if not node:
                raise TrialError('build: %s' % self.lib.errmsg())
            return node_value(self.lib, be, node, owned), c.ot_node_dtype(node)
        finally:
            c.ot_clear_error()
            c.ot_pool_pop(pool)
            for t in reversed(owned):
                c.ot_tensor_free(t)

    def compare(self, what, be_name, build, arrays, want, want_dt, ulps, tol=None,
                zero_sign=True, kinds=None, be=None):
        what = '%s@%s' % (what, be_name)
        try:
            got, dt = self.run(be, build, arrays, kinds)
        except TrialError as e:
            if want is None:          # NumPy has no value either
                self.ok(what, True)
            else:
                self.ok(what, False, ': %s' % e)
            return
        if want is None:
            self.ok(what, False, ': built, where NumPy has no value')
            return
        want = np.asarray(want, dtype=np.float64)
        if dt != want_dt or got.shape != want.shape:
            self.ok(what, False, ': dtype %s shape %s, expected %s %s' % (
                NAME.get(dt, dt), got.shape, NAME.get(want_dt), want.shape))
            return
        if tol is not None:
            tol = np.broadcast_to(np.asarray(tol, dtype=np.float64), want.shape)
        b = bad_any(got, want, dt, ulps, tol, zero_sign)
        if b.any():
            i = np.argwhere(b)[0]
            self.ok(what, False, ': %d of %d differ; at %s got %r, want %r (%s)' % (
                int(b.sum()), b.size, tuple(i), float(got[tuple(i)]), float(want[tuple(i)]),
                NAME[dt]))
        else:
            self.ok(what, True)

    def build_op(self, op_id, args=None):
        c = self.c
        return lambda n: c.ot_build_at(op_id, n[0], n[1] if len(n) > 1 else None,
                                       C.byref(args or mkargs()), None, 0)


# ---- the op table's parts ---------------------------------------------------

HALF = (F16, BF16)
EXACT = dn.SV_EXACT
SUMS = {'sum', 'mean', 'var', 'std', 'softmax', 'logsoftmax', 'squared_l2'}


def np_ref(fn, *a):
    with np.errstate(all='ignore'):
        return fn(*a)


class Parts(Check):
    def each(self, backends, fn):
        for bname, be in backends:
            for dt in HALF:
                fn(bname, be, dt)

    def unary(self, op, backends):
        ref = dn.SV_REF[op.name]
        ulps = 0 if op.name in EXACT else 1
        zs = op.name not in dn.SV_NO_ZERO_SIGN

        def one(bname, be, dt):
            x = all_patterns(dt)
            what = '%s %s every pattern' % (op.name, NAME[dt])
            self.compare(what, bname, self.build_op(op.id), [(x, dt)], np_ref(ref, x), dt, ulps,
                         zero_sign=zs, be=be)
            x = values(self.rng, (5, 7), dt, 0.2)
            kind = ['T', 'step'][int(self.rng.integers(0, 2))]
            self.compare('%s %s %s view' % (op.name, NAME[dt], kind), bname, self.build_op(op.id),
                         [(x, dt)], np_ref(ref, x), dt, ulps, zero_sign=zs, kinds=[kind], be=be)
        self.each(backends, one)

    def binary(self, op, backends):
        ref = dn.SV_REF[op.name]
        ulps = 0 if op.name in EXACT else 1
        zs = op.name not in dn.SV_NO_ZERO_SIGN
        b = self.build_op(op.id)
        dom = 'pos' if op.name == 'pow' else 'cmp' if op.name in ('eq', 'ne', 'lt', 'le', 'gt',
                                                                   'ge') else 'real'

        def one(bname, be, dt):
            v = rnd(np.array(SPECIAL + list(self.rng.standard_normal(12) * 4)), dt)
            self.compare('%s %s all pairs of specials' % (op.name, NAME[dt]), bname, b,
                         [(v[:, None], dt), (v[None, :], dt)],
                         np_ref(ref, v[:, None], v[None, :]), dt, ulps, zero_sign=zs, be=be)
            s = rshape(self.rng, 0, 4)
            sb = dn.bcast_operand(self.rng, s)
            x, y = values(self.rng, s, dt, 0.1, dom), values(self.rng, sb, dt, 0.1, dom)
            kinds = [['contig', 'T', 'step'][int(self.rng.integers(0, 3))] for _ in range(2)]
            self.compare('%s %s %s . %s %s' % (op.name, NAME[dt], s, sb, kinds), bname, b,
                         [(x, dt), (y, dt)], np_ref(ref, x, y), dt, ulps, zero_sign=zs,
                         kinds=kinds, be=be)
            k = rnd(0.1, dt)                  # a weak constant takes the dtype: rounded
            self.compare('%s %s x . 0.1' % (op.name, NAME[dt]), bname, b, [(x, dt), 0.1],
                         np_ref(ref, x, k), dt, ulps, zero_sign=zs, be=be)
            self.compare('%s %s 0.1 . x' % (op.name, NAME[dt]), bname, b, [0.1, (x, dt)],
                         np_ref(ref, k, x), dt, ulps, zero_sign=zs, be=be)
            other = BF16 if dt == F16 else F16
            for dt2, out in ((F32, F32), (F64, F64), (other, F32), (I32, dt)):
                y2 = values(self.rng, sb, dt2, 0.1 if dt2 != I32 else 0, dom)
                if dt2 == I32:
                    y2 = np.abs(y2) + (1 if op.name == 'pow' else 0)
                mu = ulps if out in HALF else (ulps and 2)
                self.compare('%s %s . %s' % (op.name, NAME[dt], NAME[dt2]), bname, b,
                             [(x, dt), (y2, dt2)], np_ref(ref, x, y2.astype(np.float64)), out,
                             mu, zero_sign=zs, be=be)
        self.each(backends, one)

    def reduce(self, op, backends):
        ref, tolf = dn.SV_REF[op.name], dn.SV_TOL.get(op.name)
        arg = op.name in ('argmax', 'argmin')
        ulps = 0 if op.name in EXACT else 1

        def one(bname, be, dt):
            for _ in range(3):
                s = rshape(self.rng, 0, 4)
                if op.name not in ('sum', 'squared_l2'):
                    s = tuple(d or 1 for d in s)      # no identity: OT_EEMPTY
                nd = len(s)
                ax = None if nd == 0 or self.rng.random() < 0.3 else int(
                    self.rng.integers(-nd, nd))
                kd = bool(op.kind == dn.OT_KIND_REDUCE and self.rng.random() < 0.4)
                x = values(self.rng, s, dt, 0.12)
                want = np_ref(ref, x, ax)
                tol = None
                if tolf:
                    n = x.size if ax is None else s[ax]
                    tol = np_ref(tolf, x, ax, 4 * max(n, 1) * 2.0 ** -24)
                if kd:
                    shp = tuple(1 if ax is None or i == ax % nd else d for i, d in enumerate(s))
                    want = np.reshape(want, shp)
                    tol = None if tol is None else np.reshape(tol, shp)
                kind = ['contig', 'T', 'step'][int(self.rng.integers(0, 3))]
                args = mkargs(axis=ax, keepdims=kd)
                self.compare('%s %s %s axis %s keepdims %d %s' % (op.name, NAME[dt], s, ax, kd,
                                                                 kind),
                             bname, self.build_op(op.id, args), [(x, dt)], want,
                             I32 if arg else dt, ulps, tol, zero_sign=False, kinds=[kind], be=be)
        self.each(backends, one)

    def clip(self, op, backends):
        def one(bname, be, dt):
            for lo, hi in ((-1.0, 1.0), (0.0, math.inf), (-math.inf, 0.5)):
                x = values(self.rng, rshape(self.rng), dt, 0.2)
                self.compare('clip %s [%r, %r]' % (NAME[dt], lo, hi), bname,
                             self.build_op(op.id, mkargs(lo=lo, hi=hi)), [(x, dt)],
                             np.minimum(np.maximum(x, lo), hi), dt, 0, zero_sign=False, be=be)
        self.each(backends, one)

    def cross_entropy(self, op, backends):
        def one(bname, be, dt):
            s = (int(self.rng.integers(1, 5)), int(self.rng.integers(1, 6)))
            p = rnd(self.rng.uniform(0.01, 1, s), dt)
            t = rnd(self.rng.uniform(0, 1, s), dt)
            ax = int(self.rng.integers(-2, 2))
            tol = dn.SV_TOL['cross_entropy'](p, t, ax, 4 * s[ax] * 2.0 ** -24)
            self.compare('cross_entropy %s %s axis %d' % (NAME[dt], s, ax), bname,
                         self.build_op(op.id, mkargs(axis=ax)), [(p, dt), (t, dt)],
                         np_ref(dn.SV_REF['cross_entropy'], p, t, ax), dt, 1, tol, be=be)
        self.each(backends, one)

    def dot(self, op, backends):
        ref, tolf = dn.SV_REF[op.name], dn.SV_TOL[op.name]

        def one(bname, be, dt):
            r = self.rng
            for _ in range(3):
                m, n, p = (int(r.integers(0, 6)) for _ in range(3))
                if op.name == 'batched_dot':
                    bb = int(r.integers(1, 4))
                    sa, sb = (bb, m, n), (bb, n, p)
                else:
                    sa, sb = [((n,), (n,)), ((m, n), (n,)), ((m, n), (n, p)),
                              ((n,), (n, p))][int(r.integers(0, 4))]
                a, b = values(r, sa, dt), values(r, sb, dt)
                kinds = ['T' if len(sa) > 1 and r.random() < 0.5 else 'contig',
                         'T' if len(sb) > 1 and r.random() < 0.5 else 'contig']
                tol = tolf(a, b, 4 * max(n, 1) * 2.0 ** -24)
                self.compare('%s %s %s . %s %s' % (op.name, NAME[dt], sa, sb, kinds), bname,
                             self.build_op(op.id), [(a, dt), (b, dt)], np_ref(ref, a, b), dt, 1,
                             tol, zero_sign=False, kinds=kinds, be=be)
        self.each(backends, one)

    def shape_ops(self, op, backends):
        r = self.rng

        def one(bname, be, dt):
            s = rshape(r, 1, 4)
            x = values(r, s, dt, 0.2)
            if op.name == 'transpose':
                perm = [int(i) for i in r.permutation(len(s))]
                args, want = mkargs(perm=perm), np.transpose(x, perm)
            elif op.name == 'reshape':
                new = (x.size,) if r.random() < 0.5 else tuple(reversed(s))
                args, want = mkargs(shape=new), x.reshape(new)
            elif op.name == 'slice':
                steps, counts, starts, want = [], [], [], x
                for d, n in enumerate(s):
                    k = [1, 2, -1][int(r.integers(0, 3))]
                    c = int(r.integers(0, (n + abs(k) - 1) // abs(k) + 1)) if n else 0
                    st = (0 if k > 0 else n - 1) if c else 0
                    steps.append(k), counts.append(c), starts.append(st)
                    want = np.take(want, [st + k * i for i in range(c)], axis=d)
                args = mkargs(perm=steps, shape=tuple(counts), start=starts)
            elif op.name == 'keep':
                args, want = mkargs(), x
            self.compare('%s %s %s' % (op.name, NAME[dt], s), bname, self.build_op(op.id, args),
                         [(x, dt)], want, dt, 0, kinds=[['contig', 'T', 'step'][
                             int(r.integers(0, 3))]], be=be)
        self.each(backends, one)

    def cast(self, op, backends):
        r = self.rng
        src = np.array(SPECIAL + [1e-8, 1e-5, 6e-5, 2.0 ** 31, -1e10] +
                       list(r.standard_normal(20) * 1000))

        def one(bname, be, dt):
            x = rnd(src, dt)
            for to in (F32, F64, I32, F16, BF16):
                self.compare('cast %s -> %s' % (NAME[dt], NAME[to]), bname,
                             self.build_op(op.id, mkargs(dtype=to)), [(x, dt)], rnd(x, to), to,
                             0, be=be)
            for frm in (F32, F64, I32, BF16 if dt == F16 else F16):
                y = rnd(np.nan_to_num(src, nan=7.0) if frm == I32 else src, frm)
                self.compare('cast %s -> %s' % (NAME[frm], NAME[dt]), bname,
                             self.build_op(op.id, mkargs(dtype=dt)), [(y, frm)], rnd(y, dt), dt,
                             0, kinds=['step'], be=be)
        self.each(backends, one)

    def onehot(self, op, backends):
        def one(bname, be, dt):
            idx = rnd(self.rng.integers(-1, 5, (3, 4)), dt)
            want = np.moveaxis((idx[..., None] == np.arange(4.0)).astype(np.float64), -1, 1)
            self.compare('onehot %s -> %s' % (NAME[dt], NAME[dt]), bname,
                         self.build_op(op.id, mkargs(axis=1, depth=4, dtype=dt)), [(idx, dt)],
                         want, dt, 0, be=be)
        self.each(backends, one)

    def rand(self, op, backends):
        """rand draws f32 or f64 only (docs/half.md): a 16-bit dtype is an
        error at build; a cast of the f32 draws rounds them."""
        c = self.c
        for bname, be in backends:
            for dt in HALF:
                n = c.ot_build_at(op.id, None, None, C.byref(mkargs(shape=(5,), dtype=dt)),
                                  None, 0)
                self.ok('rand %s refused@%s' % (NAME[dt], bname), not n and c.ot_errcode() != 0)
                c.ot_clear_error()
                a = mkargs(dtype=F32, seed=3, shape=(9,))
                r32, _ = self.run(be, lambda _: c.ot_build_at(op.id, None, None, C.byref(a),
                                                              None, 0), [])
                self.compare('cast(rand f32, %s)' % NAME[dt], bname,
                             lambda _: c.ot_build_at(self.lib.op('cast'), c.ot_build_at(
                                 op.id, None, None, C.byref(a), None, 0), None,
                                 C.byref(mkargs(dtype=dt)), None, 0), [], rnd(r32, dt), dt, 0,
                             be=be)

    def concat(self, op, backends):
        def one(bname, be, dt):
            s = rshape(self.rng, 1, 3)
            ax = int(self.rng.integers(0, len(s)))
            s2 = tuple(int(self.rng.integers(0, 4)) if i == ax else d for i, d in enumerate(s))
            for dt2, out in ((dt, dt), (F32, F32)):
                a, b = values(self.rng, s, dt, 0.2), values(self.rng, s2, dt2, 0.2)
                self.compare('concat %s . %s axis %d' % (NAME[dt], NAME[dt2], ax), bname,
                             self.build_op(op.id, mkargs(axis=ax)), [(a, dt), (b, dt2)],
                             np.concatenate([a, b], axis=ax), out, 0, be=be)
        self.each(backends, one)


# ---- the structured ops: the other checks' cases in 16 bits ------------------

def check16(run, what, got, want, dt):
    """The other checks' comparison for a 16-bit dtype: want rounded to dt,
    NaN and inf where it has them, else within 2 units of dt times
    (1 + max |want|)."""
    if want is None:
        return
    e = rnd(want, dt)
    good = got is not None and got.shape == e.shape and \
        np.array_equal(np.isnan(got), np.isnan(e))
    inf = np.isinf(e) & good
    good = good and np.array_equal(got[inf], e[inf])
    fin = np.isfinite(e)
    if good and fin.any():
        good = np.abs(got[fin] - e[fin]).max() <= 2 * UNIT[dt] * (1 + np.abs(want[fin]).max())
    run.passed += good
    run.failed += not good
    if not good:
        print('FAIL %s %s\n  got  %s\n  want %s' % (NAME[dt], what, None if got is None else
                                                   got.ravel()[:10], e.ravel()[:10]))


SWAP = {F64: F16, F32: BF16}    # the other checks loop over (F64, F32)


class IndexH(index_check.Runner):
    def check(self, what, got, want, dt):
        check16(self, what, got, want, dt)


class TopkH(topk_check.TopkRunner):
    def check(self, what, got, want, dt):
        check16(self, what, got, want, dt)


class PoolH(pool_check.Runner):
    def check(self, what, got, want, dt):
        check16(self, what, got, want, dt)

    def run(self, be, bname, geo, arrs, want, dt, idx):
        super().run(be, bname, geo, arrs, want, SWAP[dt], idx)


class AttnH(attn_check.Runner):
    def check(self, what, got, want, dt):
        check16(self, what, got, want, dt)

    def run(self, be, bname, case, arrs, want, dt, idx):
        # want is NumPy's on the same values: rounded_draw rounds them first
        super().run(be, bname, case, arrs, want, SWAP[dt], idx)


class ConvH(conv_check.Runner):
    def value(self, be, node, dt):
        shp = self.c.ot_node_shape(node)
        out = self.c.ot_empty(be, shp, dt)
        if self.c.ot_assign_node(out, node) != 0:
            self.c.ot_tensor_free(out)
            return None
        host = np.zeros(tuple(shp.dims[i] for i in range(shp.ndim)), dtype=np.float32)
        self.c.ot_get(out, host.ctypes.data)
        self.c.ot_tensor_free(out)
        return host.astype(np.float64)

    def compare(self, what, got, want, dt):
        check16(self, what, got, want, dt)


def rounded_draw(draw):
    """attn_check's draws rounded to bf16 (exact in f16 too, but for
    values below f16's normal range): the NumPy reference then sees the
    tensors' own values."""
    def d(self, rng):
        return tuple(None if a is None else to_bf16(a) for a in draw(self, rng))
    return d


def structured(path, backends_of):
    """The other checks' cases with f16 and bf16: (passed, failed)."""
    runs = []
    ix = IndexH(path)
    tk = TopkH(path)
    topk_check.bind(tk.lib.c)
    for run, ops in ((ix, ('take', 'index_add', 'where', 'tri', 'cumsum')),
                     (tk, ('topk', 'along'))):
        bes = backends_of(run.lib.c)
        for i in range(3):
            for bname, be in bes:
                for dt in HALF:
                    for name in ops:
                        getattr(run, name)(be, bname, dt)
        runs.append((run, bes))
    pl = PoolH(path)
    pl.rng = np.random.default_rng(36)
    at = AttnH(path)
    at.rng = np.random.default_rng(36)
    attn_check.Case.draw = rounded_draw(attn_check.Case.draw)
    for run, n in ((pl, 8), (at, 6)):
        bes = backends_of(run.lib.c)
        for idx in range(n):
            run.trial(bes, idx)
        runs.append((run, bes))
    cv = ConvH(path)
    rng = np.random.default_rng(36)
    for bname in (b'ref', b'cpu'):
        be = cv.c.ot_backend_new(bname, None)
        for idx in range(6):
            for dt in HALF:
                cv.case(be, bname.decode(), rng, idx, dt)
        cv.c.ot_backend_free(be)
    for run, bes in runs:
        for _, be in bes:
            run.lib.c.ot_backend_free(be)
    runs.append((cv, None))
    return sum(r.passed for r, _ in runs), sum(r.failed for r, _ in runs)


STRUCTURED = {'conv', 'conv_transpose', 'conv_wgrad', 'max_pool', 'max_pool_grad',
              'max_pool_take', 'avg_pool', 'avg_pool_grad', 'take', 'scatter_add', 'select',
              'tril', 'triu', 'cumulative_sum', 'topk', 'take_along', 'scatter_along',
              'attention', 'attention_grad'}


# ---- .npy and .npz files ------------------------------------------------------

def raw16(c, t, n):
    h = np.zeros(n, dtype=np.uint16)
    c.ot_get_raw(t, h.ctypes.data)
    return h


def files(chk, tmp):
    """ot_save/ot_savez of f16 and bf16 read by NumPy (f16 as '<f2', bf16
    as two raw bytes '<V2'), and NumPy's files read by ot_load/ot_loadz,
    bits compared."""
    c, P = chk.c, C.c_void_p
    c.ot_save.argtypes, c.ot_load.argtypes = [C.c_char_p, P], [P, C.c_char_p]
    c.ot_load.restype = P
    c.ot_savez.argtypes = [C.c_char_p, C.c_int, P, P]
    c.ot_loadz.argtypes = [P, C.c_char_p, C.c_int, P, P]
    c.ot_get_raw.argtypes = [P, P]
    c.ot_tensor_dtype.argtypes = [P]
    be = c.ot_backend_new(b'cpu', None)
    x = np.array(SPECIAL[:24], dtype=np.float64).reshape(4, 6)
    pats = {F16: x.astype(np.float16).view(np.uint16),
            BF16: bf16_bits(x).astype(np.uint16)}
    ts = {dt: chk.lib.array(rnd(x, dt), dt) for dt in HALF}
    for dt, fn in ((F16, 'h.npy'), (BF16, 'b.npy')):
        path = os.path.join(tmp, fn)
        view = c.ot_transpose(ts[dt], None)
        chk.ok('ot_save %s view' % NAME[dt], c.ot_save(path.encode(), view) == 0)
        got = np.load(path)
        want = pats[dt].T
        chk.ok('np.load of ot_save %s: dtype %s' % (NAME[dt], got.dtype),
               got.dtype == (np.float16 if dt == F16 else np.dtype('V2')) and
               np.array_equal(got.view(np.uint16), want))
        arr = want.view(np.float16) if dt == F16 else want.copy().view(np.dtype('V2'))
        np.save(path, np.ascontiguousarray(arr))
        t = c.ot_load(be, path.encode())
        chk.ok('ot_load of np.save %s' % NAME[dt], bool(t) and c.ot_tensor_dtype(t) == dt and
               np.array_equal(raw16(c, t, 24), np.ascontiguousarray(want).ravel()))
        c.ot_tensor_free(t)
        c.ot_tensor_free(view)
    path = os.path.join(tmp, 'z.npz')
    names = (C.c_char_p * 2)(b'h', b'b')
    tens = (P * 2)(ts[F16], ts[BF16])
    chk.ok('ot_savez f16, bf16', c.ot_savez(path.encode(), 2, names, tens) == 0)
    z = np.load(path)
    chk.ok('np.load of ot_savez', np.array_equal(z['h'].view(np.uint16), pats[F16]) and
           np.array_equal(z['b'].view(np.uint16), pats[BF16]))
    np.savez(path, b=pats[BF16].view(np.dtype('V2')), h=pats[F16].view(np.float16))
    out = (P * 2)()
    rc = c.ot_loadz(be, path.encode(), 2, names, out)
    chk.ok('ot_loadz of np.savez', rc == 2 and c.ot_tensor_dtype(out[0]) == F16 and
           c.ot_tensor_dtype(out[1]) == BF16 and
           np.array_equal(raw16(c, out[0], 24), pats[F16].ravel()) and
           np.array_equal(raw16(c, out[1], 24), pats[BF16].ravel()))
    for t in list(out) + list(ts.values()):
        if t:
            c.ot_tensor_free(t)
    c.ot_backend_free(be)


# ---- main -------------------------------------------------------------------

def bf16_rounding(chk):
    """to_bf16 against to_bf16_frexp around every kind of boundary."""
    r = np.random.default_rng(5)
    base = (r.integers(0, 1 << 16, 4000).astype(np.uint32) << 16).view(np.float32)
    with np.errstate(invalid='ignore'):
        base = base.astype(np.float64)
    half = np.abs(base) * 2.0 ** -8
    x = np.concatenate([base, base + half, base - half, base + half * (1 + 2.0 ** -30),
                        base + half * (1 - 2.0 ** -30), base * (1 + 2.0 ** -40),
                        r.standard_normal(4000) * 10.0 ** r.integers(-45, 39, 4000),
                        [3.3961e38, 3.3962e38, 2.0 ** -133, 2.0 ** -134, 1.5 * 2.0 ** -133]])
    with np.errstate(all='ignore'):
        x = x[np.isfinite(x)]
    a, b = to_bf16(x), to_bf16_frexp(x)
    same = np.array_equal(a, b) and np.array_equal(np.signbit(a), np.signbit(b))
    chk.ok('bf16 rounding: integer ops equal frexp/rint on %d values' % x.size, same)
    f = np.array([1.0, 65504.0, 65520.0, 70000.0, 2.0 ** -25, 2.0 ** -24 * 1.5])
    chk.ok('f16 rounding: NumPy float64 -> float16', np.array_equal(
        to_f16(f), [1.0, 65504.0, np.inf, np.inf, 0.0, 2.0 ** -23]))


def main():
    import warnings
    warnings.simplefilter("ignore", RuntimeWarning)   # NaN through casts of host copies
    if len(sys.argv) < 2:
        raise SystemExit('usage: half_check.py build/liboptree.so')
    path = sys.argv[1]
    chk = Parts(path)
    c = chk.c
    dn.add_ufunc_ops(chk.lib)
    bf16_rounding(chk)
    with tempfile.TemporaryDirectory() as tmp:
        files(chk, tmp)
    backends = [(b.decode(), c.ot_backend_new(b, None)) for b in (b'ref', b'cpu')]
    part = {dn.OT_KIND_UNARY: chk.unary, dn.OT_KIND_BINARY: chk.binary,
            dn.OT_KIND_REDUCE: chk.reduce, dn.OT_KIND_DOT: chk.dot}
    named = {'clip': chk.clip, 'cross_entropy': chk.cross_entropy, 'cast': chk.cast,
             'onehot': chk.onehot, 'rand': chk.rand, 'concat': chk.concat}
    for name in ('transpose', 'slice', 'reshape', 'keep'):
        named[name] = chk.shape_ops
    for op in dn.sv_ops(chk.lib):
        fn = named.get(op.name) or (chk.reduce if op.kind == dn.OT_KIND_COMPOSITE and
                                    op.name in dn.SV_REF else part.get(op.kind))
        if op.name in STRUCTURED:
            continue
        if fn is None:
            chk.ok(op.name, False, ': no f16/bf16 case for this op of the table (half_check.py)')
            continue
        fn(op, backends)
    for _, be in backends:
        c.ot_backend_free(be)
    missing = STRUCTURED - {op.name for op in dn.sv_ops(chk.lib)}
    for name in sorted(missing):
        chk.ok(name, False, ': STRUCTURED names an op the library does not have')
    p, f = structured(path, lambda cc: [(b.decode(), cc.ot_backend_new(b, None))
                                        for b in (b'ref', b'cpu')])
    passed, failed = chk.passed + p, chk.failed + f
    print('%d passed, %d failed' % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
