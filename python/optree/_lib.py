"""_lib.py - finds and loads liboptree.so, declares its functions from the
generated prototypes (_decls.PROTOS), and owns the module's errors, the
caller's file:line and the capture of what the library prints to a FILE *.

The library is looked for in this order: $OPTREE_LIB; build/liboptree.so of
the checkout this package sits in (python/optree -> ../../build); the
library installed beside an installed package (PREFIX/lib, as `make
install` lays them out); then the loader's own search (liboptree.so.N).
"""
import ctypes
import ctypes.util
import os
import sys

from . import _decls

_HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("OPTREE_LIB")
    if env:
        yield env
    yield os.path.join(_HERE, "..", "..", "build", "liboptree.so")
    # PREFIX/lib/pythonX.Y/dist-packages/optree -> PREFIX/lib
    up = _HERE
    for _ in range(4):
        up = os.path.dirname(up)
        yield os.path.join(up, "liboptree.so")
        yield os.path.join(up, "lib", "liboptree.so")
    found = ctypes.util.find_library("optree")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError("optree: liboptree.so not found (run make, or set OPTREE_LIB); tried: "
                      + ", ".join(tried))


lib = _load()
for _name, (_rt, _ats) in _decls.PROTOS.items():
    _fn = getattr(lib, _name, None)
    if _fn is not None:         # the MPI functions live in another library
        _fn.restype = _rt
        _fn.argtypes = _ats

# The C library's stdio, for ot_print and friends (they write to a FILE *).
_libc = ctypes.CDLL(None)
_libc.open_memstream.restype = ctypes.c_void_p
_libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t)]
_libc.fclose.argtypes = [ctypes.c_void_p]
_libc.free.argtypes = [ctypes.c_void_p]


def capture(fn, *args):
    """What fn(*args, FILE *) writes, as a str; raises on a non-zero status."""
    buf, size = ctypes.c_char_p(), ctypes.c_size_t()
    f = _libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not f:
        raise MemoryError("open_memstream")
    rc = fn(*args, f)
    _libc.fclose(f)
    text = ctypes.string_at(buf, size.value).decode("utf-8", "replace")
    _libc.free(buf)
    if rc:
        raise_error(rc)
    return text


# ---------------------------------------------------------------- errors

class OptreeError(Exception):
    """An error the library reported: .code (an OT_E* status), .message
    (the library's text, which names the Python file:line that built or
    assigned the failing node)."""

    code = None

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


# Spellings that read better than the rule's (OT_EINVAL -> InvalError).
_NAMES = {"OT_EINVAL": "InvalidError", "OT_ENOMEM": "NoMemoryError", "OT_EOVERFLOW": "SizeOverflowError"}
# The built-in exception each code is also, so `except ValueError` works.
_BUILTIN = {"OT_EINVAL": ValueError, "OT_ESHAPE": ValueError, "OT_EDTYPE": TypeError,
            "OT_ENOMEM": MemoryError, "OT_EOVERFLOW": OverflowError, "OT_EIO": OSError,
            "OT_ENULL": ValueError}


def _class_name(status):      # OT_ESHAPE -> ShapeError, OT_EUNSUPPORTED -> UnsupportedError
    return _NAMES.get(status) or status[4:].capitalize() + "Error"


# One subclass per status code of the header, generated from it.
ERRORS = {}
for _status, _code in _decls.STATUSES:
    if _code == 0:
        continue
    _base = (OptreeError,) + ((_BUILTIN[_status],) if _status in _BUILTIN else ())
    _cls = type(_class_name(_status), _base, {"code": _code, "__doc__": "%s (%d)" % (_status, _code)})
    ERRORS[_code] = _cls
    globals()[_cls.__name__] = _cls
ERROR_CLASSES = [ERRORS[c] for c in sorted(ERRORS, reverse=True)]


def raise_error(code=None):
    """Raises the exception of the error slot (or of code)."""
    slot = lib.ot_errcode()
    if code is None or code == slot:
        code = slot
        msg = (lib.ot_errmsg() or b"").decode("utf-8", "replace")
    else:
        msg = ""
    if not msg:
        msg = (lib.ot_strerror(code) or b"error").decode()
    lib.ot_clear_error()
    raise ERRORS.get(code, OptreeError)(msg, code)


def check(rc):
    if rc:
        raise_error(rc)
    return rc


# ---------------------------------------------------------------- call sites

_files = {}          # code object -> its file as bytes (None: this package's)
_PKG = _HERE + os.sep
_getframe = sys._getframe


def site(depth=2):
    """(file, line) of the first frame outside this package, depth frames
    up at the least: the file as bytes kept as long as the process (the
    library keeps the pointer in every node built there)."""
    f = _getframe(depth)
    while True:
        code = f.f_code
        c = _files.get(code)
        if c is None:
            name = code.co_filename
            c = _files[code] = b"" if name.startswith(_PKG) else name.encode("utf-8", "replace")
        if c:
            return c, f.f_lineno
        f = f.f_back
