/*
 * replace.h - replacing a file without ever losing it (replace.c): the
 * savers (io.c's ot_save and ot_savez, and through them ot_model_save)
 * write into a new temporary file beside the target and rename it over the
 * target only once every byte is written and synced.
 */
#ifndef OT_REPLACE_H
#define OT_REPLACE_H

#include <stddef.h>

/* A file being written: open with ot__replace_open, write with
 * ot__replace_write, end with ot__replace_end (always, even after a
 * failed write: it removes the temporary). */
typedef struct ot__replace ot__replace;

/* Starts writing path for fn (the op named in errors); NULL (recorded) on
 * error. */
ot__replace *ot__replace_open(const char *fn, const char *path);
/* Buffers or writes n bytes; an error code (recorded) on failure. */
int ot__replace_write(ot__replace *w, const void *p, size_t n);
/* With rc 0, flushes, syncs and renames the file over its target; with rc
 * an error, or when any of that fails, removes the temporary and leaves the
 * target as it was. Frees w; returns rc or the first error. */
int ot__replace_end(ot__replace *w, int rc);

/* Test hook: the nth system call of the writers on this thread from now
 * (access, open, write, fsync, fchmod, close, rename; 1 is the next) fails with
 * errno err; n = 0 disarms it. ot__replace_calls counts those calls since
 * the hook was last set, so a test can walk every failure point. */
void ot__replace_fail_at(long n, int err);
long ot__replace_calls(void);

#endif
