/*
 * optree/mpi.h - data-parallel training over MPI: allreduce of
 * tensors. Declared here, defined in liboptree_mpi.a, not in liboptree.
 *
 * Part of the public API: optree.h includes this header at its end, so
 * #include <optree.h> is all a program needs; included on its own it
 * includes optree.h first.
 */
#include "../optree.h"

#ifndef OPTREE_MPI_H
#define OPTREE_MPI_H

/* ------------------------------------------------------------------------ */
/* Data-parallel training over MPI                                           */
/* ------------------------------------------------------------------------ */

/* These functions are not in liboptree: they live in build/liboptree_mpi.a,
 * which make builds only where mpicc is found (link it before liboptree.a,
 * with mpicc). This header does not include mpi.h: comm points at the
 * caller's MPI_Comm (MPI_Comm w = MPI_COMM_WORLD; ot_allreduce(&w, ...)).
 *
 * Each call is a collective: every rank of comm calls it, in the same order
 * relative to its other collectives on comm, with the same n and, tensor
 * for tensor, the same dtype (f32 or f64) and shape. The result is the sum
 * or mean over ranks, written in place, and bitwise the same on every rank:
 * every rank gathers every contribution and adds them in rank order (f32
 * in double, rounded once; f64 in f64), then divides by the rank count for
 * OT_REDUCE_MEAN; MPI_Allreduce's order is the implementation's, so it is
 * not used. Ranks exchange their arguments' descriptions first, so a rank's
 * bad argument or a dtype/shape that differs across ranks is the same error
 * on every rank (naming the rank and the tensor), not a hang. Errors:
 * OT_ENULL (comm, tensors or an entry), OT_EINVAL (n < 0, an unknown op, a
 * non-contiguous tensor, MPI not initialised), OT_EALIAS (tensors that
 * overlap; a read-only broadcast view), OT_EBACKEND (tensors of different backends), OT_EDTYPE (i32, or
 * dtypes that differ across ranks), OT_ESHAPE (shapes that differ across
 * ranks), OT_EOVERFLOW (more than INT_MAX elements of one dtype), OT_ENOMEM,
 * OT_EIO (an MPI call failed, under an error handler that returns). A NULL
 * comm fails without communicating, so the other ranks wait for it, as for
 * any collective one rank skips. Data is gathered, not reduce-scattered:
 * each rank receives ranks * size bytes, right for a few ranks. */
typedef enum ot_reduce_op { OT_REDUCE_SUM = 0, OT_REDUCE_MEAN = 1 } ot_reduce_op;
int ot_allreduce(const void *comm, int n, ot_tensor *const tensors[], ot_reduce_op op);

/* The same in two halves, so that computing overlaps communicating: start
 * checks the arguments across ranks (a small blocking exchange), copies
 * the tensors' values and posts the exchange (MPI_Iallgather) and sets
 * *req; wait finishes it, writes the results and frees *req (NULL: OT_ENULL).
 * Between the two the tensors must stay alive and unwritten by others, but
 * other work (another start, the next layer's backprop) may run. Every
 * start that succeeds is matched by one wait; one that fails sets *req to
 * NULL and needs none. Open MPI progresses the exchange inside MPI calls
 * (a later start, the wait). */
typedef struct ot_allreduce_req ot_allreduce_req;
int ot_allreduce_start(const void *comm, int n, ot_tensor *const tensors[], ot_reduce_op op,
                       ot_allreduce_req **req);
int ot_allreduce_wait(ot_allreduce_req *req);

#endif /* OPTREE_MPI_H */
