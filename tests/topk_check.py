"""topk_check.py - topk, take_along and scatter_add_along (optree/topk.h)
against NumPy in float64 on the ref and cpu backends in f64 and f32:
random shapes with size-0 and size-1 dims, transposed and stepped views,
ties, NaN, inf and -0.0; k from 0 to the axis' size, largest and
smallest, sorted and unsorted, negative axes; per case the values, the
indices and d sum(y * r)/dx. The order is a stable sort's (np.lexsort by
NaN first, then the value, then the position); the along ops are
np.take_along_axis and np.add.at along lines. Run by make check's numpy
phase (tools/test.sh):
  python3 tests/topk_check.py build/liboptree.so
Prints "N passed, N failed"; exits 1 on a failure.
"""
import ctypes as C
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from diff_numpy import F32, F64  # noqa: E402
from index_check import Runner, rshape, values  # noqa: E402

P = C.c_void_p


class TopkOpts(C.Structure):
    _fields_ = [('spec_', C.c_char_p), ('axis', C.c_int), ('largest', C.c_bool),
                ('sorted', C.c_bool)]


def bind(c):
    for fn in (c.ot_topk_at, c.ot_topk_indices_at):
        fn.restype = P
        fn.argtypes = [P, C.c_int64, C.POINTER(TopkOpts), C.c_char_p, C.c_int]
    c.ot_take_along_at.restype = P
    c.ot_take_along_at.argtypes = [P, P, C.c_int, C.c_char_p, C.c_int]
    c.ot_scatter_add_along_at.restype = P
    c.ot_scatter_add_along_at.argtypes = [P, P, C.c_int, C.c_int64, C.c_char_p, C.c_int]


def order(x, axis, largest):
    """Each line's positions along axis in topk's order: NaN above every
    number, then by value, equal values by position (a stable sort)."""
    m = np.moveaxis(x, axis, -1)
    rows = m.reshape(-1, m.shape[-1]) if m.size else np.zeros((0, m.shape[-1]))
    out = np.zeros(rows.shape, dtype=np.int64)
    pos = np.arange(rows.shape[-1])
    for i, row in enumerate(rows):
        nan = np.isnan(row)
        v = np.where(nan, 0.0, row)
        out[i] = np.lexsort((pos, -v, ~nan) if largest else (pos, v, nan))
    return np.moveaxis(out.reshape(m.shape), -1, axis)


def put_add(shape, idx, src, axis):
    """np.add.at of src at idx along axis into zeros of shape."""
    out = np.zeros(shape)
    n = shape[axis]
    w = np.where(idx < 0, idx + n, idx)
    grids = np.indices(idx.shape, sparse=True)
    at = tuple(w if d == axis else g for d, g in enumerate(grids))
    np.add.at(out, at, src)
    return out


class TopkRunner(Runner):
    def topk(self, be, bname, dt):
        rng, c = self.rng, self.lib.c
        xs = rshape(rng, 1, 3)
        axis = int(rng.integers(0, len(xs)))
        n = xs[axis]
        k = int(rng.integers(0, n + 1))
        largest, srt = bool(rng.random() < 0.7), bool(rng.random() < 0.7)
        x = values(rng, xs, rng.random() < 0.4)
        idx = np.take(order(x, axis, largest), np.arange(k), axis=axis)
        if not srt:
            idx = np.sort(idx, axis=axis)
        want = np.take_along_axis(x, idx, axis=axis)
        ax = axis - len(xs) if rng.random() < 0.3 else axis
        o = TopkOpts(None, ax, largest, srt)
        what = 'topk x %s k %d axis %d largest %d sorted %d' % (xs, k, ax, largest, srt)
        self.case(be, bname, dt, what,
                  lambda t: c.ot_topk_at(c.ot_tensor_node(t[0]), k, C.byref(o), b'topk_check', 0),
                  [x], want, lambda r: [put_add(xs, idx, r, axis)])
        self.case(be, bname, dt, what + ' indices',
                  lambda t: c.ot_topk_indices_at(c.ot_tensor_node(t[0]), k, C.byref(o),
                                                 b'topk_check', 0),
                  [x], idx.astype(np.float64), None)

    def along(self, be, bname, dt):
        rng, c = self.rng, self.lib.c
        xs = rshape(rng, 1, 3)
        axis = int(rng.integers(0, len(xs)))
        n = xs[axis]
        ishape = xs[:axis] + ((int(rng.integers(0, 5)) if n else 0),) + xs[axis + 1:]
        idx = self.indices(ishape, n)
        w = np.where(idx < 0, idx + n, idx)
        x, src = values(rng, xs), values(rng, ishape)
        self.case(be, bname, dt, 'take_along x %s idx %s axis %d' % (xs, idx.tolist(), axis),
                  lambda t: c.ot_take_along_at(c.ot_tensor_node(t[0]), c.ot_tensor_node(t[1]),
                                               axis, b'topk_check', 0),
                  [x, idx], np.take_along_axis(x, w, axis=axis),
                  lambda r: [put_add(xs, idx, r, axis)])
        self.case(be, bname, dt, 'scatter_add_along src %s idx %s axis %d' % (ishape, idx.tolist(),
                                                                               axis),
                  lambda t: c.ot_scatter_add_along_at(c.ot_tensor_node(t[0]),
                                                      c.ot_tensor_node(t[1]), axis, n,
                                                      b'topk_check', 0),
                  [src, idx], put_add(xs, idx, src, axis),
                  lambda r: [np.take_along_axis(r, w, axis=axis)])


def main():
    if len(sys.argv) < 2:
        raise SystemExit('usage: topk_check.py build/liboptree.so')
    run = TopkRunner(sys.argv[1])
    bind(run.lib.c)
    c = run.lib.c
    backends = [(b.decode(), c.ot_backend_new(b, None)) for b in (b'ref', b'cpu')]
    for i in range(24):
        for bname, be in backends:
            for dt in (F64, F32):
                run.topk(be, bname, dt)
                run.along(be, bname, dt)
    for bname, be in backends:
        c.ot_backend_free(be)
    print('%d passed, %d failed' % (run.passed, run.failed))
    sys.exit(1 if run.failed else 0)


if __name__ == '__main__':
    main()
