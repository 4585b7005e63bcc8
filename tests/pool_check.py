"""pool_check.py - max_pool and avg_pool (optree/pool.h) and their gradient
nodes against a float64 NumPy reference that walks every window, on the ref
and cpu backends in f64 and f32: random 1-D to 3-D geometries with every
option (kernel, stride or its default, padding symmetric or per side,
dilation, ceil_mode, exclude_pad), size-1 and size-0 dims, transposed and
stepped views, ties (the first maximum in the window's row-major order
takes the gradient) and special values (NaN, +-inf, -0.0). Per case: the
value, d sum(y * r)/dx (max_pool_grad, avg_pool_grad) and its gradient in
r (max_pool_take, avg_pool). Run by make check's numpy phase
(tools/test.sh):  python3 tests/pool_check.py build/liboptree.so
Prints "N passed, N failed"; exits 1 on a failure.
"""
import ctypes as C
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from diff_numpy import (F32, F64, Lib, TrialError, input_on, mkargs,  # noqa: E402
                        node_value)

P = C.c_void_p


class PoolOpts(C.Structure):
    _fields_ = [('spec_', C.c_char_p), ('kernel', C.c_int * 3), ('stride', C.c_int * 3),
                ('pad', C.c_int), ('pad_lo', C.c_int * 3), ('pad_hi', C.c_int * 3),
                ('dilation', C.c_int * 3), ('ceil_mode', C.c_bool), ('exclude_pad', C.c_bool)]


def bind(c):
    for name in ('ot_max_pool_at', 'ot_avg_pool_at'):
        fn = getattr(c, name)
        fn.restype, fn.argtypes = P, [P, C.POINTER(PoolOpts), C.c_char_p, C.c_int]


# ---- the reference --------------------------------------------------------------

def out_size(i, k, s, d, lo, hi, ceil):
    room = i + lo + hi - d * (k - 1) - 1
    o = (-(-room // s) if ceil else room // s) + 1
    if ceil and (o - 1) * s >= i + lo:
        o -= 1
    return o


class Geo:
    """One geometry, per spatial dim: kernel, stride, dilation, padding."""

    def __init__(self, rng, avg):
        self.nsp = nsp = int(rng.integers(1, 4))
        self.avg = avg
        self.k = [int(rng.integers(1, 4 if nsp < 3 else 3)) for _ in range(nsp)]
        self.s = [int(rng.integers(1, 4)) for _ in range(nsp)]
        self.default_stride = rng.random() < 0.3
        if self.default_stride:
            self.s = list(self.k)
        self.d = [1 if avg else int(rng.integers(1, 3)) for _ in range(nsp)]
        self.sym = rng.random() < 0.5
        self.lo = [int(rng.integers(0, k // 2 + 1)) for k in self.k]
        self.hi = [int(rng.integers(0, k // 2 + 1)) for k in self.k]
        if self.sym:
            p = min(k // 2 for k in self.k)
            self.lo = self.hi = [p] * nsp
        self.ceil = bool(rng.random() < 0.4)
        self.excl = bool(avg and rng.random() < 0.5)
        span = [self.d[i] * (self.k[i] - 1) + 1 for i in range(nsp)]
        ins = [max(int(rng.integers(1, 7)), span[i] - self.lo[i] - self.hi[i]) for i in range(nsp)]
        n = int(rng.choice([0, 1, 2])) if rng.random() < 0.2 else int(rng.integers(1, 3))
        c = 0 if rng.random() < 0.05 else int(rng.integers(1, 4))
        self.xshape = (n, c) + tuple(ins)
        self.out = [out_size(ins[i], self.k[i], self.s[i], self.d[i], self.lo[i], self.hi[i],
                             self.ceil) for i in range(nsp)]

    def opts(self):
        o = PoolOpts()
        o.spec_ = None
        for i in range(self.nsp):
            o.kernel[i], o.dilation[i] = self.k[i], self.d[i]
            o.stride[i] = 0 if self.default_stride else self.s[i]
            if not self.sym:
                o.pad_lo[i], o.pad_hi[i] = self.lo[i], self.hi[i]
        o.pad = self.lo[0] if self.sym else 0
        o.ceil_mode, o.exclude_pad = self.ceil, self.excl
        return o

    def __str__(self):
        return 'x %s k %s s %s%s d %s pad %s/%s%s%s' % (
            self.xshape, self.k, self.s, ' (default)' if self.default_stride else '', self.d,
            self.lo, self.hi, ' ceil' if self.ceil else '', ' exclude_pad' if self.excl else '')

    def windows(self):
        """Per output position: the flat input offsets of its taps inside
        the input (row-major window order) and avg_pool's divisor."""
        ins = self.xshape[2:]
        for p in np.ndindex(*self.out):
            taps, starts = [], [p[i] * self.s[i] - self.lo[i] for i in range(self.nsp)]
            for q in np.ndindex(*self.k):
                pos = [starts[i] + q[i] * self.d[i] for i in range(self.nsp)]
                if all(0 <= pos[i] < ins[i] for i in range(self.nsp)):
                    taps.append(int(np.ravel_multi_index(pos, ins)))
            div = 1
            for i in range(self.nsp):
                a, e = starts[i], min(starts[i] + self.k[i], ins[i] + self.hi[i])
                if self.excl:
                    a, e = max(a, 0), min(e, ins[i])
                div *= max(e - a, 0)
            yield p, np.array(taps, dtype=np.int64), div


def reference(geo, x, r, r2):
    """y, d sum(y r)/dx and d sum(dx r2)/dr, float64, walking every window."""
    n, c = geo.xshape[:2]
    plane = int(np.prod(geo.xshape[2:]))
    xf = x.reshape(n, c, plane)
    r2f = r2.reshape(n, c, plane)
    y = np.zeros((n, c) + tuple(geo.out))
    dx = np.zeros_like(xf)
    dr = np.zeros_like(y)
    for p, taps, div in geo.windows():
        sl = (slice(None), slice(None)) + p
        if geo.avg:
            with np.errstate(invalid='ignore', divide='ignore'):
                y[sl] = xf[:, :, taps].sum(axis=2) / div
                dr[sl] = r2f[:, :, taps].sum(axis=2) / div
                if taps.size:
                    np.add.at(dx, (slice(None), slice(None), taps),
                              (r[sl] / div)[:, :, None] * np.ones(taps.size))
            continue
        if taps.size == 0:
            y[sl] = -np.inf
            continue
        v = xf[:, :, taps]
        nan = np.isnan(v)
        first = np.where(nan.any(axis=2), np.argmax(nan, axis=2), np.argmax(
            np.where(nan, -np.inf, v), axis=2))
        # np.argmax on -inf-only rows gives 0, the first tap: the rule too
        at = taps[first]
        y[sl] = np.take_along_axis(xf, at[:, :, None], axis=2)[:, :, 0]
        dr[sl] = np.take_along_axis(r2f, at[:, :, None], axis=2)[:, :, 0]
        for i in range(n):
            for j in range(c):
                dx[i, j, at[i, j]] += r[sl][i, j]
    return y, dx.reshape(x.shape), dr


# ---- the runner -----------------------------------------------------------------

def draw_values(rng, shape, special):
    """Small multiples of 1/4 (ties on purpose, exact in f32), with NaN,
    +-inf and -0.0 mixed in when special."""
    v = rng.integers(-6, 7, size=shape).astype(np.float64) / 4
    if special and v.size:
        pick = rng.random(shape)
        v[pick < 0.08] = np.nan
        v[(pick >= 0.08) & (pick < 0.16)] = np.inf
        v[(pick >= 0.16) & (pick < 0.24)] = -np.inf
        v[(pick >= 0.24) & (pick < 0.32)] = -0.0
    return v


class Runner:
    def __init__(self, path):
        self.lib = Lib(path)
        bind(self.lib.c)
        self.passed = self.failed = 0

    def check(self, what, got, want, dt):
        if want is None:   # a gradient at non-finite values: not compared
            return
        tol = 3e-6 if dt == F32 else 1e-12
        same = got.shape == want.shape and np.array_equal(np.isnan(got), np.isnan(want))
        fin = np.isfinite(want)
        same = same and np.array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
        if same and fin.any():
            same = np.abs(got[fin] - want[fin]).max() <= tol * (1 + np.abs(want[fin]).max())
        if same and ' max ' in what and 'd/d' not in what:   # exact, signed zeros too
            same = np.array_equal(np.signbit(got[fin]), np.signbit(want[fin]))
        if same:
            self.passed += 1
        else:
            self.failed += 1
            print('FAIL %s\n  got  %s\n  want %s' % (what, got.ravel()[:12], want.ravel()[:12]))

    def value(self, be, node, owned):
        return node_value(self.lib, be, node, owned)

    def tensor(self, be, arr, dt, kind, owned):
        return input_on(self.lib, self.rng, be, arr, dt, kind, owned)

    def run(self, be, bname, geo, arrs, want, dt, idx):
        """The case on one backend and dtype: value, gradient, second order."""
        c, owned = self.lib.c, []
        x, r, r2 = arrs
        kind = ['contig', 'T', 'step'][int(self.rng.integers(0, 3))]
        pool = c.ot_pool_push()
        what = '%s %s %s %d: %s (%s)' % (bname, 'f32' if dt == F32 else 'f64',
                                         'avg' if geo.avg else 'max', idx, geo, kind)
        try:
            xt = self.tensor(be, x, dt, kind, owned)
            fn = c.ot_avg_pool_at if geo.avg else c.ot_max_pool_at
            y = fn(c.ot_tensor_node(xt), C.byref(geo.opts()), b'pool_check', idx)
            if not y:
                raise TrialError('build: %s' % self.lib.errmsg())
            rt = self.tensor(be, r, dt, 'contig', owned)
            r2t = self.tensor(be, r2, dt, 'contig', owned)
            mul, total = self.lib.op('mul'), self.lib.op('sum')
            loss = c.ot_build_at(total, c.ot_build_at(mul, y, c.ot_tensor_node(rt), None, None, 0),
                                 None, C.byref(mkargs()), None, 0)
            ad = c.ot_autodiff_new(loss, None)
            gx = c.ot_autodiff_grad(ad, xt)
            loss2 = c.ot_build_at(total, c.ot_build_at(mul, gx, c.ot_tensor_node(r2t), None,
                                                       None, 0), None, C.byref(mkargs()), None, 0)
            ad2 = c.ot_autodiff_new(loss2, None)
            got = [self.value(be, y, owned), self.value(be, gx, owned),
                   self.value(be, c.ot_autodiff_grad(ad2, rt), owned)]
            c.ot_autodiff_free(ad2)
            c.ot_autodiff_free(ad)
            for name, g, w in zip(('', ' d/dx', ' d/dr'), got, want):
                self.check(what + name, g, w, dt)
        except TrialError as e:
            self.failed += 1
            print('FAIL %s: %s' % (what, e))
            c.ot_clear_error()
        c.ot_pool_pop(pool)
        for t in reversed(owned):
            c.ot_tensor_free(t)

    def trial(self, backends, idx):
        rng = self.rng
        geo = Geo(rng, avg=bool(idx % 2))
        special = rng.random() < 0.25
        x = draw_values(rng, geo.xshape, special)
        yshape = geo.xshape[:2] + tuple(geo.out)
        r, r2 = draw_values(rng, yshape, False), draw_values(rng, geo.xshape, False)
        want = list(reference(geo, x, r, r2))
        if special:   # gradients at non-finite values are not compared
            want[1] = want[2] = None
        for bname, be in backends:
            for dt in (F64, F32):
                self.run(be, bname, geo, (x, r, r2), want, dt, idx)


def main():
    if len(sys.argv) < 2:
        raise SystemExit('usage: pool_check.py build/liboptree.so')
    run = Runner(sys.argv[1])
    run.rng = np.random.default_rng(34)
    c = run.lib.c
    backends = [(b.decode(), c.ot_backend_new(b, None)) for b in (b'ref', b'cpu')]
    for idx in range(40):
        run.trial(backends, idx)
    for _, be in backends:
        c.ot_backend_free(be)
    print('%d passed, %d failed' % (run.passed, run.failed))
    sys.exit(1 if run.failed else 0)


if __name__ == '__main__':
    main()
