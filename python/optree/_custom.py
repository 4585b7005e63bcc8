"""_custom.py - ops registered from Python callables (ot_op_register_structured):
a NumPy-vectorised function over whole operands becomes an op of the
library, usable in any tree, printed and parsed by its name, differentiated
by an optional Python gradient rule. Its result has the operands'
broadcast shape, in float32 when every operand is float32, else float64."""
import ctypes

import numpy as np

from . import _decls as D
from ._core import OpTreeNode, Op, node_of, wrap_node
from ._lib import lib, raise_error, site

_SHAPE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(D.ot_shape),
                             ctypes.POINTER(ctypes.c_int), ctypes.POINTER(D.ot_args),
                             ctypes.POINTER(D.ot_shape), ctypes.POINTER(ctypes.c_int),
                             ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p)
_KERNEL_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(D.ot_struct_call))
_GRAD_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                            ctypes.POINTER(D.ot_args), ctypes.c_void_p)
_registered = []     # the callbacks live as long as the registry (the process)
_NP = {1: np.float32, 2: np.float64}
_ESHAPE = dict(D.STATUSES)["OT_ESHAPE"]


def _array(t):
    s = t.shape
    shape = tuple(s.dims[i] for i in range(s.ndim))
    n = int(np.prod(shape)) if shape else 1
    buf = (ctypes.c_byte * (n * np.dtype(_NP[t.dtype]).itemsize)).from_address(t.data)
    return np.frombuffer(buf, dtype=_NP[t.dtype]).reshape(shape)


def register_op(name, fn, arity=1, grad=None):
    """Registers fn (NumPy arrays in, an array of their broadcast shape
    out) as the op `name`; returns a function building its nodes. grad,
    when given, is grad(inputs, out, g, which) -> the contribution to
    inputs[which], built from OpTreeNodes with the usual operators."""
    def shape(n, shapes, dtypes, args, out_shape, out_dtype, msg, msg_len, user):
        try:
            dims = [tuple(shapes[i].dims[j] for j in range(shapes[i].ndim)) for i in range(n)]
            out = np.broadcast_shapes(*dims) if dims else ()
        except ValueError as e:
            ctypes.memmove(msg, str(e).encode()[:msg_len - 1] + b"\0", min(len(str(e)) + 1, msg_len))
            return _ESHAPE
        out_shape[0].ndim = len(out)
        for i, d in enumerate(out):
            out_shape[0].dims[i] = d
        out_dtype[0] = 1 if all(dtypes[i] == 1 for i in range(n)) else 2
        return 0

    def kernel(call):
        c = call[0]
        ins = [_array(ctypes.cast(getattr(c, "in"), ctypes.POINTER(D.ot_struct_tensor))[i])
               for i in range(c.n)]
        out = _array(ctypes.cast(c.out, ctypes.POINTER(D.ot_struct_tensor))[0])
        out[...] = fn(*ins)

    def gradient(n, inputs, out, g, which, args, user):
        nodes = [OpTreeNode(lib.ot_retain_at(inputs[i], None, 0), retained=True) for i in range(n)]
        o = OpTreeNode(lib.ot_retain_at(out, None, 0), retained=True)
        gn = OpTreeNode(lib.ot_retain_at(g, None, 0), retained=True)
        r = grad(nodes, o, gn, which)
        return node_of(r)   # built in the current pool, as a rule's result must be

    cbs = (_SHAPE_FN(shape), _KERNEL_FN(kernel), _GRAD_FN(gradient) if grad else None)
    _registered.append(cbs)
    d = D.ot_struct_def(name=name.encode(), arity=arity)
    d.shape = ctypes.cast(cbs[0], ctypes.c_void_p)
    d.f32 = d.f64 = ctypes.cast(cbs[1], ctypes.c_void_p)
    if grad:
        d.grad = ctypes.cast(cbs[2], ctypes.c_void_p)
    num = lib.ot_op_register_structured(ctypes.byref(d))
    if num < 0:
        raise_error()
    op = Op((num, name, arity, "SPECIAL", "FLOAT", "FN" if grad else "NONE", None, True, (),
             None))

    def apply(*operands):
        file, line = site()
        arr = (ctypes.c_void_p * max(arity, 1))(*[node_of(x) for x in operands])
        return wrap_node(lib.ot_apply_struct_at(num, arity, arr, None, file, line))
    apply.__name__ = name
    apply.op = op
    return apply
