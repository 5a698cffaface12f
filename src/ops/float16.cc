#include "ops/float16.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mxhorovod {
namespace {

// ---------------------------------------------------------------- portable path
// Branch-free element functions (selects, not branches), so that the compiler vectorizes
// the loops below with the baseline instruction set (SSE2 on x86-64).

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline float Float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// All ones when c holds: the selects below are masks, not branches (which the compiler
// does not vectorize).
inline uint32_t Mask(bool c) { return 0u - (uint32_t)c; }

// float16 -> float32, exact (F. Giesen's half_to_float_fast, branch-free). A NaN stays a
// NaN (its payload does not matter: every NaN result is written as kNaN).
inline float HalfToFloat(uint16_t h) {
  const uint32_t em = (uint32_t)(h & 0x7fff) << 13;  // exponent and mantissa, float's place
  const uint32_t exp = em & 0x0f800000u;             // float16's exponent field
  const uint32_t o = em + (112u << 23);              // rebias 15 -> 127
  // Exponent all ones (Inf/NaN): all ones in float32 too.
  const uint32_t inf_nan = o + (112u << 23);
  // Zero and subnormals: 2^-14 * (1 + m/1024) - 2^-14, exactly m * 2^-24.
  const uint32_t sub = Bits(Float(o + (1u << 23)) - Float(113u << 23));
  const uint32_t is_inf_nan = Mask(exp == 0x0f800000u), is_sub = Mask(exp == 0);
  const uint32_t r = (inf_nan & is_inf_nan) | (sub & is_sub) | (o & ~(is_inf_nan | is_sub));
  return Float(r | (uint32_t)(h & 0x8000) << 16);
}

constexpr uint16_t kNaN = 0x7e00;  // the quiet NaN of every NaN result (numpy's nan)

// float32 -> float16, round to nearest, ties to even (F. Giesen's float_to_half_fast3_rtne,
// branch-free); as F16C's VCVTPS2PH with imm 0, except that a NaN becomes kNaN.
inline uint16_t FloatToHalf(float f) {
  const uint32_t all = Bits(f);
  const uint32_t sign = (all >> 16) & 0x8000u;
  const int32_t x = (int32_t)(all & 0x7fffffffu);  // |f|'s bits: ordered as |f| (NaN above)
  // Normal float16 range: rebias 127 -> 15 and round the 13 dropped bits to nearest even
  // (a carry out of the mantissa raises the exponent, up to Inf from 65520 on).
  const uint32_t normal = ((uint32_t)x + 0xc8000fffu + (((uint32_t)x >> 13) & 1)) >> 13;
  // Below 2^-14 (subnormal or zero): adding 0.5 rounds |f| to float16's subnormal step,
  // 2^-24, by the FPU's own round to nearest even.
  const uint32_t sub = Bits(Float((uint32_t)x) + 0.5f) - 0x3f000000u;
  const uint32_t is_sub = Mask(x < (113 << 23)), is_inf = Mask(x >= (143 << 23));  // 2^16 up
  const uint32_t is_nan = Mask(x > 0x7f800000);
  const uint32_t o = ((sub & is_sub) | (normal & ~is_sub) | is_inf) & (~is_inf | 0x7c00u);
  return (uint16_t)(((o | sign) & ~is_nan) | (kNaN & is_nan));
}

// The casts keep a NaN's payload where the reductions write kNaN: numpy's
// npy_floatbits_to_halfbits and npy_halfbits_to_floatbits, which MXNet's cast matches.
inline uint16_t CastToHalf(float f) {
  const uint32_t all = Bits(f);
  if ((all & 0x7fffffffu) <= 0x7f800000u) return FloatToHalf(f);  // not a NaN
  const uint16_t top = (uint16_t)(0x7c00u | ((all & 0x007fffffu) >> 13));
  return (uint16_t)(((all >> 16) & 0x8000u) | (top == 0x7c00u ? 0x7c01u : top));
}
inline float CastToFloat(uint16_t h) {
  if ((h & 0x7fff) <= 0x7c00) return HalfToFloat(h);  // not a NaN
  return Float(((uint32_t)(h & 0x8000) << 16) | 0x7f800000u | ((uint32_t)(h & 0x03ff) << 13));
}

void CastToHalfPortable(uint16_t* __restrict dst, const float* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = CastToHalf(src[i]);
}
void CastToFloatPortable(float* __restrict dst, const uint16_t* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = CastToFloat(src[i]);
}

// Min/Max on the bits: float16 values as int16 keys ordered as the values, -0 below +0
// (a negative value's magnitude bits flipped); the map is its own inverse.
inline int16_t Key(uint16_t h) { return (int16_t)(h ^ ((uint16_t)((int16_t)h >> 15) & 0x7fff)); }
inline bool IsNaN(uint16_t h) { return (h & 0x7fff) > 0x7c00; }

enum Kernel : int {
  kSum = 0, kMin = 1, kMax = 2, kProduct = 3, kScaledSum = 4, kScale = 5,
  kCastToHalf = 6, kCastToFloat = 7
};

template <int K>
void BinaryPortable(const uint16_t* __restrict in, uint16_t* __restrict io, int64_t n, float c) {
  for (int64_t i = 0; i < n; ++i) {
    if (K == kMin || K == kMax) {
      const int16_t a = Key(in[i]), b = Key(io[i]);
      const uint16_t r = (uint16_t)Key((uint16_t)(K == kMin ? std::min(a, b) : std::max(a, b)));
      io[i] = IsNaN(in[i]) || IsNaN(io[i]) ? kNaN : r;
      continue;
    }
    const float a = HalfToFloat(in[i]), b = HalfToFloat(io[i]);
    float r = K == kProduct ? a * b : a + b;
    if (K == kScaledSum) r = HalfToFloat(FloatToHalf(r)) * c;
    io[i] = FloatToHalf(r);
  }
}

// In place (dst == src) or not: no __restrict.
void ScalePortable(uint16_t* dst, const uint16_t* src, int64_t n, float c) {
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToHalf(HalfToFloat(src[i]) * c);
}

// ---------------------------------------------------------------- AVX2 + F16C path
#if defined(__x86_64__)
#define MXH_AVX2 __attribute__((target("avx2,f16c")))

MXH_AVX2 inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// Rounds to nearest even (imm 0, whatever MXCSR says); a NaN lane becomes kNaN: VCVTPS2PH
// would keep the top of its payload.
MXH_AVX2 inline __m128i Round8(__m256 v) {
  const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));  // -> 0x7e00
  v = _mm256_blendv_ps(v, qnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
MXH_AVX2 inline void Store8(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), Round8(v));
}

template <int K>
MXH_AVX2 inline __m256 Op8(__m256 a, __m256 b, __m256 c) {
  if (K == kProduct) return _mm256_mul_ps(a, b);
  const __m256 s = _mm256_add_ps(a, b);
  if (K == kScaledSum) return _mm256_mul_ps(_mm256_cvtph_ps(Round8(s)), c);
  return s;
}

template <int K>
MXH_AVX2 void ArithAVX2(const uint16_t* __restrict in, uint16_t* __restrict io, int64_t n, float c) {
  const __m256 vc = _mm256_set1_ps(c);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {  // two independent chains of 8
    const __m256 a0 = Load8(in + i), b0 = Load8(io + i);
    const __m256 a1 = Load8(in + i + 8), b1 = Load8(io + i + 8);
    Store8(io + i, Op8<K>(a0, b0, vc));
    Store8(io + i + 8, Op8<K>(a1, b1, vc));
  }
  BinaryPortable<K>(in + i, io + i, n - i, c);  // the same bits (tested)
}

// Key() on 16 lanes.
MXH_AVX2 inline __m256i Key16(__m256i h) {
  return _mm256_xor_si256(h, _mm256_and_si256(_mm256_srai_epi16(h, 15), _mm256_set1_epi16(0x7fff)));
}

template <bool MIN>
MXH_AVX2 void MinMaxAVX2(const uint16_t* __restrict in, uint16_t* __restrict io, int64_t n) {
  const __m256i mag = _mm256_set1_epi16(0x7fff), inf = _mm256_set1_epi16(0x7c00);
  const __m256i qnan = _mm256_set1_epi16((int16_t)kNaN);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(io + i));
    const __m256i k = MIN ? _mm256_min_epi16(Key16(a), Key16(b)) : _mm256_max_epi16(Key16(a), Key16(b));
    const __m256i nan = _mm256_or_si256(_mm256_cmpgt_epi16(_mm256_and_si256(a, mag), inf),
                                        _mm256_cmpgt_epi16(_mm256_and_si256(b, mag), inf));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(io + i), _mm256_blendv_epi8(Key16(k), qnan, nan));
  }
  BinaryPortable<MIN ? kMin : kMax>(in + i, io + i, n - i, 1.0f);
}

MXH_AVX2 void ScaleAVX2(uint16_t* dst, const uint16_t* src, int64_t n, float c) {
  const __m256 vc = _mm256_set1_ps(c);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a0 = Load8(src + i), a1 = Load8(src + i + 8);
    Store8(dst + i, _mm256_mul_ps(a0, vc));
    Store8(dst + i + 8, _mm256_mul_ps(a1, vc));
  }
  ScalePortable(dst + i, src + i, n - i, c);
}

// F16C's conversions, except for NaNs (VCVTPS2PH and VCVTPH2PS quiet them): a block of 8
// with a NaN goes element by element.
MXH_AVX2 void CastToHalfAVX2(uint16_t* __restrict dst, const float* __restrict src, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a0 = _mm256_loadu_ps(src + i), a1 = _mm256_loadu_ps(src + i + 8);
    const int nan = _mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(a0, a0, _CMP_UNORD_Q),
                                                    _mm256_cmp_ps(a1, a1, _CMP_UNORD_Q)));
    if (nan) {
      CastToHalfPortable(dst + i, src + i, 16);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(a0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 8),
                     _mm256_cvtps_ph(a1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  CastToHalfPortable(dst + i, src + i, n - i);
}

MXH_AVX2 void CastToFloatAVX2(float* __restrict dst, const uint16_t* __restrict src, int64_t n) {
  const __m256i mag = _mm256_set1_epi16(0x7fff), inf = _mm256_set1_epi16(0x7c00);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    if (!_mm256_testz_si256(_mm256_cmpgt_epi16(_mm256_and_si256(h, mag), inf),
                            _mm256_set1_epi16(-1))) {
      CastToFloatPortable(dst + i, src + i, 16);
      continue;
    }
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
    _mm256_storeu_ps(dst + i + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
  }
  CastToFloatPortable(dst + i, src + i, n - i);
}

bool CpuHasAVX2() {
  // __builtin_cpu_supports checks that the OS saves the AVX registers too. Called while
  // the library's static objects are built, maybe before libgcc's own initializer ran.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}
#else
bool CpuHasAVX2() { return false; }
#endif

// Runs kernel k on path p (p must be one this CPU can run).
int Run(SimdPath p, int k, const void* in_v, void* io_v, int64_t n, float c) {
  const uint16_t* in = static_cast<const uint16_t*>(in_v);
  uint16_t* io = static_cast<uint16_t*>(io_v);
  if (n <= 0) return 0;
#if defined(__x86_64__)
  if (p == SimdPath::kAVX2) {
    switch (k) {
      case kSum: ArithAVX2<kSum>(in, io, n, c); return 0;
      case kMin: MinMaxAVX2<true>(in, io, n); return 0;
      case kMax: MinMaxAVX2<false>(in, io, n); return 0;
      case kProduct: ArithAVX2<kProduct>(in, io, n, c); return 0;
      case kScaledSum: ArithAVX2<kScaledSum>(in, io, n, c); return 0;
      case kScale: ScaleAVX2(io, in, n, c); return 0;
      case kCastToHalf: CastToHalfAVX2(io, static_cast<const float*>(in_v), n); return 0;
      case kCastToFloat: CastToFloatAVX2(static_cast<float*>(io_v), in, n); return 0;
      default: return -2;
    }
  }
#endif
  switch (k) {
    case kSum: BinaryPortable<kSum>(in, io, n, c); return 0;
    case kMin: BinaryPortable<kMin>(in, io, n, c); return 0;
    case kMax: BinaryPortable<kMax>(in, io, n, c); return 0;
    case kProduct: BinaryPortable<kProduct>(in, io, n, c); return 0;
    case kScaledSum: BinaryPortable<kScaledSum>(in, io, n, c); return 0;
    case kScale: ScalePortable(io, in, n, c); return 0;
    case kCastToHalf: CastToHalfPortable(io, static_cast<const float*>(in_v), n); return 0;
    case kCastToFloat: CastToFloatPortable(static_cast<float*>(io_v), in, n); return 0;
    default: return -2;
  }
}

std::atomic<int> g_path{(int)BestSimdPath(SimdPath::kAVX2)};

SimdPath Current() { return (SimdPath)g_path.load(std::memory_order_relaxed); }

}  // namespace

const char* SimdPathName(SimdPath p) {
  return p == SimdPath::kAVX2 ? "avx2" : "portable";
}

bool ParseSimdPath(const std::string& value, SimdPath* path) {
  std::string s;
  for (char ch : value) {
    if (!std::isspace((unsigned char)ch)) s += (char)std::tolower((unsigned char)ch);
  }
  if (s.empty() || s == "auto" || s == "avx2") {
    *path = SimdPath::kAVX2;
    return true;
  }
  if (s == "portable") {
    *path = SimdPath::kPortable;
    return true;
  }
  return false;
}

SimdPath BestSimdPath(SimdPath want) {
  if (want >= SimdPath::kAVX2 && CpuHasAVX2()) return SimdPath::kAVX2;
  return SimdPath::kPortable;
}

SimdPath SetSimdPath(SimdPath want) {
  const SimdPath p = BestSimdPath(want);
  g_path.store((int)p, std::memory_order_relaxed);
  return p;
}

SimdPath CurrentSimdPath() { return Current(); }

void ReduceFloat16(const void* in, void* inout, int64_t count, ReduceOp op) {
  int k = kSum;
  if (op == ReduceOp::kMin) k = kMin;
  if (op == ReduceOp::kMax) k = kMax;
  if (op == ReduceOp::kProduct) k = kProduct;
  Run(Current(), k, in, inout, count, 1.0f);
}

void ScaledSumFloat16(const void* in, void* inout, int64_t count, float scale) {
  Run(Current(), kScaledSum, in, inout, count, scale);
}

void ScaleFloat16(void* dst, const void* src, int64_t count, float scale) {
  Run(Current(), kScale, src, dst, count, scale);
}

void CastFloat32ToFloat16(uint16_t* dst, const float* src, int64_t count) {
  Run(Current(), kCastToHalf, src, dst, count, 1.0f);
}

void CastFloat16ToFloat32(float* dst, const uint16_t* src, int64_t count) {
  Run(Current(), kCastToFloat, src, dst, count, 1.0f);
}

}  // namespace mxhorovod

extern "C" int mxhorovod_float16_kernel(int path, int kernel, const void* in, void* inout,
                                        int64_t count, double scale) {
  using mxhorovod::SimdPath;
  if (path < 0 || path > (int)SimdPath::kAVX2) return -1;
  if (mxhorovod::BestSimdPath((SimdPath)path) != (SimdPath)path) return -1;
  return mxhorovod::Run((SimdPath)path, kernel, in, inout, count, (float)scale);
}
