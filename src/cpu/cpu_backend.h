/*
 * cpu_backend.h - what the cpu backend (src/cpu/) shows the layers above:
 * its vtable, which the backend registry (src/front/backend.c) names. The
 * rest of the cpu backend's headers are on its own objects' include path
 * alone.
 */
#ifndef OT_CPU_BACKEND_H
#define OT_CPU_BACKEND_H

#include "internal.h"

extern const ot_backend_vt ot__cpu_vt;

#endif
