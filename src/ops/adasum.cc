#include "ops/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "ops/float16.h"

namespace mxhorovod {
namespace {

// float16 is converted in blocks of this many elements (on the stack).
constexpr int64_t kHalfBlock = 1024;

template <typename T>
void Dots(const T* a, const T* b, int64_t n, double* dot, double* na, double* nb) {
  double d = 0, x = 0, y = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double ai = a[i], bi = b[i];
    d += ai * bi;
    x += ai * ai;
    y += bi * bi;
  }
  *dot += d;
  *na += x;
  *nb += y;
}

template <typename T>
void Combine(T* a, const T* b, int64_t n, double ca, double cb) {
  for (int64_t i = 0; i < n; ++i) a[i] = static_cast<T>(ca * (double)a[i] + cb * (double)b[i]);
}

void HalfSegment(uint16_t* a, const uint16_t* b, int64_t n) {
  float fa[kHalfBlock], fb[kHalfBlock];
  double dot = 0, na = 0, nb = 0;
  for (int64_t off = 0; off < n; off += kHalfBlock) {
    const int64_t m = std::min(kHalfBlock, n - off);
    CastFloat16ToFloat32(fa, a + off, m);
    CastFloat16ToFloat32(fb, b + off, m);
    Dots(fa, fb, m, &dot, &na, &nb);
  }
  double ca, cb;
  AdasumCoefficients(dot, na, nb, &ca, &cb);
  for (int64_t off = 0; off < n; off += kHalfBlock) {
    const int64_t m = std::min(kHalfBlock, n - off);
    CastFloat16ToFloat32(fa, a + off, m);
    CastFloat16ToFloat32(fb, b + off, m);
    Combine(fa, fb, m, ca, cb);
    CastFloat32ToFloat16(a + off, fa, m);
  }
}

template <typename T>
void Segment(T* a, const T* b, int64_t n) {
  double dot = 0, na = 0, nb = 0;
  Dots(a, b, n, &dot, &na, &nb);
  double ca, cb;
  AdasumCoefficients(dot, na, nb, &ca, &cb);
  Combine(a, b, n, ca, cb);
}

}  // namespace

bool AdasumDType(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

void AdasumCoefficients(double dot, double anormsq, double bnormsq, double* acoeff,
                        double* bcoeff) {
  // Horovod's threshold (sqrt of the smallest normal double): below it the division could
  // overflow, and the side's term is negligible anyway.
  static const double kTiny = std::sqrt(DBL_MIN);
  if (std::isnan(anormsq) || std::isnan(bnormsq) || std::isnan(dot)) {
    // A NaN anywhere in either vector: the whole result is NaN, also against a zero
    // vector (whose side would otherwise keep the coefficient 1 and pass the rest through).
    *acoeff = *bcoeff = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  *acoeff = anormsq >= kTiny ? 1.0 - dot / anormsq * 0.5 : 1.0;
  *bcoeff = bnormsq >= kTiny ? 1.0 - dot / bnormsq * 0.5 : 1.0;
}

void AdasumPair(void* a, const void* b, const std::vector<int64_t>& counts, DataType dtype) {
  const int esize = DTypeSize(dtype);
  char* pa = static_cast<char*>(a);
  const char* pb = static_cast<const char*>(b);
  for (int64_t n : counts) {
    switch (dtype) {
      case DataType::kFloat16: HalfSegment((uint16_t*)pa, (const uint16_t*)pb, n); break;
      case DataType::kFloat32: Segment((float*)pa, (const float*)pb, n); break;
      case DataType::kFloat64: Segment((double*)pa, (const double*)pb, n); break;
      default: break;  // refused at the call (AdasumDType)
    }
    pa += n * esize;
    pb += n * esize;
  }
}

Status AdasumAllreduce(Backend* backend, void* buf, const std::vector<int64_t>& counts,
                       DataType dtype, int rank, int size, std::vector<char>* scratch) {
  if (!AdasumDType(dtype)) {
    return Status::InvalidArgument(std::string("Adasum takes float16, float32 or float64, not ") +
                                   DTypeName(dtype));
  }
  if (size <= 1) return Status::OK();
  int64_t total = 0;
  for (int64_t n : counts) total += n;
  const int64_t bytes = total * DTypeSize(dtype);
  for (int s = 1; s < size; s *= 2) {
    if (rank % (2 * s) == 0) {
      if (rank + s >= size) continue;  // no partner at this level: carried up as it is
      if ((int64_t)scratch->size() < bytes) scratch->resize(bytes);
      auto st = backend->Sendrecv(nullptr, 0, -1, scratch->data(), bytes, rank + s);
      if (!st.ok()) return st;
      AdasumPair(buf, scratch->data(), counts, dtype);
    } else if (rank % (2 * s) == s) {
      // This rank's block is the right operand of rank - s's; it is done until the
      // broadcast.
      auto st = backend->Sendrecv(buf, bytes, rank - s, nullptr, 0, -1);
      if (!st.ok()) return st;
      break;
    }
  }
  return backend->Broadcast(buf, bytes, 0);
}

}  // namespace mxhorovod
