"""attn_check.py - ot_attention (optree/attention.h) and its gradients against
the plain float64 NumPy formula softmax(q k^T * scale + mask) v, on the ref
and cpu backends in f64 and f32: random shapes (seq 1, size-0 batch, dims
that are no multiple of 16, sequences across the cpu kernel's 64 x 128
tiles), causal on and off (top-left aligned where seq_q != seq_k), masks
of every broadcast shape with -inf entries and fully masked rows (zeros,
zero gradients), default and given scales, transposed and stepped views.
Per case: the value and d sum(o * r) / d(q, k, v, mask) (the mask's: the
scores' gradient summed over its broadcast dims).
Run by make check's numpy phase (tools/test.sh):
    python3 tests/attn_check.py build/liboptree.so
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


class AttnOpts(C.Structure):
    _fields_ = [('spec_', C.c_char_p), ('mask', P), ('causal', C.c_bool), ('scale', C.c_double)]


def bind(c):
    c.ot_attention_at.restype = P
    c.ot_attention_at.argtypes = [P, P, P, C.POINTER(AttnOpts), C.c_char_p, C.c_int]


# ---- the reference --------------------------------------------------------------

def reference(q, k, v, mask, causal, scale, r):
    """o and d sum(o r) / d(q, k, v, mask) in float64, the plain way."""
    s = scale * np.einsum('bhid,bhjd->bhij', q, k)
    if mask is not None:
        s = s + mask
    sq, sk = q.shape[2], k.shape[2]
    if causal:
        s = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, s)
    with np.errstate(invalid='ignore', divide='ignore', over='ignore'):
        m = s.max(axis=-1, keepdims=True) if sk else np.full(s.shape[:-1] + (1,), -np.inf)
        none = m == -np.inf
        e = np.where(none, 0.0, np.exp(s - np.where(none, 0.0, m)))
        den = e.sum(axis=-1, keepdims=True)
        p = np.where(none, 0.0, e / np.where(none, 1.0, den))
    o = p @ v
    dp = r @ v.swapaxes(-1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    dq = scale * ds @ k
    dk = scale * ds.swapaxes(-1, -2) @ q
    dv = p.swapaxes(-1, -2) @ r
    dm = None
    if mask is not None:
        dm = ds
        lead = dm.ndim - mask.ndim
        dm = dm.sum(axis=tuple(range(lead))) if lead else dm
        for ax, n in enumerate(mask.shape):
            if n == 1 and dm.shape[ax] != 1:
                dm = dm.sum(axis=ax, keepdims=True)
    return o, dq, dk, dv, dm


# ---- the cases --------------------------------------------------------------------

class Case:
    def __init__(self, rng, idx):
        big = idx % 7 == 3   # across the cpu kernel's tiles
        self.b = 0 if idx % 11 == 5 else int(rng.integers(1, 3))
        self.h = int(rng.integers(1, 3))
        self.sq = int(rng.integers(60, 140)) if big else int(rng.choice([1, 2, 3, 5, 8]))
        self.sk = int(rng.integers(100, 270)) if big else int(rng.choice([1, 2, 4, 7, 9]))
        if idx % 13 == 7:
            self.sk = 0
        self.d = int(rng.choice([1, 3, 5, 8, 17]))
        self.dv = int(rng.choice([1, 2, 6, 19]))
        self.causal = bool(rng.random() < 0.5)
        self.scale = 0.0 if rng.random() < 0.5 else float(rng.choice([0.25, 1.5]))
        self.mask_shape = None
        if rng.random() < 0.5:
            full = (self.b, self.h, self.sq, self.sk)
            nd = int(rng.integers(2, 5))
            shp = tuple(n if rng.random() < 0.5 else 1 for n in full[4 - nd:])
            self.mask_shape = shp

    def __str__(self):
        return 'b %d h %d sq %d sk %d d %d dv %d%s scale %g mask %s' % (
            self.b, self.h, self.sq, self.sk, self.d, self.dv, ' causal' if self.causal else '',
            self.scale, self.mask_shape)

    def draw(self, rng):
        q = rng.standard_normal((self.b, self.h, self.sq, self.d))
        k = rng.standard_normal((self.b, self.h, self.sk, self.d))
        v = rng.standard_normal((self.b, self.h, self.sk, self.dv))
        r = rng.standard_normal((self.b, self.h, self.sq, self.dv))
        m = None
        if self.mask_shape is not None:
            m = rng.standard_normal(self.mask_shape)
            m[rng.random(self.mask_shape) < 0.2] = -np.inf
            if m.ndim >= 2 and m.shape[-2] > 1 and rng.random() < 0.5:
                m[..., 0, :] = -np.inf   # a fully masked row
        return q, k, v, m, r


class Runner:
    def __init__(self, path):
        self.lib = Lib(path)
        bind(self.lib.c)
        self.passed = self.failed = 0

    def check(self, what, got, want, dt):
        tol = 2e-5 if dt == F32 else 1e-11
        same = got.shape == want.shape and not np.isnan(got).any()
        if same and want.size:
            same = np.abs(got - want).max() <= tol * (1 + np.abs(want).max())
        if same:
            self.passed += 1
        else:
            self.failed += 1
            print('FAIL %s\n  got  %s\n  want %s' % (what, got.ravel()[:8], want.ravel()[:8]))

    def value(self, be, node, owned):
        return node_value(self.lib, be, node, owned)

    def tensor(self, be, arr, dt, kind, owned):
        return input_on(self.lib, self.rng, be, arr, dt, kind, owned)

    def run(self, be, bname, case, arrs, want, dt, idx):
        c, owned = self.lib.c, []
        q, k, v, m, r = arrs
        kinds = [['contig', 'T', 'step'][int(self.rng.integers(0, 3))] for _ in range(4)]
        pool = c.ot_pool_push()
        what = '%s %s %d: %s (%s)' % (bname, 'f32' if dt == F32 else 'f64', idx, case,
                                      ','.join(kinds))
        try:
            ts = [self.tensor(be, a, dt, kd, owned) for a, kd in zip((q, k, v), kinds)]
            mt = self.tensor(be, m, dt, kinds[3], owned) if m is not None else None
            o = AttnOpts(None, c.ot_tensor_node(mt) if mt else None, case.causal, case.scale)
            y = c.ot_attention_at(*[c.ot_tensor_node(t) for t in ts], C.byref(o), b'attn_check',
                                  idx)
            if not y:
                raise TrialError('build: %s' % self.lib.errmsg())
            rt = self.tensor(be, r, dt, 'contig', owned)
            mul, total = self.lib.op('mul'), self.lib.op('sum')
            loss = c.ot_build_at(total, c.ot_build_at(mul, y, c.ot_tensor_node(rt), None, None, 0),
                                 None, C.byref(mkargs()), None, 0)
            ad = c.ot_autodiff_new(loss, None)
            wrt = ts + ([mt] if mt else [])
            got = [self.value(be, y, owned)] + [self.value(be, c.ot_autodiff_grad(ad, t), owned)
                                                for t in wrt]
            c.ot_autodiff_free(ad)
            for name, g, w in zip(('', ' d/dq', ' d/dk', ' d/dv', ' d/dmask'), got, want):
                self.check(what + name, g, w, dt)
        except TrialError as e:
            self.failed += 1
            print('FAIL %s: %s' % (what, e))
            c.ot_clear_error()
        c.ot_pool_pop(pool)
        for t in reversed(owned):
            c.ot_tensor_free(t)

    def trial(self, backends, idx):
        case = Case(self.rng, idx)
        arrs = case.draw(self.rng)
        q, k, v, m, r = arrs
        scale = case.scale if case.scale else 1 / np.sqrt(case.d)
        want = reference(q, k, v, m, case.causal, scale, r)
        for bname, be in backends:
            for dt in (F64, F32):
                self.run(be, bname, case, arrs, want, dt, idx)


def main():
    if len(sys.argv) < 2:
        raise SystemExit('usage: attn_check.py build/liboptree.so')
    run = Runner(sys.argv[1])
    run.rng = np.random.default_rng(35)
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
