#!/usr/bin/python3
"""fit_math.py - the coefficients of the library's own f32 tanh, exp and log
(own_math.inc's f32_tanh_u10, f32_exp_u10, f32_log_u10; jit_math.c's H_
constants), derived again: prints them as C hex floats and as the bits
jit_math.c's fn_bits holds.

Two minimax fits for relative error, each by Lawson's iteratively
reweighted least squares on 2,000 Chebyshev nodes (numpy), with the target
evaluated by mpmath at 40 digits:
  - tanh(a) = a + a^3 P(a^2) on [0, 0.97], P of degree 6;
  - e^r = 1 + r + r^2 Q(r) on |r| <= ln 2 / 2 (+ 0.001: r's reduction
    rounds), Q of degree 4 (tanh's large branch and exp);
  - log1p(r) = r - r^2/2 + r^3 P(r) on [sqrt(1/2) - 1, sqrt(2) - 1], P of
    degree 7 (log).
Rounding every coefficient to f32 at once would cost 2 bits here, so the
fit rounds the lowest coefficient, fits the rest again around it, and so
on (the low coefficients weigh most). The printed error is that of the
rounded polynomial, in units of its result. The f32 functions' own errors
(tanh at most 0.9247 ULP) are measured, not derived: make ulp-exhaustive.

Usage: /usr/bin/python3 tools/fit_math.py   (about 10 s)
"""
import struct

import mpmath as mp
import numpy as np

mp.mp.dps = 40
NODES = 2000


def f32(v):
    return struct.unpack('f', struct.pack('f', v))[0]


def bits(v):
    return struct.unpack('I', struct.pack('f', v))[0]


def lawson(xs, target, basis, weight, iters=200):
    """Minimax by Lawson: weighted least squares, each weight times its error."""
    a = np.array([[b(x) for b in basis] for x in xs])
    t, w, wt = np.array(target), np.ones(len(xs)) / len(xs), np.array(weight)
    for _ in range(iters):
        sw = np.sqrt(w)
        c = np.linalg.lstsq(a * (sw * wt)[:, None], t * sw * wt, rcond=None)[0]
        e = np.abs((a @ c - t) * wt)
        w = w * e / (w * e).sum()
    return c


def lawson_f32(xs, target, basis, weight):
    """Coefficients rounded to f32 one at a time, the rest refitted."""
    fixed, t = [], np.array(target)
    cols = [np.array([b(x) for x in xs]) for b in basis]
    for i in range(len(basis)):
        rest = t - sum(fixed[k] * cols[k] for k in range(i))
        fixed.append(f32(lawson(xs, rest, basis[i:], weight)[0]))
    err = np.abs((sum(c * col for c, col in zip(fixed, cols)) - t) * np.array(weight)).max()
    return fixed, err


def tanh_poly(cut=0.97, deg=6):
    xs = [cut * (0.5 - 0.5 * np.cos(np.pi * (i + 0.5) / NODES)) for i in range(NODES)]
    xs = [x for x in xs if x > 1e-3]
    target = [float((mp.tanh(mp.mpf(x)) - x) / mp.mpf(x) ** 3) for x in xs]
    weight = [float(mp.mpf(x) ** 3 / mp.tanh(mp.mpf(x))) for x in xs]
    basis = [(lambda k: (lambda x: x ** (2 * k)))(k) for k in range(deg + 1)]
    return lawson_f32(xs, target, basis, weight)


def exp_poly(deg=4):
    h = 0.5 * np.log(2) + 0.001
    xs = [h * np.cos(np.pi * (i + 0.5) / NODES) for i in range(NODES)]
    xs = [x for x in xs if abs(x) > 1e-4]
    target = [float((mp.exp(mp.mpf(x)) - 1 - x) / mp.mpf(x) ** 2) for x in xs]
    weight = [float(mp.mpf(x) ** 2 / mp.exp(mp.mpf(x))) for x in xs]
    basis = [(lambda k: (lambda x: x ** k))(k) for k in range(deg + 1)]
    return lawson_f32(xs, target, basis, weight)


def log_poly(deg=7):
    lo, hi = 2 ** -0.5 - 1, 2 ** 0.5 - 1
    xs = [lo + (hi - lo) * (0.5 - 0.5 * np.cos(np.pi * (i + 0.5) / NODES)) for i in range(NODES)]
    xs = [x for x in xs if abs(x) > 1e-3]
    target = [float((mp.log1p(mp.mpf(x)) - x + mp.mpf(x) ** 2 / 2) / mp.mpf(x) ** 3) for x in xs]
    weight = [float(mp.mpf(x) ** 3 / mp.log1p(mp.mpf(x))) for x in xs]
    basis = [(lambda k: (lambda x: x ** k))(k) for k in range(deg + 1)]
    return lawson_f32(xs, target, basis, weight)


def show(name, coef, err):
    print('%s (relative error 2^%.1f):' % (name, np.log2(err)))
    print('  C:    ' + ', '.join(float.hex(c).replace('0000000p', 'p') + 'f' for c in coef))
    print('  bits: ' + ', '.join('0x%08X' % bits(c) for c in coef))


if __name__ == '__main__':
    show('tanh: a + a^3 P(a^2), a < 0.97, P from a^0', *tanh_poly())
    show('exp: 1 + r + r^2 Q(r), Q from r^0', *exp_poly())
    show('log: log1p(r) = r - r^2/2 + r^3 P(r), P from r^0', *log_poly())
