/*
 * isa.h - the cpu backend's targets as data (as BLIS's arch_t and its
 * config table, libxsmm's ordered arch ids): one id per instruction set and
 * one list of what each is. Macros and an enum only, so any layer may
 * include it: config.c takes the names it parses from it,
 * src/cpu/kernels/dispatch.c makes the descriptor table (ot__isas, with the CPU
 * check and the kernel table) from it, and each k_<isa>.c asserts at
 * compile time that its isa_*.h states the same facts. The public option
 * ot_backend_opts.isa stays a string; inside the library an ISA is an
 * ot_isa, and an ISA name is compared only where one is parsed.
 */
#ifndef OT_ISA_H
#define OT_ISA_H

/* X(ID, name, fma, vbytes, jit, nregs, needs, arch), in id order:
 * name: as ot_backend_opts.isa and OT_ISA spell it; fma: the tile kernels
 * fuse a*b + c in one rounding (so the compiler emits OT_I_FMA); vbytes:
 * bytes per vector register; jit: code is generated for it (src/jit*.c,
 * x86-64 Linux builds); nregs: vector registers (0: no vector unit
 * assumed); needs: what a CPU must have, and arch: the architecture whose
 * builds have it, for messages. */
#define OT__ISAS(X)                                                        \
    X(SCALAR, scalar, 0, 4, 0, 0, "nothing", "any")                        \
    X(SSE2, sse2, 0, 16, 0, 16, "sse2", "x86")                             \
    X(AVX2, avx2, 1, 32, 1, 16, "avx2 and fma", "x86")                     \
    X(AVX512, avx512, 1, 64, 1, 32, "avx512f", "x86")                      \
    X(NEON, neon, 1, 16, 0, 32, "neon", "aarch64")

#define OT__ISA_ID(ID, nm, fma, vb, jit, nr, needs, arch) OT_ISA_##ID,
typedef enum ot_isa { OT__ISAS(OT__ISA_ID) OT_ISA_COUNT } ot_isa;
#undef OT__ISA_ID

/* The same facts as integer constants named by the ISA's name
 * (OT__ISA_FMA_avx2 ...), for compile-time checks where the name is a
 * token (the kernels' OT_KISA). */
#define OT__ISA_FACTS(ID, nm, fma, vb, jit, nr, needs, arch)                 \
    OT__ISA_ID_##nm = OT_ISA_##ID, OT__ISA_FMA_##nm = fma, OT__ISA_VBYTES_##nm = vb, \
    OT__ISA_JIT_##nm = jit,
enum { OT__ISAS(OT__ISA_FACTS) OT__ISA_FACTS_END };
#undef OT__ISA_FACTS

#endif /* OT_ISA_H */
