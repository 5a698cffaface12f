#include "ops/reduce_ops.h"

#include <array>
#include <atomic>
#include <mutex>
#include <utility>

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

// Process-wide factors of the scaled sums: slot k is written once (under g_slot_mutex),
// before the first op that reads it is created, and never changes after.
std::atomic<double> g_scale[ReduceOps::kScaleSlots];
int g_slots_used = 0;
std::mutex g_slot_mutex;

template <typename T, int SLOT>
void ScaledSumOp(void* in_v, void* inout_v, int* len, MPI_Datatype*) {
  const T* __restrict in = static_cast<const T*>(in_v);
  T* __restrict io = static_cast<T*>(inout_v);
  // As ScaleBuffer: the factor cast to T, one multiply per element.
  const T c = static_cast<T>(g_scale[SLOT].load(std::memory_order_relaxed));
  const int n = *len;
  for (int i = 0; i < n; ++i) io[i] = (in[i] + io[i]) * c;
}

using OpFn = void (*)(void*, void*, int*, MPI_Datatype*);

template <typename T, int... S>
constexpr std::array<OpFn, sizeof...(S)> ScaledTable(std::integer_sequence<int, S...>) {
  return {{&ScaledSumOp<T, S>...}};
}

const auto kScaled32 = ScaledTable<float>(std::make_integer_sequence<int, ReduceOps::kScaleSlots>());
const auto kScaled64 = ScaledTable<double>(std::make_integer_sequence<int, ReduceOps::kScaleSlots>());

// The slot holding `scale`, taking a free one if needed; -1 when all are taken.
int SlotOf(double scale) {
  std::lock_guard<std::mutex> lock(g_slot_mutex);
  for (int k = 0; k < g_slots_used; ++k) {
    if (g_scale[k].load(std::memory_order_relaxed) == scale) return k;
  }
  if (g_slots_used == ReduceOps::kScaleSlots) return -1;
  g_scale[g_slots_used].store(scale, std::memory_order_relaxed);
  return g_slots_used++;
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
}

ReduceOps::~ReduceOps() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Type_free(&float16_);
  for (MPI_Op& op : f16_) MPI_Op_free(&op);
  MPI_Op_free(&f32_sum_);
  MPI_Op_free(&f64_sum_);
  for (auto& kv : scaled_) MPI_Op_free(&kv.second);
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
  if (t != DataType::kFloat32 && t != DataType::kFloat64) return MPI_OP_NULL;
  auto key = std::make_pair(t, scale);
  auto it = scaled_.find(key);
  if (it != scaled_.end()) return it->second;
  const int slot = SlotOf(scale);
  if (slot < 0) return MPI_OP_NULL;
  MPI_Op op = MPI_OP_NULL;
  MPI_Op_create(t == DataType::kFloat32 ? kScaled32[slot] : kScaled64[slot], 1, &op);
  scaled_.emplace(key, op);
  return op;
}

}  // namespace mxhorovod
