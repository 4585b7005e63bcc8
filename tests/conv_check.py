"""conv_check.py - conv and conv_transpose (and through their gradients
conv_wgrad) against NumPy references written with padding, strided
slices and einsum, on the ref and cpu backends, f64 and f32: random
1-D to 3-D geometries with every option (stride, dilation, padding per
side, 'same' and 'valid', groups, depthwise, output padding), size-1 and
size-0 dims, and transposed views as inputs. Run by make check's numpy
phase (tools/test.sh):  python3 tests/conv_check.py build/liboptree.so
Prints "N passed, N failed"; exits 1 on a failure.
"""
import ctypes as C
import sys

import numpy as np

F32, F64 = 1, 2          # ot_dtype
PAD_SAME, PAD_VALID = 2, 1


class OtShape(C.Structure):
    _fields_ = [('ndim', C.c_int), ('dims', C.c_int64 * 8)]


class OtConvOpts(C.Structure):
    _fields_ = [('spec_', C.c_char_p), ('stride', C.c_int * 3), ('dilation', C.c_int * 3),
                ('pad', C.c_int), ('pad_lo', C.c_int * 3), ('pad_hi', C.c_int * 3),
                ('padding', C.c_int), ('output_padding', C.c_int * 3), ('groups', C.c_int)]


def load(path):
    lib = C.CDLL(path)
    P, I = C.c_void_p, C.c_int
    sigs = {
        'ot_backend_new': (P, [C.c_char_p, P]), 'ot_backend_free': (None, [P]),
        'ot_array': (P, [P, OtShape, I, P]), 'ot_empty': (P, [P, OtShape, I]),
        'ot_transpose': (P, [P, P]), 'ot_tensor_free': (None, [P]),
        'ot_get': (I, [P, P]), 'ot_tensor_node': (P, [P]), 'ot_node_shape': (OtShape, [P]),
        'ot_assign_node': (I, [P, P]), 'ot_pool_push': (P, []), 'ot_pool_pop': (I, [P]),
        'ot_errmsg': (C.c_char_p, []), 'ot_clear_error': (None, []),
        'ot_conv_at': (P, [P, P, C.POINTER(OtConvOpts), C.c_char_p, I]),
        'ot_conv_transpose_at': (P, [P, P, C.POINTER(OtConvOpts), C.c_char_p, I]),
        'ot_build_at': (P, [I, P, P, P, C.c_char_p, I]), 'ot_op_lookup': (I, [C.c_char_p]),
        'ot_autodiff_new': (P, [P, P]), 'ot_autodiff_grad': (P, [P, P]),
        'ot_autodiff_free': (None, [P]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


def mkshape(shape):
    s = OtShape()
    s.ndim = len(shape)
    for i, d in enumerate(shape):
        s.dims[i] = int(d)
    return s


# ---- NumPy references ---------------------------------------------------------

def out_size(i, k, s, d, lo, hi):
    return (i + lo + hi - d * (k - 1) - 1) // s + 1


def np_conv(x, w, s, d, lo, hi, groups):
    n, c = x.shape[:2]
    o, nsp = w.shape[0], x.ndim - 2
    cg, og = c // groups, o // groups
    xp = np.pad(x, [(0, 0), (0, 0)] + [(lo[i], hi[i]) for i in range(nsp)])
    out = [out_size(x.shape[2 + i], w.shape[2 + i], s[i], d[i], lo[i], hi[i]) for i in range(nsp)]
    y = np.zeros((n, o) + tuple(out))
    for q in np.ndindex(*w.shape[2:]):
        sl = tuple(slice(q[i] * d[i], q[i] * d[i] + s[i] * (out[i] - 1) + 1, s[i])
                   for i in range(nsp))
        patch = xp[(slice(None), slice(None)) + sl]
        for g in range(groups):
            y[:, g * og:(g + 1) * og] += np.einsum(
                'nc...,oc->no...', patch[:, g * cg:(g + 1) * cg],
                w[(slice(g * og, (g + 1) * og), slice(None)) + q])
    return y


def np_conv_transpose(x, w, s, d, lo, hi, op, groups):
    n, ci = x.shape[:2]
    nsp, cig, cog = x.ndim - 2, ci // groups, w.shape[1]
    ins = x.shape[2:]
    full = [(ins[i] - 1) * s[i] + d[i] * (w.shape[2 + i] - 1) + 1 + op[i] for i in range(nsp)]
    y = np.zeros((n, cog * groups) + tuple(full))
    for q in np.ndindex(*w.shape[2:]):
        sl = tuple(slice(q[i] * d[i], q[i] * d[i] + s[i] * (ins[i] - 1) + 1, s[i])
                   for i in range(nsp))
        for g in range(groups):
            y[(slice(None), slice(g * cog, (g + 1) * cog)) + sl] += np.einsum(
                'nc...,co->no...', x[:, g * cig:(g + 1) * cig],
                w[(slice(g * cig, (g + 1) * cig), slice(None)) + q])
    crop = tuple(slice(lo[i], full[i] - hi[i]) for i in range(nsp))
    return y[(slice(None), slice(None)) + crop]


def np_wgrad(x, r, wshape, s, d, lo, hi, groups):
    """d sum(conv(x, w) * r) / dw."""
    nsp, o = x.ndim - 2, wshape[0]
    cg, og = wshape[1], o // groups
    xp = np.pad(x, [(0, 0), (0, 0)] + [(lo[i], hi[i]) for i in range(nsp)])
    out = r.shape[2:]
    dw = np.zeros(wshape)
    for q in np.ndindex(*wshape[2:]):
        sl = tuple(slice(q[i] * d[i], q[i] * d[i] + s[i] * (out[i] - 1) + 1, s[i])
                   for i in range(nsp))
        patch = xp[(slice(None), slice(None)) + sl]
        for g in range(groups):
            ax = [0] + list(range(2, x.ndim))
            dw[(slice(g * og, (g + 1) * og), slice(None)) + q] = np.tensordot(
                r[:, g * og:(g + 1) * og], patch[:, g * cg:(g + 1) * cg], axes=(ax, ax))
    return dw


# ---- random cases -----------------------------------------------------------------

def draw(rng):
    """One geometry: (transpose, x shape, w shape, options dict, window)."""
    nsp = int(rng.integers(1, 4))
    groups = int(rng.choice([1, 1, 2, 3]))
    depthwise = rng.random() < 0.2
    cg = 1 if depthwise else int(rng.integers(1, 3))
    og = 1 if depthwise else int(rng.integers(1, 3))
    n = int(rng.choice([0, 1, 2])) if rng.random() < 0.3 else 1 + int(rng.integers(0, 2))
    transpose = rng.random() < 0.4
    maxk = 3 if nsp < 3 else 2
    k = [int(rng.integers(1, maxk + 1)) for _ in range(nsp)]
    s = [int(rng.integers(1, 3)) for _ in range(nsp)]
    d = [int(rng.integers(1, 3)) for _ in range(nsp)]
    mode = rng.choice(['explicit', 'sym', 'same', 'valid']) if not transpose else \
        rng.choice(['explicit', 'sym', 'valid'])
    if mode == 'same':
        s = [1] * nsp
    lo = [int(rng.integers(0, 3)) for _ in range(nsp)]
    hi = [int(rng.integers(0, 3)) for _ in range(nsp)]
    if mode == 'sym':
        hi = lo = [lo[0]] * nsp
    if mode == 'valid':
        lo = hi = [0] * nsp
    op = [int(rng.integers(0, s[i])) for i in range(nsp)] if transpose else [0] * nsp
    span = [d[i] * (k[i] - 1) + 1 for i in range(nsp)]
    if transpose:
        ins = [int(rng.integers(1, 5)) for _ in range(nsp)]
        ins = [max(ins[i], 1 + (lo[i] + hi[i]) // s[i]) for i in range(nsp)]
        x = (n, groups * cg) + tuple(ins)
        w = (groups * cg, og) + tuple(k)
    else:
        ins = [int(rng.integers(1, 6)) for _ in range(nsp)]
        if mode == 'same':
            tot = [span[i] - 1 for i in range(nsp)]
            lo = [t // 2 for t in tot]
            hi = [t - t // 2 for t in tot]
        ins = [max(ins[i], span[i] - lo[i] - hi[i]) for i in range(nsp)]
        x = (n, groups * cg) + tuple(ins)
        w = (groups * og, cg) + tuple(k)
    opts = OtConvOpts()
    opts.spec_ = None
    for i in range(nsp):
        opts.stride[i], opts.dilation[i] = s[i], d[i]
        opts.output_padding[i] = op[i]
    if mode == 'sym':
        opts.pad = lo[0]
    elif mode == 'explicit':
        for i in range(nsp):
            opts.pad_lo[i], opts.pad_hi[i] = lo[i], hi[i]
    elif mode == 'same':
        opts.padding = PAD_SAME
    else:
        opts.padding = PAD_VALID
    opts.groups = groups
    return transpose, x, w, opts, (s, d, lo, hi, op, groups)


class Runner:
    def __init__(self, path):
        self.c = load(path)
        self.passed = self.failed = 0

    def tensor(self, be, arr, dt, view):
        """arr as a tensor of dtype dt; a transposed view of its last two dims
        when view (and arr has them)."""
        if view and arr.ndim >= 2:
            base = np.ascontiguousarray(np.swapaxes(arr, -1, -2))
            t = self.c.ot_array(be, mkshape(base.shape), F64, base.ctypes.data)
            typed = self.c.ot_empty(be, mkshape(base.shape), dt)
            perm = (C.c_int * 8)(*(list(range(arr.ndim - 2)) + [arr.ndim - 1, arr.ndim - 2]))
            self.c.ot_assign_node(typed, self.c.ot_tensor_node(t))
            self.c.ot_tensor_free(t)
            v = self.c.ot_transpose(typed, perm)
            return v, typed
        arr = np.ascontiguousarray(arr, dtype=np.float64)
        t = self.c.ot_array(be, mkshape(arr.shape), F64, arr.ctypes.data)
        typed = self.c.ot_empty(be, mkshape(arr.shape), dt)
        self.c.ot_assign_node(typed, self.c.ot_tensor_node(t))
        self.c.ot_tensor_free(t)
        return typed, None

    def value(self, be, node, dt):
        shp = self.c.ot_node_shape(node)
        shape = tuple(shp.dims[i] for i in range(shp.ndim))
        out = self.c.ot_empty(be, shp, dt)
        if self.c.ot_assign_node(out, node) != 0:
            self.c.ot_tensor_free(out)
            return None
        host = np.zeros(shape, dtype=np.float32 if dt == F32 else np.float64)
        self.c.ot_get(out, host.ctypes.data)
        self.c.ot_tensor_free(out)
        return host.astype(np.float64)

    def compare(self, what, got, want, dt):
        tol = 2e-5 if dt == F32 else 1e-11
        scale = 1.0 + (np.abs(want).max() if want.size else 0.0)
        if got is None or got.shape != want.shape or \
                (want.size and np.abs(got - want).max() > tol * scale):
            self.failed += 1
            err = 'no value: ' + (self.c.ot_errmsg() or b'').decode() if got is None else \
                'shape %s, expected %s' % (got.shape, want.shape) if got.shape != want.shape else \
                'max error %.3g' % np.abs(got - want).max()
            print('FAIL %s: %s' % (what, err))
        else:
            self.passed += 1

    def case(self, be, bname, rng, idx, dt):
        transpose, xs, ws, opts, (s, d, lo, hi, op, groups) = draw(rng)
        x = rng.integers(-4, 5, size=xs).astype(np.float64) / 4
        w = rng.integers(-4, 5, size=ws).astype(np.float64) / 4
        view = bool(rng.random() < 0.3)
        pool = self.c.ot_pool_push()
        xt, xb = self.tensor(be, x, dt, view)
        wt, wb = self.tensor(be, w, dt, False)
        fn = self.c.ot_conv_transpose_at if transpose else self.c.ot_conv_at
        y = fn(self.c.ot_tensor_node(xt), self.c.ot_tensor_node(wt), C.byref(opts), b'conv_check', idx)
        what = '%s %s %s case %d: x %s w %s s %s d %s pad %s/%s op %s groups %d%s' % (
            bname, 'f32' if dt == F32 else 'f64', 'conv_transpose' if transpose else 'conv', idx,
            xs, ws, s, d, lo, hi, op, groups, ' (view)' if view else '')
        want = np_conv_transpose(x, w, s, d, lo, hi, op, groups) if transpose else \
            np_conv(x, w, s, d, lo, hi, groups)
        if not y:
            self.failed += 1
            print('FAIL %s: build: %s' % (what, self.c.ot_errmsg().decode()))
            self.c.ot_clear_error()
        else:
            self.compare(what, self.value(be, y, dt), want, dt)
            self.grads(be, what, y, want, x, w, xt, wt, dt, rng, transpose, (s, d, lo, hi, groups))
        self.c.ot_pool_pop(pool)
        for t in (xt, xb, wt, wb):
            if t:
                self.c.ot_tensor_free(t)

    def grads(self, be, what, y, want, x, w, xt, wt, dt, rng, transpose, geo):
        """d sum(y * r) in x and w: conv's are conv_transpose and conv_wgrad
        nodes, conv_transpose's conv and conv_wgrad."""
        s, d, lo, hi, groups = geo
        r = rng.integers(-4, 5, size=want.shape).astype(np.float64) / 4
        rt, rb = self.tensor(be, r, dt, False)
        loss = self.c.ot_build_at(self.c.ot_op_lookup(b'sum'), self.c.ot_build_at(
            self.c.ot_op_lookup(b'mul'), y, self.c.ot_tensor_node(rt), None, None, 0),
            None, C.byref(sum_args()), None, 0)
        ad = self.c.ot_autodiff_new(loss, None)
        if transpose:   # y = convT(x, w): dx = conv(r, w), dw = wgrad(r, x)
            op = [0] * len(s)
            want_x = np_conv(r, w, s, d, lo, hi, groups)
            want_w = np_wgrad(r, x, w.shape, s, d, lo, hi, groups)
        else:
            op = [x.shape[2 + i] + lo[i] + hi[i] - d[i] * (w.shape[2 + i] - 1) - 1 -
                  (want.shape[2 + i] - 1) * s[i] for i in range(len(s))]
            want_x = np_conv_transpose(r, w, s, d, lo, hi, op, groups)
            want_w = np_wgrad(x, r, w.shape, s, d, lo, hi, groups)
        self.compare(what + ' d/dx', self.value(be, self.c.ot_autodiff_grad(ad, xt), dt), want_x, dt)
        self.compare(what + ' d/dw', self.value(be, self.c.ot_autodiff_grad(ad, wt), dt), want_w, dt)
        self.c.ot_autodiff_free(ad)
        self.c.ot_tensor_free(rt)


class OtArgsPrefix(C.Structure):
    """The head of ot_args up to axis: sum's args need only axis = all; the
    rest of the struct is zero, so a zeroed buffer of ot_args's size with
    this prefix written is an ot_args."""
    _fields_ = [('spec_', C.c_char_p), ('axis', C.c_int)]


def sum_args():
    buf = (C.c_char * 4096)()
    head = OtArgsPrefix.from_buffer(buf)
    head.spec_ = None
    head.axis = -1000   # OT_AXIS_ALL
    return buf


def main():
    if len(sys.argv) < 2:
        raise SystemExit('usage: conv_check.py build/liboptree.so')
    run = Runner(sys.argv[1])
    rng = np.random.default_rng(34)
    for bname in (b'ref', b'cpu'):
        be = run.c.ot_backend_new(bname, None)
        for idx in range(24):
            for dt in (F64, F32):
                run.case(be, bname.decode(), rng, idx, dt)
        run.c.ot_backend_free(be)
    print('%d passed, %d failed' % (run.passed, run.failed))
    sys.exit(1 if run.failed else 0)


if __name__ == '__main__':
    main()
