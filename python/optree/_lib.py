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
import operator
import os
import re
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
# The built-in exception each code is also, so `except ValueError` works
# (OT_EEMPTY, max of zero elements, is NumPy's "zero-size array to
# reduction operation maximum which has no identity", a ValueError).
_BUILTIN = {"OT_EINVAL": ValueError, "OT_ESHAPE": ValueError, "OT_EDTYPE": TypeError,
            "OT_ENOMEM": MemoryError, "OT_EOVERFLOW": OverflowError, "OT_EIO": OSError,
            "OT_ENULL": ValueError, "OT_EEMPTY": ValueError}


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


# A message that names a place starts "file:line: " (the library's form).
_PLACED = re.compile(r"[^:\n]+:\d+: ")


def raise_error(code=None, at=None):
    """Raises the exception of the error slot (or of code). at, the
    caller's (file, line), is put before a message that names no place
    (the library's functions without an _at twin: ot_load, ot_parse...).
    An exception a Python callback raised inside the call (a registered
    op's gradient rule, say) is its cause."""
    slot = lib.ot_errcode()
    if code is None or code == slot:
        code = slot
        msg = (lib.ot_errmsg() or b"").decode("utf-8", "replace")
    else:
        msg = ""
    if not msg:
        msg = (lib.ot_strerror(code) or b"error").decode()
    lib.ot_clear_error()
    if at is not None and at[0] and not _PLACED.match(msg):
        msg = "%s:%d: %s" % (at[0].decode("utf-8", "replace"), at[1], msg)
    cause = _take_pending()
    raise ERRORS.get(code, OptreeError)(msg, code) from cause


def check(rc, at=None):
    if rc:
        raise_error(rc, at)
    return rc


# ---------------------------------------------------------------- callbacks
#
# A Python function the library calls (a registered op's kernel, shape or
# gradient rule) must not let an exception unwind into C: ctypes would
# print it and hand C garbage. The callback keeps it here and returns what
# C reads as a failure; the module raises it when the library returns (the
# library's own error, if any, with this as its cause). A kernel cannot
# say it failed (ot_struct_kernel_fn returns void), so its exception is
# only ever raised here, after the call that ran it.

_pending = []


def keep_pending(exc):
    _pending.append(exc)


def _take_pending():
    if not _pending:
        return None
    exc = _pending[0]
    del _pending[:]
    return exc


def raise_pending():
    """Raises the exception a callback kept during the last call, if any."""
    if _pending:
        raise _take_pending()


# ---------------------------------------------------------------- C values
#
# ctypes stores a Python int into a C integer modulo its width (2**64 + 3
# as 3, axis 2**32 as 0) and a float into an integer field truncated, and
# passes a str with a NUL cut at the NUL: these check first, as NumPy and
# open() do.

_INT_TYPES = (ctypes.c_byte, ctypes.c_short, ctypes.c_int, ctypes.c_long, ctypes.c_longlong,
              ctypes.c_ubyte, ctypes.c_ushort, ctypes.c_uint, ctypes.c_ulong, ctypes.c_ulonglong)


def _int_range(ctype):
    bits = 8 * ctypes.sizeof(ctype)
    if ctype(-1).value == -1:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def c_integer(v, what, ctype=ctypes.c_int):
    """v as an integer of ctype: TypeError for what is not an integer
    (2.7, as NumPy's shapes), OverflowError for what ctypes would wrap."""
    try:
        v = operator.index(v)
    except TypeError:
        raise TypeError("optree: %s %r is not an integer" % (what, v)) from None
    lo, hi = _int_range(ctype)
    if not lo <= v <= hi:
        raise OverflowError("optree: %s %d does not fit %sint%d" % (
            what, v, "u" if lo == 0 else "", 8 * ctypes.sizeof(ctype)))
    return v


def set_field(s, name, v, what=None):
    """s.name = v for a ctypes struct, integers (and arrays of them)
    checked by c_integer, doubles by float()."""
    ctype = _field_type(type(s), name)
    what = what or name
    if issubclass(ctype, ctypes.Array) and ctype._type_ in _INT_TYPES:
        v = tuple(v) if isinstance(v, (tuple, list)) else (v,)
        if len(v) > ctype._length_:
            raise ValueError("optree: %s %r: at most %d values" % (what, v, ctype._length_))
        v = ctype(*[c_integer(x, what, ctype._type_) for x in v])
    elif ctype in _INT_TYPES:
        v = c_integer(v, what, ctype)
    elif ctype is ctypes.c_double:
        v = float(v)
    setattr(s, name, v)


def _field_type(cls, name):
    for f in cls._fields_:
        if f[0] == name:
            return f[1]
    raise AttributeError(name)


def make_struct(cls, **fields):
    """cls(**fields), each set by set_field."""
    s = cls()
    for k, v in fields.items():
        set_field(s, k, v)
    return s


def cstr(s, what="name"):
    """s (a str or bytes) as a C string; ValueError for a NUL in it, which
    C would read as its end; TypeError for anything else (bytes() of an int
    is that many NULs, of a list its numbers' characters)."""
    if not isinstance(s, (str, bytes, bytearray)):
        raise TypeError("optree: %s must be a str or bytes, not %s" % (what, type(s).__name__))
    b = s.encode() if isinstance(s, str) else bytes(s)
    if b"\0" in b:
        raise ValueError("optree: %s %r: embedded null byte" % (what, s))
    return b


def cpath(path):
    """A path (str, bytes, os.PathLike) as a C string, as open() takes it."""
    return cstr(os.fsencode(path), "path")


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
