#include "ops/reduce_ops.h"

#include <atomic>

#include "ops/float16.h"
#include "ops/scale.h"

namespace mxhorovod {
namespace {

template <ReduceOp OP>
void Float16Op(void* in, void* inout, int* len, MPI_Datatype*) {
  ReduceFloat16(in, inout, *len, OP);
}

template <typename T>
void SumOp(void* in_v, void* inout_v, int* len, MPI_Datatype*) {
  const T* __restrict in = static_cast<const T*>(in_v);
  T* __restrict io = static_cast<T*>(inout_v);
  const int n = *len;
  for (int i = 0; i < n; ++i) io[i] = in[i] + io[i];
}

// Min / Max of float32 and float64 (MPI_MIN / MPI_MAX lose a NaN or keep it on some ranks
// only, and pick either zero for -0 vs +0, depending on the order of the operands).
template <typename T, bool MIN>
void NanMinMaxOp(void* in_v, void* inout_v, int* len, MPI_Datatype*) {
  const T* __restrict in = static_cast<const T*>(in_v);
  T* __restrict io = static_cast<T*>(inout_v);
  const int n = *len;
  for (int i = 0; i < n; ++i) io[i] = MIN ? NanMin(in[i], io[i]) : NanMax(in[i], io[i]);
}

// The factor of the scaled sums (see the header: one scaled reduction in flight).
std::atomic<double> g_scale{1.0};

void Float16ScaledSumOp(void* in, void* inout, int* len, MPI_Datatype*) {
  ScaledSumFloat16(in, inout, *len, static_cast<float>(g_scale.load(std::memory_order_relaxed)));
}

template <typename T>
void ScaledSumOp(void* in_v, void* inout_v, int* len, MPI_Datatype*) {
  const T* __restrict in = static_cast<const T*>(in_v);
  T* __restrict io = static_cast<T*>(inout_v);
  // As ScaleBuffer: the factor cast to T, one multiply per element.
  const T c = static_cast<T>(g_scale.load(std::memory_order_relaxed));
  const int n = *len;
  for (int i = 0; i < n; ++i) io[i] = (in[i] + io[i]) * c;
}

}  // namespace

ReduceOps::ReduceOps() {
  MPI_Type_contiguous(2, MPI_BYTE, &float16_);
  MPI_Type_commit(&float16_);
  MPI_Op_create(&Float16Op<ReduceOp::kSum>, 1, &f16_[0]);
  MPI_Op_create(&Float16Op<ReduceOp::kMin>, 1, &f16_[1]);
  MPI_Op_create(&Float16Op<ReduceOp::kMax>, 1, &f16_[2]);
  MPI_Op_create(&Float16Op<ReduceOp::kProduct>, 1, &f16_[3]);
  MPI_Op_create(&SumOp<float>, 1, &f32_sum_);
  MPI_Op_create(&SumOp<double>, 1, &f64_sum_);
  MPI_Op_create(&ScaledSumOp<float>, 1, &f32_scaled_);
  MPI_Op_create(&ScaledSumOp<double>, 1, &f64_scaled_);
  MPI_Op_create(&Float16ScaledSumOp, 1, &f16_scaled_);
  MPI_Op_create(&NanMinMaxOp<float, true>, 1, &f32_min_);
  MPI_Op_create(&NanMinMaxOp<float, false>, 1, &f32_max_);
  MPI_Op_create(&NanMinMaxOp<double, true>, 1, &f64_min_);
  MPI_Op_create(&NanMinMaxOp<double, false>, 1, &f64_max_);
}

ReduceOps::~ReduceOps() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Type_free(&float16_);
  for (MPI_Op& op : f16_) MPI_Op_free(&op);
  MPI_Op_free(&f32_sum_);
  MPI_Op_free(&f64_sum_);
  MPI_Op_free(&f32_scaled_);
  MPI_Op_free(&f64_scaled_);
  MPI_Op_free(&f16_scaled_);
  for (MPI_Op* op : {&f32_min_, &f32_max_, &f64_min_, &f64_max_}) MPI_Op_free(op);
}

MPI_Datatype ReduceOps::Type(DataType t) const {
  switch (t) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kFloat16: return float16_;
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
  }
  return MPI_BYTE;
}

MPI_Op ReduceOps::Op(DataType t, ReduceOp op) const {
  if (t == DataType::kFloat16) {
    switch (op) {
      case ReduceOp::kMin: return f16_[1];
      case ReduceOp::kMax: return f16_[2];
      case ReduceOp::kProduct: return f16_[3];
      default: return f16_[0];
    }
  }
  if (t == DataType::kFloat32 || t == DataType::kFloat64) {
    const bool f32 = t == DataType::kFloat32;
    if (op == ReduceOp::kMin) return f32 ? f32_min_ : f64_min_;
    if (op == ReduceOp::kMax) return f32 ? f32_max_ : f64_max_;
  }
  switch (op) {
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kProduct: return MPI_PROD;
    default: break;  // Sum, and Average (the caller scales)
  }
  if (t == DataType::kFloat32) return f32_sum_;
  if (t == DataType::kFloat64) return f64_sum_;
  return MPI_SUM;
}

MPI_Op ReduceOps::ScaledSum(DataType t, double scale) {
  if (t != DataType::kFloat32 && t != DataType::kFloat64 && t != DataType::kFloat16) {
    return MPI_OP_NULL;
  }
  // Published to whichever thread MPI runs the op in by the MPI call that follows.
  g_scale.store(scale, std::memory_order_relaxed);
  if (t == DataType::kFloat16) return f16_scaled_;
  return t == DataType::kFloat32 ? f32_scaled_ : f64_scaled_;
}

}  // namespace mxhorovod
