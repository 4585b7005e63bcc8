/*
 * ref.h - what the reference backend (src/ref/) shows the layers above: its
 * vtable, which the backend registry (src/front/backend.c) names.
 */
#ifndef OT_REF_H
#define OT_REF_H

#include "internal.h"

extern const ot_backend_vt ot__ref_vt;

#endif
