#include "scale.h"

#include <algorithm>

namespace mxhorovod {
namespace {

template <typename T>
void ScaleInt(T* p, int64_t n, double factor, int divisor) {
  const long double f = factor, d = divisor;
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<long double>(p[i]) * f / d);
}

void ScaleHalf(_Float16* p, int64_t n, double f) {
  const float ff = static_cast<float>(f);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<_Float16>(static_cast<float>(p[i]) * ff);
}

void ScaleFloat(float* p, int64_t n, double f) {
  // float32 scaled in float32: what MXNet's own elementwise ops give, and vectorizable.
  const float ff = static_cast<float>(f);
  for (int64_t i = 0; i < n; ++i) p[i] *= ff;
}

}  // namespace

void ScaleBuffer(void* buf, int64_t count, DataType dtype, double factor, int divisor) {
  if ((factor == 1.0 && divisor == 1) || count == 0) return;
  const double f = factor / divisor;
  switch (dtype) {
    case DataType::kFloat32: ScaleFloat(static_cast<float*>(buf), count, f); break;
    case DataType::kFloat64: {
      double* p = static_cast<double*>(buf);
      for (int64_t i = 0; i < count; ++i) p[i] *= f;
      break;
    }
    case DataType::kFloat16: ScaleHalf(static_cast<_Float16*>(buf), count, f); break;
    case DataType::kUInt8: ScaleInt(static_cast<uint8_t*>(buf), count, factor, divisor); break;
    case DataType::kInt8: ScaleInt(static_cast<int8_t*>(buf), count, factor, divisor); break;
    case DataType::kInt32: ScaleInt(static_cast<int32_t*>(buf), count, factor, divisor); break;
    case DataType::kInt64: ScaleInt(static_cast<int64_t*>(buf), count, factor, divisor); break;
  }
}

void ReduceFloat16(const void* in_v, void* inout_v, int64_t n, ReduceOp op) {
  const _Float16* in = static_cast<const _Float16*>(in_v);
  _Float16* io = static_cast<_Float16*>(inout_v);
  for (int64_t i = 0; i < n; ++i) {
    float a = static_cast<float>(in[i]), b = static_cast<float>(io[i]);
    float r;
    switch (op) {
      case ReduceOp::kMin: r = std::min(a, b); break;
      case ReduceOp::kMax: r = std::max(a, b); break;
      case ReduceOp::kProduct: r = a * b; break;
      default: r = a + b; break;
    }
    io[i] = static_cast<_Float16>(r);
  }
}

}  // namespace mxhorovod
