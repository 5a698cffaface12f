// The library's own MPI reduction operators (MPI_Op_create), owned by one MPIBackend:
// - float16 sum/min/max/prod: MPI has no float16 type (ops/float16.h: computed in float32,
//   rounded back, vectorized where the CPU can);
// - float32 and float64 sums: a plain loop the compiler vectorizes. MPICH 5.0.2's
//   built-in MPI_SUM (the PyPI build) is slower here: in-place MPI_Allreduce on 2 ranks
//   took 236 vs 135 us at 256 KiB and 3.5 vs 2.3 ms at 4 MiB (medians, benchmarks'
//   machine);
// - scaled float32/float64 sums, (in + inout) * scale: on a 2-rank communicator every
//   algorithm combines each element exactly once, so the result is the sum times scale,
//   bit for bit what a separate scaling pass gives, without the pass (Average's 1/size:
//   a memory-bound pass of ~10 ms over ResNet-50's 102 MB here); float16 the same way,
//   h(f(h(in + inout)) * scale) (ops/float16.h): the sum rounded to float16 before the
//   scaling, bit for bit what the separate pass gives;
// - float32 and float64 min/max that do not depend on the order of the operands (NanMin /
//   NanMax in scale.h: a NaN wins, -0 < +0): MPI_MIN / MPI_MAX gave ranks different
//   results, or dropped the NaN, when one rank held a NaN.
// The scaled sums read their factor from one process-wide value that ScaledSum sets: one
// scaled reduction may be in flight per process at a time, which holds because the
// background thread issues every collective and waits for each before the next.
// (Per-factor ops would let two ranks of one communicator pick different ops once some
// table filled up differently on each: wrong numbers under ring or tree algorithms.)
#ifndef MXHOROVOD_OPS_REDUCE_OPS_H_
#define MXHOROVOD_OPS_REDUCE_OPS_H_

#include <mpi.h>

#include "common/common.h"

namespace mxhorovod {

class ReduceOps {
 public:
  ReduceOps();
  ~ReduceOps();  // frees the ops unless MPI is finalized
  ReduceOps(const ReduceOps&) = delete;
  ReduceOps& operator=(const ReduceOps&) = delete;

  MPI_Datatype Type(DataType t) const;  // float16: a 2-byte contiguous type of ours
  // The op for a reduction; Average is a sum (the caller scales).
  MPI_Op Op(DataType t, ReduceOp op) const;
  // An op computing (in + inout) * T(scale) for float32/float64, and its float16 form
  // (MPI_OP_NULL for other dtypes), valid for the next reduction only: it sets the process-wide factor. Only
  // correct as an allreduce op on a communicator of exactly 2 ranks.
  MPI_Op ScaledSum(DataType t, double scale);

 private:
  MPI_Datatype float16_ = MPI_DATATYPE_NULL;
  MPI_Op f16_[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum min max prod
  MPI_Op f32_sum_ = MPI_OP_NULL, f64_sum_ = MPI_OP_NULL;
  MPI_Op f32_scaled_ = MPI_OP_NULL, f64_scaled_ = MPI_OP_NULL, f16_scaled_ = MPI_OP_NULL;
  MPI_Op f32_min_ = MPI_OP_NULL, f32_max_ = MPI_OP_NULL, f64_min_ = MPI_OP_NULL, f64_max_ = MPI_OP_NULL;
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_REDUCE_OPS_H_
