"""gen_py.py - writes python/optree/_decls.py, the Python module's view of
the C API, from the library's own tables: the op table (src/core/ops.def:
name, arity, kind, dtype rule, gradient, infix symbol, attributes) and the
public headers (every `typedef struct ... { } name;` as a ctypes layout, the
status codes, the dtypes, the #define constants the module uses). The module
never spells a struct or an op by hand, so it cannot drift from the header.

    python3 tools/gen_py.py > python/optree/_decls.py   (the Makefile's rule)
    python3 tools/gen_py.py --check    fails when the committed file is stale
    python3 tools/gen_py.py --layout CC  compiles a C program printing each
        struct's sizeof and offsetof and compares them with ctypes' (a field
        the parser misread fails here)

A struct field of a type the generator does not know fails the generation:
a new kind of field is a decision, not a silent c_void_p.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "python", "optree", "_decls.py")
HEADERS = ["include/optree.h"] + sorted(
    "include/optree/" + f for f in os.listdir(os.path.join(ROOT, "include", "optree"))
    if f.endswith(".h"))

# C scalar types -> ctypes names.
SCALARS = {
    "int": "c_int", "unsigned": "c_uint", "int32_t": "c_int32", "int64_t": "c_int64",
    "uint32_t": "c_uint32", "uint64_t": "c_uint64", "bool": "c_bool", "double": "c_double",
    "float": "c_float", "size_t": "c_size_t", "ot_dtype": "c_int", "ot_op": "c_int",
    "char": "c_char", "uint8_t": "c_uint8",
}


def strip_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


def split_top(s, sep=","):
    """s split at top-level separators (outside parentheses, braces, strings)."""
    out, depth, cur, instr, i = [], 0, "", False, 0
    while i < len(s):
        ch = s[i]
        if instr:
            cur += ch
            if ch == "\\":
                cur += s[i + 1]
                i += 1
            elif ch == '"':
                instr = False
        elif ch == '"':
            instr, cur = True, cur + ch
        elif ch in "({[":
            depth, cur = depth + 1, cur + ch
        elif ch in ")}]":
            depth, cur = depth - 1, cur + ch
        elif ch == sep and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
        i += 1
    out.append(cur.strip())
    return out


def op_rows(path):
    """The rows of ops.def, each a list of its 20 columns."""
    text = strip_comments(open(path).read())
    rows = []
    for m in re.finditer(r"^\s*OT_OP\(", text, flags=re.M):
        i, depth = m.end(), 1
        start = i
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        cols = split_top(text[start:i - 1])
        if len(cols) != 20:
            sys.exit("gen_py.py: %s: a row of %d columns: %s" % (path, len(cols), cols[:2]))
        rows.append(cols)
    return rows


def ops_table(rows):
    ops = []
    for num, c in enumerate(rows):
        attrs = () if c[18] == "-" else tuple(
            a.strip().lower() for a in re.match(r"ATTRS\((.*)\)$", c[18]).group(1).split(","))
        ops.append((num, c[1].strip('"'), int(c[2]), c[3], c[4], c[12],
                    None if c[15] == "NULL" else c[15].strip('"'), c[7] == "USER", attrs,
                    None if c[19] == "NULL" else c[19][1:-1]))
    return ops


def defines(text):
    """#define NAME <integer> of the headers."""
    out = {}
    for m in re.finditer(r"^#define (OT_[A-Z0-9_]+) \(?(-?[0-9]+)u?\)?\s*$", text, flags=re.M):
        out[m.group(1)] = int(m.group(2))
    for m in re.finditer(r"^#define (OT_[A-Z0-9_]+) INT64_MIN\s*$", text, flags=re.M):
        out[m.group(1)] = -2 ** 63
    return out


def statuses(text):
    m = re.search(r"typedef enum ot_status \{(.*?)\} ot_status;", text, flags=re.S)
    return [(n, int(v)) for n, v in re.findall(r"(OT_[A-Z]+) = (-?\d+)", m.group(1))]


def field_type(ctype, consts, structs):
    ctype = re.sub(r"\bconst\b", "", ctype).strip()
    if ctype.endswith("*"):
        base = ctype.rstrip("*").strip()
        return "c_char_p" if base == "char" and ctype.count("*") == 1 else "c_void_p"
    if ctype in SCALARS:
        return SCALARS[ctype]
    if ctype in structs:
        return ctype
    raise ValueError("unknown field type " + repr(ctype))


def parse_fields(body, consts, structs, name):
    fields = []
    for decl in [d.strip() for d in strip_comments(body).split(";") if d.strip()]:
        decl = " ".join(decl.split())
        fp = re.match(r"^.*\(\s*\*\s*(\w+)\s*\)\s*\(.*\)$", decl)
        if fp:                                  # a function pointer
            fields.append((fp.group(1), "c_void_p"))
            continue
        m = re.match(r"^((?:const\s+)?(?:struct\s+)?\w+(?:\s+const)?)\s+(.*)$", decl)
        if not m:
            sys.exit("gen_py.py: %s: cannot read field %r" % (name, decl))
        base, rest = m.group(1).replace("struct ", ""), m.group(2)
        for d in split_top(rest):
            dm = re.match(r"^((?:\*|\s*const\b\s*)*)\s*(\w+)((?:\[\w+\])*)$", d.strip())
            if not dm:
                sys.exit("gen_py.py: %s: cannot read declarator %r" % (name, d))
            try:
                t = field_type(base + " " + dm.group(1).replace("const", ""), consts, structs)
            except ValueError as e:
                sys.exit("gen_py.py: %s.%s: %s (teach tools/gen_py.py)" % (name, dm.group(2), e))
            for dim in reversed(re.findall(r"\[(\w+)\]", dm.group(3))):
                n = int(dim) if dim.isdigit() else consts[dim]
                t = "%s * %d" % (t, n)
            fields.append((dm.group(2), t))
    return fields


def struct_layouts(text, consts):
    # Function-pointer and enum typedefs are plain words in fields.
    for m in re.finditer(r"typedef [^;{]*?\(\*\s*(\w+)\)\s*\(", text):
        SCALARS[m.group(1)] = "c_void_p"
    for m in re.finditer(r"typedef enum \w* ?\{[^}]*\} (\w+);", text):
        SCALARS.setdefault(m.group(1), "c_int")
    structs = {}
    for m in re.finditer(r"typedef struct (\w+) \{(.*?)\n\} (\w+);", text, flags=re.S):
        structs[m.group(1)] = parse_fields(m.group(2), consts, structs, m.group(1))
    return structs


def prototypes(text, structs):
    """Every function declared at column 0 of the headers (not the inline
    ones): name -> (restype, [argtypes]), pointers as c_void_p but char *
    as c_char_p, a function pointer as c_void_p."""
    protos = {}
    flat = strip_comments(text)
    for m in re.finditer(r"^([A-Za-z_][\w \*]*?)\(?\b(ot_\w+)\)?\(([^;{]*?)\);", flat, flags=re.M):
        ret, name, args = m.group(1).strip(), m.group(2), " ".join(m.group(3).split())
        if ret.startswith(("typedef", "static", "#", "return")):
            continue
        try:
            rt = "None" if ret == "void" else field_type(ret, {}, structs)
            ats = []
            for a in ([] if args in ("void", "") else split_top(args)):
                if "(" in a:
                    ats.append("c_void_p")
                    continue
                a = re.sub(r"\[\w*\]$", " *", a)        # an array parameter is a pointer
                am = re.match(r"^(.*?[\s\*])(\w+)$", a) if re.search(r"\w\s*$", a) and " " in a else None
                ctype = am.group(1) if am and am.group(2) not in SCALARS and am.group(2) not in structs \
                    and am.group(1).strip() not in ("", "const") else a
                ats.append(field_type(ctype.strip(), {}, structs))
        except ValueError:
            continue                                   # a type the module cannot call
        protos[name] = (rt, ats)
    return protos


def generate():
    text = "\n".join(open(os.path.join(ROOT, h)).read() for h in HEADERS)
    consts = defines(text)
    ops = ops_table(op_rows(os.path.join(ROOT, "src/core/ops.def")))
    structs = struct_layouts(text, consts)
    dtypes = re.search(r"typedef enum ot_dtype \{(.*?)\} ot_dtype;", text, re.S).group(1)
    out = ['"""_decls.py - GENERATED by tools/gen_py.py from src/core/ops.def and the',
           'public headers; do not edit (make regenerates it, make test checks it)."""',
           "from ctypes import (Structure, c_bool, c_char, c_char_p, c_double, c_float, c_int,",
           "                    c_int32, c_int64, c_size_t, c_uint, c_uint8, c_uint32, c_uint64,",
           "                    c_void_p)", "", "# #define constants of the headers."]
    for k in sorted(consts):
        out.append("%s = %d" % (k, consts[k]))
    out += ["", "# The status codes: (name, code)."]
    out.append("STATUSES = %r" % (statuses(text),))
    out.append("DTYPES = %r" % ([(n, int(v)) for n, v in re.findall(r"(OT_\w+) = (\d+)", dtypes)],))
    out += ["", "# The op table: (number, name, arity, kind, rule, grad, infix, user, attrs, NumPy peer)."]
    out.append("OPS = [")
    out += ["    %r," % (o,) for o in ops]
    out.append("]")
    out += ["", "# Every public struct, in header order (ctypes layouts)."]
    for name, fields in structs.items():
        out.append("")
        out.append("class %s(Structure):" % name)
        out.append("    _fields_ = [")
        out += ["        (%r, %s)," % (f, t) for f, t in fields]
        out.append("    ]")
    out.append("")
    out.append("STRUCTS = [%s]" % ", ".join(structs))
    out += ["", "# Every function of the headers the module can call: name -> (restype, argtypes)."]
    out.append("PROTOS = {")
    for name, (rt, ats) in sorted(prototypes(text, structs).items()):
        out.append("    %r: (%s, [%s])," % (name, rt, ", ".join(ats)))
    out.append("}")
    return "\n".join(out) + "\n", structs


def layout_check(cc):
    """sizeof/offsetof of every struct and field, C against ctypes."""
    src, structs = generate()
    ns = {}
    exec(compile(src, "_decls.py", "exec"), ns)
    lines = ["#include <optree.h>", "#include <stddef.h>", "#include <stdio.h>", "int main(void) {"]
    for name, fields in structs.items():
        lines.append('printf("%s %%zu\\n", sizeof(%s));' % (name, name))
        for f, _ in fields:
            lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (name, f, name, f))
    lines.append("return 0; }")
    with tempfile.TemporaryDirectory() as d:
        c, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
        open(c, "w").write("\n".join(lines) + "\n")
        subprocess.check_call([cc, "-std=c11", "-I" + os.path.join(ROOT, "include"), c, "-o", exe])
        got = subprocess.check_output([exe]).decode().split("\n")
    bad = 0
    for line in filter(None, got):
        key, val = line.split()
        if "." in key:
            s, f = key.split(".")
            mine = getattr(ns[s], f).offset
        else:
            mine = __import__("ctypes").sizeof(ns[key])
        if mine != int(val):
            print("layout: %s is %s in C, %d in the module" % (key, val, mine))
            bad += 1
    print("layout: %d structs, %d fields checked, %d differ" %
          (len(structs), sum(len(f) for f in structs.values()), bad))
    return bad


def main(argv):
    if argv[:1] == ["--check"]:
        src, _ = generate()
        if open(OUT).read() != src:
            print("gen_py.py: python/optree/_decls.py is stale: run make (or "
                  "python3 tools/gen_py.py > python/optree/_decls.py)")
            return 1
        return 0
    if argv[:1] == ["--layout"]:
        return 1 if layout_check(argv[1] if len(argv) > 1 else "cc") else 0
    sys.stdout.write(generate()[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
