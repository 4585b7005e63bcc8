"""_model.py - the model API (ot_model_*) from Python: a stack of layers
(linear, conv, batch_norm, max_pool, avg_pool, dropout), a loss, an
optimizer (sgd, adam), fit on NumPy arrays, predict, save/load (.npz).
Each method is one library call; its errors name the Python line."""
import ctypes

import numpy as np

from . import _decls as D
from ._core import Tensor
from ._lib import lib, check, raise_error, site, c_integer, cpath, make_struct, set_field
# pylint: disable=no-name-in-module (made from the header)
from ._lib import BackendError

_ACT = {None: 0, "none": 0, "relu": 1, "tanh": 2, "sig": 3, "sigmoid": 3}
_LOSS = {"softmax_ce": 1, "cross_entropy": 1, "mse": 2}
_PAD = {"valid": 1, "same": 2}
_MONITOR = {"val_loss": 0, "val_accuracy": 1, "loss": 2}
_SCHEDULE = {None: 0, "constant": 0, "cosine": 1}


def _code(table, value, what):
    try:
        return table[value]
    except KeyError:
        raise ValueError("optree: %s %r: one of %s" % (what, value, ", ".join(
            repr(k) for k in table if k is not None))) from None


def _opts(cls, fields, kw):
    """cls with the options kw (an int[3] member takes an int or up to 3
    ints; each checked by set_field)."""
    o = cls()
    for k, v in kw.items():
        if k not in fields:
            raise TypeError("optree: no option %r (options: %s)" % (k, ", ".join(fields)))
        if k == "padding" and isinstance(v, str):
            v = _code(_PAD, v, "padding")
        set_field(o, k, v)
    return o


class FitResult:
    """What fit returns: epochs_run, best_epoch, loss, accuracy, val_loss,
    val_accuracy (NaN where not measured)."""

    def __init__(self, r):
        for name, _ in D.ot_fit_result._fields_:
            setattr(self, name, getattr(r, name))

    def __repr__(self):
        return "FitResult(%s)" % ", ".join("%s=%r" % (k, v) for k, v in vars(self).items())


class Model:
    """m = Model(be, inputs=784, input_shape=(1, 28, 28)); m.linear(64,
    'relu'); m.linear(10); m.loss('softmax_ce'); m.adam(lr=1e-3);
    m.fit(x, y, epochs=5, batch=64); m.predict(x). Methods return the
    model, so layers chain."""

    def __init__(self, be, inputs=None, input_shape=None):
        if input_shape is not None:
            input_shape = [c_integer(d, "input_shape dimension", ctypes.c_int64)
                           for d in input_shape]
        if inputs is None:
            if input_shape is None:
                raise TypeError("optree: Model needs inputs or input_shape")
            inputs = 1
            for d in input_shape:      # Python ints: a product np.prod would wrap
                inputs *= d
        file, line = site()
        self._m = lib.ot_model_new_at(be._b, c_integer(inputs, "inputs", ctypes.c_int64),
                                      file, line)
        if not self._m:
            raise_error()
        self.be = be
        if input_shape is not None:
            dims = (ctypes.c_int64 * max(len(input_shape), 1))(*input_shape)
            check(lib.ot_model_input_shape_at(self._m, len(input_shape), dims, file, line))

    def __del__(self):
        try:
            lib.ot_model_free(self._m)
        except Exception:
            pass

    # -- layers
    def linear(self, units, activation=None, seed=1):
        file, line = site()
        check(lib.ot_model_linear_at(self._m, c_integer(units, "units", ctypes.c_int64),
                                     _code(_ACT, activation, "activation"),
                                     c_integer(seed, "seed", ctypes.c_uint64), file, line))
        return self

    def conv(self, out_channels, kernel, activation=None, seed=1, **opts):
        """A convolution layer; opts: stride, dilation, pad, pad_lo, pad_hi,
        padding ('same' or 'valid'), groups (as ot_conv_opts)."""
        file, line = site()
        o = _opts(D.ot_conv_opts, ("stride", "dilation", "pad", "pad_lo", "pad_hi", "padding",
                                   "groups"), opts)
        check(lib.ot_model_conv_at(self._m, c_integer(out_channels, "out_channels", ctypes.c_int64),
                                   c_integer(kernel, "kernel"),
                                   _code(_ACT, activation, "activation"),
                                   c_integer(seed, "seed", ctypes.c_uint64),
                                   ctypes.byref(o), file, line))
        return self

    def batch_norm(self, activation=None, momentum=0.1, eps=1e-5):
        file, line = site()
        check(lib.ot_model_batch_norm_at(self._m, _code(_ACT, activation, "activation"),
                                         momentum, eps, file, line))
        return self

    def _pool(self, fn, kernel, opts):
        file, line = site()
        opts["kernel"] = kernel
        o = _opts(D.ot_pool_opts, ("kernel", "stride", "pad", "pad_lo", "pad_hi", "dilation",
                                   "ceil_mode", "exclude_pad"), opts)
        check(fn(self._m, ctypes.byref(o), file, line))
        return self

    def max_pool(self, kernel, **opts):
        """A max pooling layer (ot_pool_opts: stride, pad, dilation, ceil_mode...)."""
        return self._pool(lib.ot_model_max_pool_at, kernel, opts)

    def avg_pool(self, kernel, **opts):
        return self._pool(lib.ot_model_avg_pool_at, kernel, opts)

    def dropout(self, rate):
        file, line = site()
        check(lib.ot_model_dropout_at(self._m, rate, file, line))
        return self

    # -- loss and optimizer
    def loss(self, kind):
        """'softmax_ce' (y one-hot or rows of probabilities) or 'mse'."""
        file, line = site()
        check(lib.ot_model_loss_at(self._m, _code(_LOSS, kind, "loss"), None, None, file, line))
        return self

    def sgd(self, lr=0.01, momentum=0.0, weight_decay=0.0):
        file, line = site()
        o = make_struct(D.ot_sgd, lr=lr, momentum=momentum, weight_decay=weight_decay)
        check(lib.ot_model_sgd_at(self._m, ctypes.byref(o), file, line))
        return self

    def adam(self, lr=1e-3, beta1=0.0, beta2=0.0, eps=0.0, weight_decay=0.0):
        """Adam (zeros: the library's defaults, 0.9, 0.999, 1e-8);
        weight_decay is AdamW's decoupled decay."""
        file, line = site()
        o = make_struct(D.ot_adam, lr=lr, beta1=beta1, beta2=beta2, eps=eps,
                        weight_decay=weight_decay)
        check(lib.ot_model_adam_at(self._m, ctypes.byref(o), file, line))
        return self

    # -- training and use
    def _tensor(self, a, what):
        """a as a float32 tensor of the model's backend (a tensor of
        another backend is BackendError, as mixing backends in a tree is)."""
        if isinstance(a, Tensor):
            if lib.ot_tensor_backend(a._t) != self.be._b:
                raise BackendError("optree: %s is a tensor of backend %r, the model's is %r"
                                   % (what, a.backend.name if a.backend else "?", self.be.name))
            return a
        return self.be.array(np.asarray(a, dtype=np.float32))

    def fit(self, x, y, epochs=1, batch=32, seed=0, shuffle=True, validation_split=0.0,
            patience=0, monitor="val_loss", quiet=True, lr_schedule=None):
        """Trains on x (rows, inputs...) and y (rows, outputs), NumPy
        arrays or tensors (float32); returns a FitResult. quiet=False
        prints the library's progress line per epoch."""
        file, line = site()
        xt, yt = self._tensor(x, "x"), self._tensor(y, "y")
        o = make_struct(D.ot_fit_opts, epochs=epochs, batch=batch, seed=seed, no_shuffle=not shuffle,
                          validation_split=validation_split, patience=patience,
                          monitor=_code(_MONITOR, monitor, "monitor"), quiet=quiet,
                          lr_schedule=_code(_SCHEDULE, lr_schedule, "lr_schedule"))
        r = D.ot_fit_result()
        check(lib.ot_model_fit_at(self._m, xt._t, yt._t, ctypes.byref(o), ctypes.byref(r),
                                  file, line))
        return FitResult(r)

    def predict(self, x):
        """The model's outputs for x, as a NumPy array (rows, outputs)."""
        file, line = site()
        xt = self._tensor(x, "x")   # alive across the call
        return Tensor._own(lib.ot_model_predict_at(self._m, xt._t, file, line)).get()

    def parameters(self):
        """The parameters (W then b per layer that has them), as tensors
        that are views of the model's (writes reach the model)."""
        file, line = site()
        n = check_count(lib.ot_model_parameters_at(self._m, 0, None, file, line))
        arr = (ctypes.c_void_p * max(n, 1))()
        check_count(lib.ot_model_parameters_at(self._m, n, arr, file, line))
        out = []
        for i in range(n):
            t = object.__new__(_Borrowed)
            t._t, t._n, t._owner = arr[i], lib.ot_tensor_node(arr[i]), self
            out.append(t)
        return out

    def save(self, path):
        """The parameters to a NumPy .npz (w0, b0, w1, b1...)."""
        file, line = site()
        check(lib.ot_model_save_at(self._m, cpath(path), file, line))

    def load(self, path):
        file, line = site()
        check(lib.ot_model_load_at(self._m, cpath(path), file, line))
        return self


class _Borrowed(Tensor):
    """A tensor the model owns (never freed by Python); keeps the model."""
    __slots__ = ("_owner",)

    def __del__(self):
        pass


def check_count(n):
    if n < 0:
        raise_error(n)
    return n
