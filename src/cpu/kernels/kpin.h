/*
 * kpin.h - add, mul and fma with pinned operand order for the VEX and EVEX
 * tile kernels (isa_avx2.h, isa_avx512.h), so that the tile interpreter and
 * src/cpu/jit/jit.c's generated code return the same NaN.
 */
#ifndef OT_KPIN_H
#define OT_KPIN_H

/* add, mul and fma in a fixed operand order: where two operands are NaN,
 * the result is the first source's NaN, and the compiler swaps the
 * operands of the intrinsics at will, so which NaN (its sign included)
 * came out of a tile kernel depended on register allocation. Pinned, a
 * is the first source of vadd/vmul and a*b + c is vfmadd231 with c as its
 * destination, as src/cpu/jit/jit.c emits them, so that generated code gives the
 * very same NaN. */
#define OT_KPIN2(insn, a, b)                                                       \
    __extension__({                                                                \
        __typeof__(a) r_;                                                          \
        __asm__(insn " %2, %1, %0" : "=v"(r_) : "v"(a), "vm"(b));                  \
        r_;                                                                        \
    })
#define OT_KPIN3(insn, a, b, c)                                                    \
    __extension__({                                                                \
        __typeof__(c) r_ = (c);                                                    \
        __asm__(insn " %2, %1, %0" : "+v"(r_) : "v"(a), "vm"(b));                  \
        r_;                                                                        \
    })

#endif
