"""_custom.py - ops registered from Python callables (ot_op_register_structured):
a NumPy-vectorised function over whole operands becomes an op of the
library, usable in any tree, printed and parsed by its name, differentiated
by an optional Python gradient rule. Its result has the operands'
broadcast shape, in float32 when every operand is float32, else float64.

No exception of a Python function unwinds into the library (ctypes would
print it and hand C garbage): each callback catches it, keeps it
(_lib.keep_pending) and returns what C reads as a failure; the module
raises it when the library returns. A kernel cannot report a failure (its
C type returns void): its output is filled with NaN and the exception
raised after the call that ran it (an assignment, get, a program run)."""
import ctypes

import numpy as np

from . import _decls as D
from ._core import OP, OpTreeNode, Op, Tensor, _Expr, node_of, wrap_node
from ._lib import lib, raise_error, site, keep_pending, cstr

# msg is the library's buffer, written in place: a c_char_p argument would
# be a copy (an immutable bytes object memmove would write over).
_SHAPE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(D.ot_shape),
                             ctypes.POINTER(ctypes.c_int), ctypes.POINTER(D.ot_args),
                             ctypes.POINTER(D.ot_shape), ctypes.POINTER(ctypes.c_int),
                             ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_KERNEL_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(D.ot_struct_call))
_GRAD_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                            ctypes.POINTER(D.ot_args), ctypes.c_void_p)
_registered = []     # the callbacks live as long as the registry (the process)
_NP = {1: np.float32, 2: np.float64}
_ESHAPE = dict(D.STATUSES)["OT_ESHAPE"]
_EINVAL = dict(D.STATUSES)["OT_EINVAL"]


def _write_msg(msg, msg_len, text):
    """text into the library's msg buffer (msg_len bytes, NUL-terminated)."""
    if msg and msg_len:
        b = text.encode("utf-8", "replace")[:msg_len - 1] + b"\0"
        ctypes.memmove(msg, b, len(b))


def _array(t):
    s = t.shape
    shape = tuple(s.dims[i] for i in range(s.ndim))
    n = int(np.prod(shape)) if shape else 1
    buf = (ctypes.c_byte * (n * np.dtype(_NP[t.dtype]).itemsize)).from_address(t.data)
    return np.frombuffer(buf, dtype=_NP[t.dtype]).reshape(shape)


def _result(name, r, shape):
    """fn's result, checked: an array of numbers that broadcasts to the
    output's shape (None or an object would be stored as NaN)."""
    a = np.asarray(r)
    if a.dtype.kind not in "biuf":
        raise TypeError("optree: op %r returned %s, not an array of numbers"
                        % (name, type(r).__name__ if a.dtype.kind == "O" else a.dtype))
    return a


def register_op(name, fn, arity=1, grad=None):
    """Registers fn (NumPy arrays in, an array of their broadcast shape
    out) as the op `name`; returns a function building its nodes. grad,
    when given, is grad(inputs, out, g, which) -> the contribution to
    inputs[which], built from OpTreeNodes with the usual operators; without
    it the op is not differentiable, and gradients through it are zero
    (the C API's OT_FLAG_NODIFF)."""
    def shape(n, shapes, dtypes, args, out_shape, out_dtype, msg, msg_len, user):
        try:
            dims = [tuple(shapes[i].dims[j] for j in range(shapes[i].ndim)) for i in range(n)]
            try:
                out = np.broadcast_shapes(*dims) if dims else ()
            except ValueError as e:         # NumPy's words, as the op's message
                _write_msg(msg, msg_len, str(e))
                return _ESHAPE
            out_shape[0].ndim = len(out)
            for i, d in enumerate(out):
                out_shape[0].dims[i] = d
            out_dtype[0] = 1 if all(dtypes[i] == 1 for i in range(n)) else 2
            return 0
        except BaseException as e:          # pylint: disable=broad-except (never into C)
            keep_pending(e)
            _write_msg(msg, msg_len, "the shape rule raised %s" % type(e).__name__)
            return _EINVAL

    def kernel(call):
        out = None
        try:
            c = call[0]
            out = _array(ctypes.cast(c.out, ctypes.POINTER(D.ot_struct_tensor))[0])
            ins = [_array(ctypes.cast(getattr(c, "in"), ctypes.POINTER(D.ot_struct_tensor))[i])
                   for i in range(c.n)]
            out[...] = _result(name, fn(*ins), out.shape)
        except BaseException as e:          # pylint: disable=broad-except (never into C)
            keep_pending(e)
            if out is not None:
                out[...] = np.nan           # not the memory's garbage

    def gradient(n, inputs, out, g, which, args, user):
        try:
            nodes = [OpTreeNode(lib.ot_retain_at(inputs[i], None, 0), retained=True)
                     for i in range(n)]
            o = OpTreeNode(lib.ot_retain_at(out, None, 0), retained=True)
            gn = OpTreeNode(lib.ot_retain_at(g, None, 0), retained=True)
            r = grad(nodes, o, gn, which)
            if not isinstance(r, _Expr):
                raise TypeError("optree: the gradient rule of op %r returned %r, not a node "
                                "or a tensor" % (name, r))
            if isinstance(r, Tensor):
                # A tensor made in the rule dies with this frame (its
                # __del__ frees it) before the library reads its leaf: a
                # node of the current pool that holds it, r * 1 (exact),
                # outlives it.
                return lib.ot_build_at(OP.mul.num, node_of(r), lib.ot_const(1.0), None, None, 0)
            return node_of(r)   # built in the current pool, as a rule's result must be
        except BaseException as e:          # pylint: disable=broad-except (never into C)
            keep_pending(e)
            return None                     # NULL: the library fails the differentiation

    cbs = (_SHAPE_FN(shape), _KERNEL_FN(kernel), _GRAD_FN(gradient) if grad else None)
    _registered.append(cbs)
    d = D.ot_struct_def(name=cstr(name), arity=arity)
    d.shape = ctypes.cast(cbs[0], ctypes.c_void_p)
    d.f32 = d.f64 = ctypes.cast(cbs[1], ctypes.c_void_p)
    if grad:
        d.grad = ctypes.cast(cbs[2], ctypes.c_void_p)
    num = lib.ot_op_register_structured(ctypes.byref(d))
    if num < 0:
        raise_error(at=site())
    op = Op((num, name, arity, "SPECIAL", "FLOAT", "FN" if grad else "NONE", None, True, (),
             None))

    def apply(*operands):
        if len(operands) != arity:
            raise TypeError("optree: %s takes %d operand(s), %d given"
                            % (name, arity, len(operands)))
        file, line = site()
        arr = (ctypes.c_void_p * max(arity, 1))(*[node_of(x) for x in operands])
        return wrap_node(lib.ot_apply_struct_at(num, arity, arr, None, file, line))
    apply.__name__ = name
    apply.op = op
    return apply
