/*
 * fuzz_inputs.c - libFuzzer targets for the inputs optree takes from
 * outside: built once per target with -DFUZZ_TARGET_<name> and
 * -fsanitize=fuzzer,address,undefined (make fuzz-inputs, which runs each
 * from its seed corpus in tools/fuzz_seeds/<name>/):
 *
 *   parse  the bytes, up to the first NUL, as an ot_parse expression over
 *          a, b (f32 3x4) and i (i32 3); the tree is built, then dropped
 *   load   the bytes as a file read by ot_load and by ot_loadz (every
 *          entry, then two by name)
 *   model  the bytes as a file read by ot_model_load into a 2-3-2 model
 *
 * A failed call must leave a code and a message; ASan and UBSan watch
 * every read, and LeakSanitizer what is left allocated.
 */
#define _DEFAULT_SOURCE   /* mkstemp */
#include "optree.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A failure must say what it is. */
static void check_error(void)
{
    if (ot_errcode() == 0 || !*ot_errmsg()) {
        fprintf(stderr, "fuzz_inputs: a call failed with no error recorded\n");
        abort();
    }
}

#if defined(FUZZ_TARGET_parse)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ot_backend *be;
    static ot_tensor *t[3];
    static ot_node *nodes[3];
    static const char *const names[] = {"a", "b", "i"};
    if (!be) {
        be = ot_backend_new("ref", NULL);
        t[0] = ot_full(be, OT_SHAPE(3, 4), OT_F32, 1.5);
        t[1] = ot_full(be, OT_SHAPE(3, 4), OT_F32, -0.5);
        t[2] = ot_zeros(be, OT_SHAPE(3), OT_I32);
        for (int k = 0; k < 3; k++)
            nodes[k] = ot_tensor_node(t[k]);   /* leaf nodes live with their tensors */
    }
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    ot_pool *pool = ot_pool_push();
    if (!ot_parse(text, 3, names, nodes))
        check_error();
    ot_pool_pop(pool);
    free(text);
    return 0;
}

#else

/* The bytes as a file: one path per process, rewritten for each input. */
static const char *as_file(const uint8_t *data, size_t size)
{
    static char path[] = "/tmp/ot_fuzz_inputs_XXXXXX";
    static int fd = -1;
    if (fd < 0 && (fd = mkstemp(path)) < 0)
        abort();
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();
    return path;
}

#if defined(FUZZ_TARGET_load)

static void free_all(ot_tensor *out[], int n)
{
    for (int i = 0; i < n; i++)
        ot_tensor_free(out[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ot_backend *be;
    if (!be)
        be = ot_backend_new("ref", NULL);
    const char *path = as_file(data, size);
    ot_tensor *t = ot_load(be, path), *out[4] = {NULL};
    if (!t)
        check_error();
    ot_tensor_free(t);
    int count = ot_loadz(be, path, 0, NULL, NULL);
    if (count < 0) {
        check_error();
        return 0;
    }
    int n = count < 4 ? count : 4;
    if (ot_loadz(be, path, n, NULL, out) < 0)
        check_error();
    free_all(out, n);
    if (ot_loadz(be, path, 2, (const char *[]){"w0", "b0"}, out) < 0)
        check_error();
    free_all(out, 2);
    return 0;
}

#elif defined(FUZZ_TARGET_model)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ot_backend *be;
    static ot_model *m;
    if (!m) {
        be = ot_backend_new("ref", NULL);
        m = ot_model_new(be, 2);
        if (!m || ot_model_linear(m, 3, OT_ACT_RELU, 1) != 0 ||
            ot_model_linear(m, 2, OT_ACT_NONE, 2) != 0)
            abort();
    }
    if (ot_model_load(m, as_file(data, size)) != 0)
        check_error();
    return 0;
}

#else
#error "define FUZZ_TARGET_parse, FUZZ_TARGET_load or FUZZ_TARGET_model"
#endif
#endif
