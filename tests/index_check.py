"""index_check.py - take, scatter_add/index_add, where, tril, triu and
cumsum (optree/index.h) against NumPy in float64 (np.take, np.add.at,
np.where, np.tril, np.triu, np.cumsum) on the ref and cpu backends in f64 and f32: random shapes
with size-0 and size-1 dims, negative and repeated indices, broadcasts,
transposed and stepped views, inf, NaN and -0.0 in the branch where does
not take; per case the value and d sum(y * r)/d(each operand); an index out
of range is an error of the assignment on both backends, the output left
as it was. Run by make check's numpy phase (tools/test.sh):
  python3 tests/index_check.py build/liboptree.so
Prints "N passed, N failed"; exits 1 on a failure.
"""
import ctypes as C
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from diff_numpy import (F32, F64, I32, Lib, TrialError, input_on, mkargs,  # noqa: E402
                        node_value)

P = C.c_void_p
KINDS = ('contig', 'T', 'step')


def bind(c):
    c.ot_where_at.restype = P
    c.ot_where_at.argtypes = [P, P, P, C.c_char_p, C.c_int]
    c.ot_index_add_at.restype = P
    c.ot_index_add_at.argtypes = [P, P, P, C.c_int, C.c_char_p, C.c_int]
    c.ot_cumsum_at.restype = P
    c.ot_cumsum_at.argtypes = [P, C.c_int, C.c_char_p, C.c_int]


def rshape(rng, lo, hi, zero=0.1):
    nd = int(rng.integers(lo, hi + 1))
    return tuple(0 if rng.random() < zero else int(rng.integers(1, 5)) for _ in range(nd))


def values(rng, shape, special=False):
    v = np.asarray(rng.integers(-8, 9, size=shape) / 4, dtype=np.float64)
    if special and v.size:
        pick = rng.random(shape)
        v[pick < 0.1] = np.nan
        v[(pick >= 0.1) & (pick < 0.2)] = np.inf
        v[(pick >= 0.2) & (pick < 0.3)] = -np.inf
        v[(pick >= 0.3) & (pick < 0.4)] = -0.0
    return v


def sum_to(g, shape):
    """g summed over the dims broadcasting added to shape."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for d, n in enumerate(shape):
        if n == 1 and g.shape[d] != 1:
            g = g.sum(axis=d, keepdims=True)
    return g


class Runner:
    def __init__(self, path):
        self.lib = Lib(path)
        bind(self.lib.c)
        self.passed = self.failed = 0
        self.rng = np.random.default_rng(35)

    def ok(self, what, good):
        if good:
            self.passed += 1
        else:
            self.failed += 1
            print('FAIL %s' % what)

    def check(self, what, got, want, dt):
        tol = 3e-6 if dt == F32 else 1e-12
        same = got.shape == want.shape and np.array_equal(np.isnan(got), np.isnan(want))
        inf = np.isinf(want)
        same = same and np.array_equal(got[inf], want[inf])
        fin = np.isfinite(want)
        if same and fin.any():
            same = np.abs(got[fin] - want[fin]).max() <= tol * (1 + np.abs(want[fin]).max())
        self.ok('%s\n  got  %s\n  want %s' % (what, got.ravel()[:10], want.ravel()[:10]), same)

    def tensor(self, be, arr, dt, owned, kind=None):
        kind = kind or KINDS[int(self.rng.integers(0, 3))]
        return input_on(self.lib, self.rng, be, arr, dt, kind, owned)

    def value(self, be, node, owned):
        return node_value(self.lib, be, node, owned)

    def grads(self, be, y, r, wrt, dt, owned):
        """d sum(y * r) / d each of wrt (tensors), as arrays."""
        c, lib = self.lib.c, self.lib
        rt = self.tensor(be, r, dt, owned, 'contig')
        loss = lib.build('sum', lib.build('mul', y, c.ot_tensor_node(rt)))
        ad = c.ot_autodiff_new(loss, None)
        try:
            return [self.value(be, c.ot_autodiff_grad(ad, t), owned) for t in wrt]
        finally:
            c.ot_autodiff_free(ad)

    def case(self, be, bname, dt, what, build, arrays, want, wants, wrt=None):
        """build(tensors) -> node on backend be; compares its value with want
        and the gradients in the float operands (or those wrt lists) with
        wants."""
        c, owned = self.lib.c, []
        pool = c.ot_pool_push()
        what = '%s %s %s' % (bname, 'f32' if dt == F32 else 'f64', what)
        try:
            ts = [self.tensor(be, a, I32 if a.dtype == np.int32 else dt, owned) for a in arrays]
            y = build(ts)
            self.check(what, self.value(be, y, owned), want, dt)
            if wants is not None:
                r = values(self.rng, want.shape)
                fl = [t for i, (t, a) in enumerate(zip(ts, arrays))
                      if (i in wrt if wrt else a.dtype != np.int32)]
                for i, g in enumerate(self.grads(be, y, r, fl, dt, owned)):
                    self.check(what + ' d/d%d' % i, g, wants(r)[i], dt)
        except TrialError as e:
            self.ok('%s: %s' % (what, e), False)
            c.ot_clear_error()
        c.ot_pool_pop(pool)
        for t in reversed(owned):
            c.ot_tensor_free(t)

    # ---- the ops --------------------------------------------------------------

    def indices(self, shape, n):
        return self.rng.integers(-n, n, size=shape).astype(np.int32) if n else \
            np.zeros(shape, dtype=np.int32)

    def take(self, be, bname, dt):
        rng, lib = self.rng, self.lib
        xs = rshape(rng, 1, 3)
        axis = int(rng.integers(0, len(xs)))
        n = xs[axis]
        ishape = rshape(rng, 0, 2) if n else (0,)
        x, idx = values(rng, xs), self.indices(ishape, n)
        sl = (slice(None),) * axis
        want = np.take(x, idx, axis=axis) if idx.size else \
            np.zeros(xs[:axis] + idx.shape + xs[axis + 1:])

        def wants(r):
            dx = np.zeros(xs)
            np.add.at(dx, sl + (idx,), r)
            return [dx]
        ax = axis - len(xs) if rng.random() < 0.3 else axis
        self.case(be, bname, dt, 'take x %s idx %s axis %d' % (xs, idx.tolist(), ax),
                  lambda t: lib.build('take', self.lib.c.ot_tensor_node(t[0]),
                                      self.lib.c.ot_tensor_node(t[1]), mkargs(axis=ax)),
                  [x, idx], want, wants)

    def index_add(self, be, bname, dt):
        rng, c = self.rng, self.lib.c
        xs = rshape(rng, 1, 3)
        axis = int(rng.integers(0, len(xs)))
        n = xs[axis]
        ishape = (int(rng.integers(0, 6)),) if n else (0,)
        idx = self.indices(ishape, n)   # repeats likely: up to 5 indices into n <= 4
        ss = xs[:axis] + ishape + xs[axis + 1:]
        x, src = values(rng, xs), values(rng, ss)
        sl = (slice(None),) * axis
        want = x.copy()
        np.add.at(want, sl + (idx,), src)
        self.case(be, bname, dt, 'index_add x %s idx %s axis %d' % (xs, idx.tolist(), axis),
                  lambda t: c.ot_index_add_at(c.ot_tensor_node(t[0]), c.ot_tensor_node(t[1]),
                                              c.ot_tensor_node(t[2]), axis, b'index_check', 0),
                  [x, idx, src], want,
                  lambda r: [r, r[sl + (idx,)] if idx.size else np.zeros(ss)])

    def where(self, be, bname, dt):
        rng, c = self.rng, self.lib.c
        s = rshape(rng, 0, 3, 0.05)
        shapes = [tuple(d if rng.random() < 0.7 else 1 for d in s)[int(rng.integers(0, 2)):]
                  for _ in range(3)]
        cond = np.asarray(rng.choice([0.0, 1.0, -2.0, np.nan], size=shapes[0]), dtype=np.float64)
        special = rng.random() < 0.3
        a, b = values(rng, shapes[1], special), values(rng, shapes[2], special)
        want = np.where(cond != 0, a, b)
        m = np.broadcast_to(cond != 0, want.shape)
        wants = None if special else (lambda r: [sum_to(np.where(m, r, 0.0), shapes[1]),
                                                 sum_to(np.where(m, 0.0, r), shapes[2])])
        self.case(be, bname, dt, 'where %s %s %s' % tuple(shapes),
                  lambda t: c.ot_where_at(c.ot_tensor_node(t[0]), c.ot_tensor_node(t[1]),
                                          c.ot_tensor_node(t[2]), b'index_check', 0),
                  [cond, a, b], want, wants, wrt=(1, 2))

    def tri(self, be, bname, dt):
        rng, lib = self.rng, self.lib
        xs, k = rshape(rng, 2, 4), int(rng.integers(-3, 4))
        upper = rng.random() < 0.5
        fn = np.triu if upper else np.tril
        x = values(rng, xs)
        self.case(be, bname, dt, '%s x %s k %d' % ('triu' if upper else 'tril', xs, k),
                  lambda t: lib.build('triu' if upper else 'tril',
                                      lib.c.ot_tensor_node(t[0]), None, mkargs(ddof=k)),
                  [x], fn(x, k), lambda r: [fn(r, k)])

    def cumsum(self, be, bname, dt):
        rng, c = self.rng, self.lib.c
        xs = rshape(rng, 1, 3)
        axis = int(rng.integers(0, len(xs)))
        x = values(rng, xs)
        ax = axis - len(xs) if rng.random() < 0.3 else axis
        rev = (slice(None),) * axis + (slice(None, None, -1),)
        self.case(be, bname, dt, 'cumsum x %s axis %d' % (xs, ax),
                  lambda t: c.ot_cumsum_at(c.ot_tensor_node(t[0]), ax, b'index_check', 0),
                  [x], np.cumsum(x, axis=axis),
                  lambda r: [np.cumsum(r[rev], axis=axis)[rev]])

    def out_of_range(self, be, bname):
        """take and index_add at a bad index: OT_EINVAL, the output as it was."""
        c, lib, owned = self.lib.c, self.lib, []
        pool = c.ot_pool_push()
        x = self.tensor(be, values(self.rng, (3, 2)), F64, owned)
        bad = self.tensor(be, np.array([0, 3], dtype=np.int32), I32, owned)
        out = self.tensor(be, np.full((2, 2), 5.0), F64, owned, 'contig')
        y = lib.build('take', c.ot_tensor_node(x), c.ot_tensor_node(bad), mkargs(axis=0))
        rc = c.ot_assign_node(out, y)
        msg = lib.errmsg()
        kept = lib.get(out, (2, 2), F64)[1]
        self.ok('%s out of range: rc %d, %s, %s' % (bname, rc, msg, kept),
                rc == -1 and 'index 3 at position (1,)' in msg and (kept == 5.0).all())
        c.ot_clear_error()
        c.ot_pool_pop(pool)
        for t in reversed(owned):
            c.ot_tensor_free(t)


def main():
    if len(sys.argv) < 2:
        raise SystemExit('usage: index_check.py build/liboptree.so')
    run = Runner(sys.argv[1])
    c = run.lib.c
    backends = [(b.decode(), c.ot_backend_new(b, None)) for b in (b'ref', b'cpu')]
    for i in range(16):
        for bname, be in backends:
            for dt in (F64, F32):
                for op in (run.take, run.index_add, run.where, run.tri, run.cumsum):
                    op(be, bname, dt)
    for bname, be in backends:
        run.out_of_range(be, bname)
        c.ot_backend_free(be)
    print('%d passed, %d failed' % (run.passed, run.failed))
    sys.exit(1 if run.failed else 0)


if __name__ == '__main__':
    main()
