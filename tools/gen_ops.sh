#!/bin/sh
# gen_ops.sh - writes the public op header from the private op table:
#     sh tools/gen_ops.sh [src/core/ops.def] > include/optree_ops.h
# The ot_op enum (explicit numbers, in table order), OT_OP_LIST(X) with the
# seven public columns, and the builder macros of the elementwise ops with
# their doc strings as comments. The Makefile reruns it when src/core/ops.def or
# this script changes; `make test` fails when the committed header is stale.
# POSIX sh and awk only: it must run wherever the library builds.
set -eu

DEF=${1:-src/core/ops.def}

awk '
# Comments go first (they may hold commas and parentheses), then the text
# of each OT_OP( ... ) call is collected until its parentheses balance.
function strip_comments(s,    out, i, c) {
    out = ""
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 2)
        if (incomment) {
            if (c == "*/") { incomment = 0; i++ }
            continue
        }
        if (c == "/*") { incomment = 1; i++; continue }
        out = out substr(s, i, 1)
    }
    return out
}

# Splits the argument text of one call at top-level commas into col[1..n].
function split_args(s,    n, depth, instr, cur, i, ch) {
    n = 0; depth = 0; instr = 0; cur = ""
    for (i = 1; i <= length(s); i++) {
        ch = substr(s, i, 1)
        if (instr) {
            cur = cur ch
            if (ch == "\\") { cur = cur substr(s, ++i, 1); continue }
            if (ch == "\"") instr = 0
            continue
        }
        if (ch == "\"") instr = 1
        else if (ch == "(") depth++
        else if (ch == ")") depth--
        if (ch == "," && depth == 0) { col[++n] = trim(cur); cur = ""; continue }
        cur = cur ch
    }
    col[++n] = trim(cur)
    return n
}

function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }

# Paren depth of s, strings skipped.
function depth_of(s,    d, i, ch, instr) {
    d = 0; instr = 0
    for (i = 1; i <= length(s); i++) {
        ch = substr(s, i, 1)
        if (instr) { if (ch == "\\") i++; else if (ch == "\"") instr = 0; continue }
        if (ch == "\"") instr = 1
        else if (ch == "(") d++
        else if (ch == ")") d--
    }
    return d
}

function fail(msg) { print "gen_ops.sh: " FILENAME ": " msg > "/dev/stderr"; bad = 1; exit 1 }

function row(text,    n, flags, ename, nm, kind, rule, ref, grad, doc) {
    sub(/^[ \t]*OT_OP\(/, "", text)
    sub(/\)[ \t]*$/, "", text)
    n = split_args(text)
    if (n != 20) fail("row " nrow + 1 " has " n " columns, not 20: " text)
    ename = col[1]; nm = col[2]; kind = col[4]; rule = col[5]; ref = col[6]; grad = col[13]
    user = col[8] == "USER"
    doc = col[18]
    if (kind !~ /^(UNARY|BINARY|REDUCE|DOT|SHAPE|SPECIAL|COMPOSITE|CONV)$/) fail(ename ": kind " kind)
    if (rule !~ /^(SAME|FLOAT|COMPARE|INDEX)$/) fail(ename ": rule " rule)
    if (grad !~ /^(NONE|UN|BIN|FN)$/) fail(ename ": grad " grad)
    if (col[19] !~ /^(-|ATTRS\([A-Z_, ]+\))$/) fail(ename ": attrs " col[19])
    if (col[20] !~ /^(NULL|".*")$/) fail(ename ": peer " col[20])
    if (seen[ename]++) fail(ename ": twice")
    flags = rule == "SAME" ? "" : "OT_FLAG_" rule
    if (grad == "NONE") flags = flags == "" ? "OT_FLAG_NODIFF" : flags " | OT_FLAG_NODIFF"
    if (user) flags = flags == "" ? "OT_FLAG_CUSTOM" : flags " | OT_FLAG_CUSTOM"
    if (flags == "") flags = "0"
    if (ref == "-") ref = "none"
    else { ref = nm; gsub(/"/, "", ref) }
    nrow++
    E[nrow] = ename; NAME[nrow] = nm; KIND[nrow] = kind; DOC[nrow] = doc
    # A placeholder of registered ops has no builder of its own (ot_apply).
    if (user) KIND[nrow] = "USER"
    LIST[nrow] = "X(" ename ", " nm ", " col[3] ", OT_KIND_" kind ", " col[16] ", " flags ", " ref ")"
}

{
    line = strip_comments($0)
    if (!collecting && line ~ /^[ \t]*OT_OP\(/) { collecting = 1; buf = "" }
    if (!collecting) {
        if (line !~ /^[ \t]*$/) fail("line " FNR " is not part of a row: " line)
        next
    }
    buf = buf " " line
    if (depth_of(buf) == 0) { row(buf); collecting = 0 }
}

function builder(i, arity,    lname, doc, s) {
    lname = NAME[i]; gsub(/"/, "", lname)
    s = arity == 1 ? "#define ot_" lname "(x) OT__UN(OT_OP_" E[i] ", x)" \
                   : "#define ot_" lname "(x, y) OT__BIN(OT_OP_" E[i] ", x, y)"
    doc = DOC[i]; gsub(/^"|"$/, "", doc)
    if (doc != "") s = sprintf("%-48s /* %s */", s, doc)
    print s
}

END {
    if (bad) exit 1
    if (collecting) fail("unterminated row at the end")
    print "/*"
    print " * optree_ops.h - generated from src/core/ops.def by tools/gen_ops.sh; do not"
    print " * edit (make regenerates it). Included by optree.h, never on its own."
    print " *"
    print " * Public op numbers are append-only: a new op is added at the end of"
    print " * src/core/ops.def, and an existing op keeps its number in every release."
    print " */"
    print "#ifndef OPTREE_OPS_H"
    print "#define OPTREE_OPS_H"
    print ""
    print "/* The ops: X(ENUM, name, arity, kind, symbol, flags, ref), where symbol is"
    print " * the infix form used by ot_pp (or NULL) and ref is the op'"'"'s name where"
    print " * the reference backend (src/ref/ref.c) evaluates it elementwise from the"
    print " * table'"'"'s formula, none where it evaluates the op structurally. */"
    print "#define OT_OP_LIST(X) \\"
    for (i = 1; i <= nrow; i++) print "    " LIST[i] (i < nrow ? " \\" : "")
    print ""
    print "typedef enum ot_op {"
    print "    OT_OP_NONE = -1,"
    for (i = 1; i <= nrow; i++) print "    OT_OP_" E[i] " = " i - 1 ","
    print "    OT_OP_COUNT = " nrow
    print "} ot_op;"
    print ""
    print "/* Unary elementwise. */"
    for (i = 1; i <= nrow; i++) if (KIND[i] == "UNARY") builder(i, 1)
    print ""
    print "/* Binary elementwise, NumPy broadcasting. Compares give 1 or 0. minimum and"
    print " * maximum propagate NaN. */"
    for (i = 1; i <= nrow; i++) if (KIND[i] == "BINARY") builder(i, 2)
    print ""
    print "#endif /* OPTREE_OPS_H */"
}
' "$DEF"
