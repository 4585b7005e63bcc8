/*
 * optree/io.h - saving and loading tensors as NumPy's .npy and
 * .npz files.
 *
 * Part of the public API: optree.h includes this header at its end, so
 * #include <optree.h> is all a program needs; included on its own it
 * includes optree.h first.
 */
#include "../optree.h"

#ifndef OPTREE_IO_H
#define OPTREE_IO_H

/* ------------------------------------------------------------------------ */
/* Saving and loading tensors                                                */
/* ------------------------------------------------------------------------ */

/* NumPy's .npy: one tensor per file, format 1.0 as numpy.save writes it
 * (dtypes '<f4', '<f8', '<i4', C order), so np.load reads the file and
 * ot_load reads numpy.save's, values bit for bit. A view is saved as its
 * logical contents.
 * Saving never loses the old file (ot_save, ot_savez, ot_savez_compressed,
 * ot_model_save): the bytes go to a new temporary file in the target's
 * directory (the target's name + ".tmp" + 6 random characters), which is
 * fsync'ed and then renamed over the target, so on any failure the old
 * file is untouched and the temporary removed. The new file has the old
 * one's permission bits, or 0666 less the umask if there was none. A
 * symbolic link is followed (the file it points to is replaced, the link
 * stays); an existing file the process may not write (mode 0444) is
 * refused, as fopen refuses it; an existing target that is not a regular
 * file (/dev/null, a FIFO) is written in place. Returns 0, OT_ENULL, OT_EIO (naming the path
 * and errno's text), OT_ENOMEM. */
int ot_save(const char *path, const ot_tensor *t);
/* Each ..._at below is its function with the caller's file:line, which
 * its errors name; the plain name is a macro over it (optree.h). */
int ot_save_at(const char *path, const ot_tensor *t, const char *file, int line);
#define ot_save(...) ot_save_at(__VA_ARGS__, __FILE__, __LINE__)
/* A new contiguous tensor on be with the file's shape and dtype. Formats
 * 1.0, 2.0 and 3.0 are read; a Fortran-order array is loaded in C order.
 * '<i8' (NumPy's default integer) is loaded as OT_I32 when every value
 * fits, else OT_EOVERFLOW naming the first value that does not.
 * NULL on error, with nothing allocated: OT_EIO (cannot open or read, bad
 * magic - an .npz is named as such: read it with ot_loadz -, a malformed
 * header, a file shorter or longer than the shape says), OT_EUNSUPPORTED
 * (big-endian or another dtype, more than OT_MAX_DIMS dims), OT_EOVERFLOW,
 * OT_ENOMEM. */
ot_tensor *ot_load(ot_backend *be, const char *path);
ot_tensor *ot_load_at(ot_backend *be, const char *path, const char *file, int line);
#define ot_load(...) ot_load_at(__VA_ARGS__, __FILE__, __LINE__)

/* NumPy's .npz (numpy.savez): a zip of one .npy per tensor, entry
 * names[i] + ".npy" (np.load(path)[names[i]]), stored uncompressed.
 * Names are unique, not empty. Tensors of several backends may be saved
 * together. The archive is built in memory (libzip), then written as
 * ot_save writes. */
int ot_savez(const char *path, int n, const char *const names[],
             const ot_tensor *const tensors[]);
int ot_savez_at(const char *path, int n, const char *const names[],
                const ot_tensor *const tensors[], const char *file, int line);
#define ot_savez(...) ot_savez_at(__VA_ARGS__, __FILE__, __LINE__)
/* The same with every entry deflated, as numpy.savez_compressed writes. */
int ot_savez_compressed(const char *path, int n, const char *const names[],
                        const ot_tensor *const tensors[]);
int ot_savez_compressed_at(const char *path, int n, const char *const names[],
                           const ot_tensor *const tensors[], const char *file, int line);
#define ot_savez_compressed(...) ot_savez_compressed_at(__VA_ARGS__, __FILE__, __LINE__)
/* Loads n entries of an .npz (numpy.savez's or numpy.savez_compressed's:
 * stored and deflated entries, zip64 included): names[i] (without ".npy",
 * or with it as NumPy's NpzFile takes it: an entry of that very name first),
 * or with names NULL the first n entries in file order, into out[i] (new
 * tensors the caller frees). Returns the number of entries in the file (so
 * n = 0 asks for it), or a negative code with every out[i] NULL: OT_EINVAL
 * for a name not in the file, OT_EUNSUPPORTED for encrypted entries and
 * other compression methods, and ot_load's errors (a corrupt archive or a
 * CRC that does not match is OT_EIO). */
int ot_loadz(ot_backend *be, const char *path, int n, const char *const names[],
             ot_tensor *out[]);
int ot_loadz_at(ot_backend *be, const char *path, int n, const char *const names[],
                ot_tensor *out[], const char *file, int line);
#define ot_loadz(...) ot_loadz_at(__VA_ARGS__, __FILE__, __LINE__)

#endif /* OPTREE_IO_H */
