/*
 * error.c - the thread-local error slot, status strings, the handler and
 * the run-time version, and the one error message of evaluation all backends
 * share (an int32 sum that does not fit).
 *
 * Builders keep the first error of an expression (so a NULL that flows up a
 * tree still reports its root cause); functions that do work replace it.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define OT__MSG_MAX 512

typedef struct err_slot {
    int code;
    bool placed;          /* msg starts with a file:line */
    char msg[OT__MSG_MAX];
    ot_error_handler handler;
    void *user;
} err_slot;

static _Thread_local err_slot slot;
/* The place of the public call running on this thread (ot__site_enter),
 * for errors recorded without one. */
static _Thread_local ot__callsite site;

static const char *const status_text[] = {
    [0] = "success",
    [-OT_EINVAL] = "invalid argument",
    [-OT_ESHAPE] = "shape mismatch",
    [-OT_EDTYPE] = "unsupported or mismatched dtype",
    [-OT_ENOMEM] = "out of memory",
    [-OT_EALIAS] = "output overlaps itself or another output",
    [-OT_EBACKEND] = "unknown or unavailable backend",
    [-OT_EUNSUPPORTED] = "not supported",
    [-OT_ENULL] = "NULL argument",
    [-OT_EOVERFLOW] = "size overflow",
    [-OT_EEMPTY] = "zero-size reduction without identity",
    [-OT_ESTATE] = "call out of order",
    [-OT_EIO] = "write failed",
    [-OT_EINTERNAL] = "internal check failed",
};

const char *ot_version(void)
{
    return OT_VERSION;
}

const char *ot_strerror(int code)
{
    if (code > 0 || -code >= (int)(sizeof status_text / sizeof status_text[0]))
        return "unknown status";
    return status_text[-code];
}

int ot_errcode(void) { return slot.code; }
const char *ot_errmsg(void) { return slot.msg; }

void ot_clear_error(void)
{
    slot.code = 0;
    slot.placed = false;
    slot.msg[0] = '\0';
}

void ot_set_error_handler(ot_error_handler fn, void *user)
{
    slot.handler = fn;
    slot.user = user;
}

/* notify: call the handler (not for a message reworded: ot__err_reword). */
static int record(int code, const char *file, int line, const char *op, bool notify,
                  const char *fmt, va_list ap)
{
    size_t n = 0;
    if (!file) file = site.file, line = site.line;
    if (file)
        n += (size_t)snprintf(slot.msg, sizeof slot.msg, "%s:%d: ", file, line);
    if (op && n < sizeof slot.msg)
        n += (size_t)snprintf(slot.msg + n, sizeof slot.msg - n, "%s: ", op);
    if (n < sizeof slot.msg)
        vsnprintf(slot.msg + n, sizeof slot.msg - n, fmt, ap);
    slot.code = code;
    slot.placed = file != NULL;
    if (notify && slot.handler)
        slot.handler(code, slot.msg, slot.user);
    return code;
}

/* The variadic recorders' one body: their arguments to record. */
#define RECORD_ARGS(notify)                                                   \
    do {                                                                      \
        va_list ap;                                                           \
        va_start(ap, fmt);                                                    \
        record(code, file, line, op, (notify), fmt, ap);                      \
        va_end(ap);                                                           \
    } while (0)

int ot__err(int code, const char *file, int line, const char *op, const char *fmt, ...)
{
    if (slot.code != 0)
        return code;
    RECORD_ARGS(true);
    return code;
}

int ot__err_set(int code, const char *file, int line, const char *op, const char *fmt, ...)
{
    RECORD_ARGS(true);
    return code;
}

int ot__err_reword(int code, const char *file, int line, const char *op, const char *fmt, ...)
{
    RECORD_ARGS(false);
    return code;
}

ot__callsite ot__site_enter(const char *file, int line)
{
    ot__callsite outer = site;
    if (file) site = (ot__callsite){file, line};
    return outer;
}

bool ot__site_placed(void) { return site.file != NULL; }

void ot__site_leave(ot__callsite outer)
{
    site = outer;
}

/* msg past a leading "file:line: " of this place (none: msg). */
static const char *past_place(const char *msg, const char *file, int line)
{
    if (!file) return msg;
    char prefix[OT__MSG_MAX];
    int n = snprintf(prefix, sizeof prefix, "%s:%d: ", file, line);
    return n > 0 && strncmp(msg, prefix, (size_t)n) == 0 ? msg + n : msg;
}

const char *ot__site_strip(const char *msg) { return past_place(msg, site.file, site.line); }

void ot__err_place(const char *file, int line)
{
    if (!file || !slot.code || slot.placed) return;
    char inner[OT__MSG_MAX];
    snprintf(inner, sizeof inner, "%s", slot.msg);
    ot__err_reword(slot.code, file, line, NULL, "%s", inner);
}

int ot__err_relabel(int code, const char *file, int line, const char *op)
{
    char inner[OT__MSG_MAX];   /* the inner message named the caller already: once */
    snprintf(inner, sizeof inner, "%s", past_place(slot.msg, file, line));
    size_t n = op ? strlen(op) : 0;   /* and the caller's op (its own error): once */
    bool named = n && strncmp(inner, op, n) == 0 && strncmp(inner + n, ": ", 2) == 0;
    return ot__err_reword(code, file, line, op, "%s", named ? inner + n + 2 : inner);
}

int ot__err_null(const char *fn, const char *what)
{
    if (slot.code != 0)
        return slot.code;
    return ot__err_set(OT_ENULL, NULL, 0, fn, "%s is NULL", what);
}

/* An error of evaluation that every backend reports in the same words:
 * ref and the cpu executor both find int32 sums that do not fit. */
int ot__int_sum_overflow(const ot_node *n)
{
    char s[OT__SHAPE_STRLEN], ax[24] = "all axes";
    if (n->args.axis != OT_AXIS_ALL) snprintf(ax, sizeof ax, "axis %d", n->args.axis);
    ot_op op = (ot_op)(n->tag != OT_OP_NONE ? n->tag : n->op);   /* squared_l2's own name */
    return ot__err_set(OT_EOVERFLOW, n->file, n->line, ot_op_name(op),
                       "the int32 sum over %s of shape %s does not fit int32 (it would wrap); "
                       "cast the operand to f64 first", ax, ot__shape_str(&n->a->shape, s));
}
