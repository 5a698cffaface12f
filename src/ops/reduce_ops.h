// The library's own MPI reduction operators (MPI_Op_create), owned by one MPIBackend:
// - float16 sum/min/max/prod: MPI has no float16 type (computed in float32, rounded back);
// - float32 and float64 sums: a plain loop the compiler vectorizes. MPICH 5.0.2's
//   built-in MPI_SUM (the PyPI build) is slower here: in-place MPI_Allreduce on 2 ranks
//   took 236 vs 135 us at 256 KiB and 3.5 vs 2.3 ms at 4 MiB (medians, benchmarks'
//   machine);
// - scaled float32/float64 sums, (in + inout) * scale: on a 2-rank communicator every
//   algorithm combines each element exactly once, so the result is the sum times scale,
//   bit for bit what a separate scaling pass gives, without the pass (Average's 1/size:
//   a memory-bound pass of ~10 ms over ResNet-50's 102 MB here).
// Every function is callable from any thread (an MPI progress thread included): a scaled
// sum reads its factor from a process-wide slot written once, before its op is created.
#ifndef MXHOROVOD_OPS_REDUCE_OPS_H_
#define MXHOROVOD_OPS_REDUCE_OPS_H_

#include <mpi.h>

#include <map>
#include <utility>

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
  // An op computing (in + inout) * T(scale) for float32/float64, or MPI_OP_NULL for other
  // dtypes or once the process's slots for distinct factors (kScaleSlots) are taken. Only
  // valid as an allreduce op on a communicator of exactly 2 ranks.
  MPI_Op ScaledSum(DataType t, double scale);

  static constexpr int kScaleSlots = 8;

 private:
  MPI_Datatype float16_ = MPI_DATATYPE_NULL;
  MPI_Op f16_[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum min max prod
  MPI_Op f32_sum_ = MPI_OP_NULL, f64_sum_ = MPI_OP_NULL;
  std::map<std::pair<DataType, double>, MPI_Op> scaled_;
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_REDUCE_OPS_H_
