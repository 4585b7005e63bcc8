"""optree - lazy tensors in the op-tree style (liboptree), with neon's
backend API: gen_backend, tensors that build op-trees with Python operators,
t[:] = tree to compute, Autodiff; NumPy arrays in and out without copies.

    from optree import gen_backend
    be = gen_backend('cpu')
    x0 = be.ones((2, 2), name='x0'); x1 = be.ones((2, 2), name='x1')
    f = x0 + x1                 # an op-tree: nothing computed
    f_val = be.empty((2, 2))
    f_val[:] = f                # computed here
    print(f)                    # ({'shape': (2, 2), 'op': 'add'}, x0, x1)

Errors are exceptions: OptreeError, one subclass per status code
(ShapeError, DtypeError, ...), their messages naming the Python file:line
that built the failing node.
"""
from ._lib import OptreeError, ERROR_CLASSES, lib as _clib
from ._core import (Backend, OpTreeNode, Tensor, gen_backend, OP, OPS_BY_NUM, op_function,
                    dot_axes)
from ._autodiff import Autodiff
from ._program import Program
from ._model import Model, FitResult
from ._custom import register_op

# The error classes, one per status code of the header: ShapeError, ...
for _cls in ERROR_CLASSES:
    globals()[_cls.__name__] = _cls
del _cls

__version__ = _clib.ot_version().decode()

# Every op of the library's table as a module function: optree.tanh(x), ...
for _op in OPS_BY_NUM.values():
    if not _op.user:
        globals()[_op.name] = op_function(_op)
del _op

__all__ = ["Autodiff", "Backend", "Program", "Model", "FitResult", "register_op", "dot_axes", "OpTreeNode", "OptreeError", "Tensor", "gen_backend", "OP"] + [
    c.__name__ for c in ERROR_CLASSES]
