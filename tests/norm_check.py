#!/usr/bin/python3
"""norm_check.py - optree's normalisation builders (optree/norm.h) against NumPy.

    /usr/bin/python3 tests/norm_check.py build/liboptree.so [--seed N] [-v]

Run by make test's and make check's numpy phase. Each case builds a tree
with ot_batch_norm_at, ot_layer_norm_at, ot_rms_norm_at or
ot_global_avg_pool_at through
ctypes (option structs passed by value with spec_ NULL: every member as
given), assigns it on the ref backend and on the cpu backend (1 thread, the
default ISA), and compares with the float64 NumPy formulas PyTorch
documents:
  batch norm, training:  mean, var = x.mean(axes), x.var(axes) (biased) over
      every axis but the channel axis; out = (x - mean) / sqrt(var + eps)
      * w + b; running = (1 - m) * running + m * stat, the variance's stat
      unbiased (n / (n - 1)); assigned in one ot_assign_many with the output.
  batch norm, inference: the running values in place of mean and var.
  layer norm: the same over the last `dims` axes, no running values.
  RMS norm: x / sqrt((x * x).mean(last dims axes) + eps) * w, eps given or
      the dtype's machine epsilon (PyTorch's default).
  global average pooling: x.mean(axis=(2, ...), keepdims).
Shapes are random (1-3 spatial dims, sizes 1-5, channel axis 1 or last),
inputs contiguous, transposed or strided views, with and without weight and
bias. Edges: one value per channel in training must fail naming it; a
size-0 batch gives an empty output and leaves the running values alone;
special values (NaN, +-inf, +-0, subnormals) must give NaN and inf where
NumPy does. The training gradients (d/dx, d/dweight, d/dbias) are checked
against PyTorch's closed form of batch norm's backward, and layer norm's
and RMS norm's against theirs (random shapes with size-0 and size-1 dims,
views, dims 1 to ndim). Layer norm of f32 rows of 1e4 + noise must stay
within 1e-2 of the float64 result (the centred variance).

Tolerance: f64 within 1e-10 * max(1, |ref|), f32 within 5e-5 * max(1, |ref|)
(the f32 tree rounds each op; the normalisation scales errors by 1/std);
NaN where NumPy has NaN, infinities exact. The output ends with one line
"N passed, M failed" (exit 1 if M > 0).
"""

import argparse
import ctypes as C
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from diff_numpy import (F32, F64, I32, NP_DT, Lib, TrialError, make_input, mkshape,  # noqa: E402
                        shape_tuple, sv_backend)

P = C.c_void_p


class BnOpts(C.Structure):
    _fields_ = [('spec_', C.c_char_p), ('running_mean', P), ('running_var', P), ('weight', P),
                ('bias', P), ('training', C.c_bool), ('momentum', C.c_double),
                ('eps', C.c_double), ('axis', C.c_int), ('updates', P)]


class LnOpts(C.Structure):
    _fields_ = [('spec_', C.c_char_p), ('dims', C.c_int), ('weight', P), ('bias', P),
                ('eps', C.c_double)]


class RmsOpts(C.Structure):
    _fields_ = [('spec_', C.c_char_p), ('dims', C.c_int), ('weight', P), ('eps', C.c_double)]


class GapOpts(C.Structure):
    _fields_ = [('spec_', C.c_char_p), ('keepdims', C.c_bool)]


TOL = {F32: 5e-5, F64: 1e-10}


def bind(lib):
    c = lib.c
    for name, opts in (('ot_batch_norm_at', BnOpts), ('ot_layer_norm_at', LnOpts),
                       ('ot_rms_norm_at', RmsOpts), ('ot_global_avg_pool_at', GapOpts)):
        fn = getattr(c, name)
        fn.restype = P
        fn.argtypes = [P, opts, C.c_char_p, C.c_int]
    c.ot_assign_many.restype = C.c_int
    c.ot_assign_many.argtypes = [C.c_int, P, P]


class Case:
    """One backend's tensors for a trial; frees them at the end."""

    def __init__(self, lib, be, rng):
        self.lib, self.be, self.rng, self.owned = lib, be, rng, []

    def tensor(self, arr, dt, kind='contig'):
        if arr is None:
            return None
        saved, self.lib.be = self.lib.be, self.be
        try:
            t, _ = make_input(self.lib, self.rng, np.asarray(arr), dt, kind, self.owned)
        finally:
            self.lib.be = saved
        return t

    def assign(self, nodes):
        """Every tree evaluated in one ot_assign_many; their values."""
        c, outs, shapes = self.lib.c, [], []
        for n in nodes:
            shape, dt = shape_tuple(c.ot_node_shape(n)), c.ot_node_dtype(n)
            out = c.ot_empty(self.be, mkshape(shape), dt)
            if not out:
                raise TrialError('ot_empty: %s' % self.lib.errmsg())
            self.owned.append(out)
            outs.append(out)
            shapes.append((shape, dt))
        k = len(nodes)
        rc = c.ot_assign_many(k, C.cast((P * k)(*outs), P), C.cast((P * k)(*nodes), P))
        if rc:
            raise TrialError('assign_many: %s' % self.lib.errmsg())
        vals = []
        for out, (shape, dt) in zip(outs, shapes):
            rc, v = self.lib.get(out, shape, dt)
            vals.append(v)
        return vals

    def free(self):
        for t in reversed(self.owned):
            self.lib.c.ot_tensor_free(t)


def close(got, ref, dt):
    """Indices where got misses the float64 reference."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return ['shape %s, expected %s' % (got.shape, ref.shape)]
    nan = np.isnan(ref)
    inf = np.isinf(ref)
    fin = ~nan & ~inf
    bad = (np.isnan(got) != nan) | (inf & (got != ref))
    with np.errstate(invalid='ignore'):
        bad |= fin & ~(np.abs(got - ref) <= TOL[dt] * np.maximum(1, np.abs(ref)))
    return ['%s: %r, expected %r' % (tuple(int(i) for i in ix), got[ix], ref[ix])
            for ix in zip(*np.nonzero(bad))][:3]


# ---- references (PyTorch's formulas in float64) ------------------------------

def ref_bn_train(x, axis, w, b, rm, rv, mom, eps):
    axes = tuple(d for d in range(x.ndim) if d != axis)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    shape = [1] * x.ndim
    shape[axis] = -1
    out = (x - mean) / np.sqrt(var + eps)
    if w is not None:
        out = out * w.reshape(shape)
    if b is not None:
        out = out + b.reshape(shape)
    n = x.size // x.shape[axis]
    new = None
    if rm is not None and n > 0:
        new = ((1 - mom) * rm + mom * mean.reshape(-1),
               (1 - mom) * rv + mom * var.reshape(-1) * n / (n - 1))
    elif rm is not None:
        new = (rm, rv)
    return out, new


def ref_bn_eval(x, axis, w, b, rm, rv, eps):
    shape = [1] * x.ndim
    shape[axis] = -1
    out = (x - rm.reshape(shape)) / np.sqrt(rv.reshape(shape) + eps)
    if w is not None:
        out = out * w.reshape(shape)
    if b is not None:
        out = out + b.reshape(shape)
    return out


def ref_ln(x, dims, w, b, eps):
    axes = tuple(range(x.ndim - dims, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    out = (x - mean) / np.sqrt(var + eps)
    if w is not None:
        out = out * w
    if b is not None:
        out = out + b
    return out


def ref_rms(x, dims, w, eps):
    axes = tuple(range(x.ndim - dims, x.ndim))
    out = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    return out if w is None else out * w


def ref_trailing_grads(x, dims, w, e, eps, centred):
    """d/dx, d/dw, d/db of sum(layer_norm(x) * e) (centred) or of
    sum(rms_norm(x) * e): xhat = (x - mean) * r or x * r, with r the
    reciprocal standard deviation or root mean square;
    dx = r * (e*w - mean(e*w) - xhat * mean(e*w * xhat)), the mean(e*w)
    term only when centred."""
    axes = tuple(range(x.ndim - dims, x.ndim))
    lead = tuple(range(x.ndim - dims))
    d = x - x.mean(axis=axes, keepdims=True) if centred else x
    r = 1 / np.sqrt((d * d).mean(axis=axes, keepdims=True) + eps)
    xhat, ew = d * r, e * w
    dx = ew - (ew * xhat).mean(axis=axes, keepdims=True) * xhat
    if centred:
        dx = dx - ew.mean(axis=axes, keepdims=True)
    return r * dx, (e * xhat).sum(axis=lead), e.sum(axis=lead)


def ref_bn_grads(x, axis, w, e, eps):
    """PyTorch's batch norm backward in training mode for upstream e."""
    axes = tuple(d for d in range(x.ndim) if d != axis)
    n = x.size // x.shape[axis]
    shape = [1] * x.ndim
    shape[axis] = -1
    mean = x.mean(axis=axes, keepdims=True)
    invstd = 1 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    xhat = (x - mean) * invstd
    se = e.sum(axis=axes, keepdims=True)
    sex = (e * xhat).sum(axis=axes, keepdims=True)
    dx = w.reshape(shape) * invstd / n * (n * e - se - xhat * sex)
    return dx, sex.reshape(-1), se.reshape(-1)


# ---- draws -------------------------------------------------------------------------

def draw_values(rng, shape, dt, special):
    x = rng.uniform(-2, 2, size=shape) * rng.uniform(0.5, 3) + rng.uniform(-2, 2)
    if special and x.size:
        vals = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-310 if dt == F64 else 1e-40]
        flat = x.reshape(-1)
        for _ in range(max(1, x.size // 6)):
            flat[int(rng.integers(x.size))] = vals[int(rng.integers(len(vals)))]
    return x.astype(NP_DT[dt]).astype(np.float64)


def draw_bn_shape(rng):
    spatial = [int(rng.integers(1, 6)) for _ in range(int(rng.integers(0, 3)))]
    shape = [int(rng.integers(1, 5)), int(rng.integers(1, 6))] + spatial
    if int(np.prod(shape)) == shape[1]:     # one value per channel: add a row
        shape[0] = 2
    return shape


def opt(rng, arr):
    return arr if rng.random() < 0.7 else None


# ---- trials ------------------------------------------------------------------------

def trial_bn(lib, case, rng, dt, training, special):
    shape = draw_bn_shape(rng)
    axis = 1 if rng.random() < 0.7 else len(shape) - 1
    ch = shape[axis]
    x = draw_values(rng, shape, dt, special)
    w = opt(rng, draw_values(rng, [ch], dt, False))
    b = opt(rng, draw_values(rng, [ch], dt, False))
    rm = draw_values(rng, [ch], dt, False)
    rv = np.abs(draw_values(rng, [ch], dt, False)) + 0.1
    mom, eps = float(rng.choice([0.0, 0.1, 0.5, 1.0])), float(rng.choice([1e-5, 1e-3, 0.0]))
    if not training and eps == 0.0:
        eps = 1e-5
    kind = ['contig', 'T', 'step'][int(rng.integers(3))]
    tr = case.tensor(rm, dt)
    tv = case.tensor(rv, dt)
    upd = (P * 2)()
    o = BnOpts(None, tr, tv, case.tensor(w, dt), case.tensor(b, dt), training, mom, eps,
               axis if rng.random() < 0.5 else axis - len(shape), C.cast(upd, P))
    node = lib.c.ot_batch_norm_at(lib.c.ot_tensor_node(case.tensor(x, dt, kind)), o, None, 0)
    if not node:
        raise TrialError('build: %s' % lib.errmsg())
    desc = 'x%s %s axis %d mom %g eps %g' % (tuple(shape), kind, axis, mom, eps)
    if not training:
        got = case.assign([node])
        return desc, close(got[0], ref_bn_eval(x, axis, w, b, rm, rv, eps), dt)
    got = case.assign([node, upd[0], upd[1]])
    out, new = ref_bn_train(x, axis, w, b, rm, rv, mom, eps)
    return desc, close(got[0], out, dt) + close(got[1], new[0], dt) + close(got[2], new[1], dt)


def trial_ln(lib, case, rng, dt, special):
    shape, dims = draw_trailing(rng)
    x = draw_values(rng, shape, dt, special)
    w = opt(rng, draw_values(rng, shape[len(shape) - dims:], dt, False))
    b = opt(rng, draw_values(rng, shape[len(shape) - dims:], dt, False))
    kind = ['contig', 'T', 'step'][int(rng.integers(3))]
    eps = float(rng.choice([1e-5, 1e-3, 0.0]))
    o = LnOpts(None, dims, case.tensor(w, dt), case.tensor(b, dt), eps)
    node = lib.c.ot_layer_norm_at(lib.c.ot_tensor_node(case.tensor(x, dt, kind)), o, None, 0)
    if not node:
        raise TrialError('build: %s' % lib.errmsg())
    got = case.assign([node])
    return ('x%s %s dims %d eps %g' % (tuple(shape), kind, dims, eps),
            close(got[0], ref_ln(x, dims, w, b, eps), dt))


def draw_trailing(rng):
    """A shape of 1-4 dims, sizes 1-4 (sometimes one 0), and dims."""
    shape = [int(rng.integers(1, 5)) for _ in range(int(rng.integers(1, 5)))]
    if rng.random() < 0.15:
        shape[int(rng.integers(len(shape)))] = 0
    return shape, int(rng.integers(1, len(shape) + 1))


def trial_rms(lib, case, rng, dt, special):
    shape, dims = draw_trailing(rng)
    x = draw_values(rng, shape, dt, special)
    w = opt(rng, draw_values(rng, shape[len(shape) - dims:], dt, False))
    kind = ['contig', 'T', 'step'][int(rng.integers(3))]
    eps = [1e-6, 1e-3, 0.0, None][int(rng.integers(4))]
    # eps not written takes PyTorch's default, the dtype's machine epsilon
    spec = None if eps is not None else b'dims, weight'
    o = RmsOpts(spec, dims, case.tensor(w, dt), eps or 0.0)
    node = lib.c.ot_rms_norm_at(lib.c.ot_tensor_node(case.tensor(x, dt, kind)), o, None, 0)
    if not node:
        raise TrialError('build: %s' % lib.errmsg())
    got = case.assign([node])
    want = ref_rms(x, dims, w, np.finfo(NP_DT[dt]).eps if eps is None else eps)
    return 'x%s %s dims %d eps %s' % (tuple(shape), kind, dims, eps), close(got[0], want, dt)


def trial_trailing_grad(lib, case, rng, dt, centred):
    """d/dx, d/dw (and d/db) of sum(norm(x) * e), layer or RMS norm."""
    shape, dims = draw_trailing(rng)
    ws = shape[len(shape) - dims:]
    x, e = draw_values(rng, shape, dt, False), draw_values(rng, shape, dt, False)
    w, b = draw_values(rng, ws, dt, False), draw_values(rng, ws, dt, False)
    kind = ['contig', 'T', 'step'][int(rng.integers(3))]
    tx, tw, tb = case.tensor(x, dt, kind), case.tensor(w, dt), case.tensor(b, dt)
    c = lib.c
    if centred:
        node = c.ot_layer_norm_at(c.ot_tensor_node(tx), LnOpts(None, dims, tw, tb, 1e-5), None, 0)
    else:
        node = c.ot_rms_norm_at(c.ot_tensor_node(tx), RmsOpts(None, dims, tw, 1e-5), None, 0)
    ad = c.ot_autodiff_new(node, c.ot_tensor_node(case.tensor(e, dt))) if node else None
    if not ad:
        raise TrialError('autodiff: %s' % lib.errmsg())
    wrt = (tx, tw, tb) if centred else (tx, tw)
    try:
        grads = case.assign([c.ot_autodiff_grad(ad, t) for t in wrt])
    finally:
        c.ot_autodiff_free(ad)
    want = ref_trailing_grads(x, dims, w, e, 1e-5, centred)
    return ('x%s %s dims %d' % (tuple(shape), kind, dims),
            sum((close(g, r, dt) for g, r in zip(grads, want)), []))


def trial_large_mean(lib, case, rng, dt):
    """Rows of 1e4 + noise of std ~0.3 in f32: the centred variance keeps
    the output within the rounding of x - mean (f32's spacing at 1e4 is
    ~1e-3, about 3e-3 of the std); a one-pass E[x^2] - E[x]^2 in f32 loses
    the variance altogether (1e8 * 2^-24 ~ 6 > 0.09)."""
    shape = (int(rng.integers(2, 6)), int(rng.choice([7, 100, 1000])))
    x = (1e4 + rng.uniform(-0.5, 0.5, size=shape)).astype(NP_DT[dt]).astype(np.float64)
    o = LnOpts(None, 1, None, None, 1e-5)
    node = lib.c.ot_layer_norm_at(lib.c.ot_tensor_node(case.tensor(x, dt)), o, None, 0)
    if not node:
        raise TrialError('build: %s' % lib.errmsg())
    got = np.asarray(case.assign([node])[0], dtype=np.float64)
    err = np.abs(got - ref_ln(x, 1, None, None, 1e-5)).max()
    limit = 1e-2 if dt == F32 else 1e-10
    return 'x%s' % (shape,), [] if err <= limit else ['max error %g > %g' % (err, limit)]


def trial_gap(lib, case, rng, dt, special):
    shape = [int(rng.integers(0 if rng.random() < 0.1 else 1, 4))
             for _ in range(int(rng.integers(3, 6)))]
    keep = bool(rng.random() < 0.5)
    x = draw_values(rng, shape, F64 if dt == I32 else dt, special and dt != I32)
    if dt == I32:
        x = np.round(x * 1000)
    kind = ['contig', 'T', 'step'][int(rng.integers(3))]
    node = lib.c.ot_global_avg_pool_at(lib.c.ot_tensor_node(case.tensor(x, dt, kind)),
                                       GapOpts(None, keep), None, 0)
    if not node:
        raise TrialError('build: %s' % lib.errmsg())
    got = case.assign([node])
    ref = x.mean(axis=tuple(range(2, x.ndim)), keepdims=keep)
    return ('x%s %s keepdims %d' % (tuple(shape), kind, keep),
            close(got[0], ref, F64 if dt == I32 else dt))


def trial_grad(lib, case, rng, dt):
    """d/dx, d/dw, d/db of sum(batch_norm(x) * e) in training mode."""
    shape = draw_bn_shape(rng)
    axis = 1 if rng.random() < 0.7 else len(shape) - 1
    ch = shape[axis]
    x = draw_values(rng, shape, dt, False)
    w, b = draw_values(rng, [ch], dt, False), draw_values(rng, [ch], dt, False)
    e = draw_values(rng, shape, dt, False)
    tx, tw, tb = case.tensor(x, dt), case.tensor(w, dt), case.tensor(b, dt)
    o = BnOpts(None, None, None, tw, tb, True, 0.1, 1e-5, axis, None)
    c = lib.c
    node = c.ot_batch_norm_at(c.ot_tensor_node(tx), o, None, 0)
    ad = c.ot_autodiff_new(node, c.ot_tensor_node(case.tensor(e, dt))) if node else None
    if not ad:
        raise TrialError('autodiff: %s' % lib.errmsg())
    try:
        grads = case.assign([c.ot_autodiff_grad(ad, t) for t in (tx, tw, tb)])
    finally:
        c.ot_autodiff_free(ad)
    want = ref_bn_grads(x, axis, w, e, 1e-5)
    return ('x%s axis %d' % (tuple(shape), axis),
            sum((close(g, r, dt) for g, r in zip(grads, want)), []))


def edge_one_value(lib, case, dt):
    """Training with one value per channel: an error naming the rule."""
    x = case.tensor(np.ones((1, 3, 1)), dt)
    node = lib.c.ot_batch_norm_at(lib.c.ot_tensor_node(x),
                                  BnOpts(None, None, None, None, None, True, 0.1, 1e-5, 1, None),
                                  None, 0)
    msg = lib.errmsg()
    lib.c.ot_clear_error()
    if node or 'more than 1 value per channel' not in msg:
        return '(1,3,1)', ['built: %s; message %r' % (bool(node), msg)]
    return '(1,3,1)', []


def edge_empty(lib, case, dt):
    """A size-0 batch: an empty output, the running values kept."""
    rm, rv = np.array([1.0, -2.0, 3.0]), np.array([0.5, 1.5, 2.5])
    upd = (P * 2)()
    o = BnOpts(None, case.tensor(rm, dt), case.tensor(rv, dt), None, None, True, 0.1, 1e-5, 1,
               C.cast(upd, P))
    node = lib.c.ot_batch_norm_at(lib.c.ot_tensor_node(case.tensor(np.zeros((0, 3, 2)), dt)), o,
                                  None, 0)
    if not node:
        raise TrialError('build: %s' % lib.errmsg())
    got = case.assign([node, upd[0], upd[1]])
    return '(0,3,2)', close(got[0], np.zeros((0, 3, 2)), dt) + close(got[1], rm, dt) + \
        close(got[2], rv, dt)


def cases():
    """(name, trials, fn(lib, case, rng, dt), dtypes)."""
    out = []
    for special in (False, True):
        sfx = ' special' if special else ''
        out.append(('batch_norm train' + sfx, 6,
                    lambda lib, c, r, dt, s=special: trial_bn(lib, c, r, dt, True, s), (F32, F64)))
        out.append(('batch_norm eval' + sfx, 4,
                    lambda lib, c, r, dt, s=special: trial_bn(lib, c, r, dt, False, s), (F32, F64)))
        out.append(('layer_norm' + sfx, 4,
                    lambda lib, c, r, dt, s=special: trial_ln(lib, c, r, dt, s), (F32, F64)))
        out.append(('rms_norm' + sfx, 4,
                    lambda lib, c, r, dt, s=special: trial_rms(lib, c, r, dt, s), (F32, F64)))
        out.append(('global_avg_pool' + sfx, 4,
                    lambda lib, c, r, dt, s=special: trial_gap(lib, c, r, dt, s), (F32, F64, I32)))
    out.append(('batch_norm grad', 3, lambda lib, c, r, dt: trial_grad(lib, c, r, dt), (F64,)))
    out.append(('layer_norm grad', 3,
                lambda lib, c, r, dt: trial_trailing_grad(lib, c, r, dt, True), (F64,)))
    out.append(('rms_norm grad', 3,
                lambda lib, c, r, dt: trial_trailing_grad(lib, c, r, dt, False), (F64,)))
    out.append(('layer_norm large mean', 2, trial_large_mean, (F32, F64)))
    out.append(('batch_norm one value', 1, lambda lib, c, r, dt: edge_one_value(lib, c, dt),
                (F32, F64)))
    out.append(('batch_norm empty', 1, lambda lib, c, r, dt: edge_empty(lib, c, dt), (F32, F64)))
    return out


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument('lib')
    ap.add_argument('--seed', type=int, default=34)
    ap.add_argument('-v', action='store_true')
    a = ap.parse_args(argv)
    # NaN and inf inputs and empty means are meant: NumPy's warnings say nothing
    np.seterr(all='ignore')
    warnings.simplefilter('ignore', RuntimeWarning)
    lib = Lib(a.lib)
    bind(lib)
    backends = [('ref', lib.be), ('cpu', sv_backend(lib, b'cpu', {}))]
    passed = failed = 0
    for name, trials, fn, dtypes in cases():
        for dt in dtypes:
            for bname, be in backends:
                rng = np.random.default_rng([a.seed, len(name), dt])
                pool = lib.c.ot_pool_push()
                problems = []
                for _ in range(trials):
                    case = Case(lib, be, rng)
                    try:
                        desc, bad = fn(lib, case, rng, dt)
                    except TrialError as e:
                        desc, bad = 'trial', [str(e)]
                    finally:
                        case.free()
                    if bad:
                        problems.append('%s: %s' % (desc, '; '.join(bad)))
                lib.c.ot_pool_pop(pool)
                label = '%s %s@%s' % (name, {F32: 'f32', F64: 'f64', I32: 'i32'}[dt], bname)
                if problems:
                    failed += 1
                    print('FAIL %s: %s' % (label, problems[0]))
                else:
                    passed += 1
                    if a.v:
                        print('ok   %s' % label)
    print('%d passed, %d failed' % (passed, failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
