// Element-wise kernels on IEEE float16 (binary16) buffers: the reductions MPI has no type
// for, and the scaling of prescale/postscale/Average.
//
// Every kernel computes in float32 and rounds back to float16 to nearest, ties to even:
//   Sum        inout[i] = h(f(in[i]) + f(inout[i]))
//   Product    inout[i] = h(f(in[i]) * f(inout[i]))
//   Min, Max   as NanMin / NanMax (scale.h): a NaN wins, -0 below +0 (exact: no rounding)
//   ScaledSum  inout[i] = h(f(h(f(in[i]) + f(inout[i]))) * c): bit for bit the Sum
//              followed by Scale, in one pass
//   Scale      dst[i] = h(f(src[i]) * c)
// with f() the exact conversion to float32 and h() the rounding back. A NaN result is
// always the one quiet NaN 0x7E00 (numpy's float16 nan), whatever the operands' payloads
// or their order: so every rank of an allreduce holds the same bits.
//
// Two implementations give those same bits (tests/collectives/test_float16.py checks every float16
// value): a portable one (plain C++, any CPU) and one for x86-64 CPUs with AVX2 and F16C
// (Haswell and later, every AMD Zen), compiled for those features only in its own functions
// (no global -mavx2 or -march flag, so one build runs on every x86-64 machine) and chosen
// at run time from the CPU's features. MXHOROVOD_SIMD=portable forces the portable one.
// Ranks that take different paths (hosts of different CPUs) still agree bit for bit.
#ifndef MXHOROVOD_OPS_FLOAT16_H_
#define MXHOROVOD_OPS_FLOAT16_H_

#include <cstdint>
#include <string>

#include "common/common.h"

namespace mxhorovod {

// The implementations, worst first.
enum class SimdPath : int { kPortable = 0, kAVX2 = 1 };
const char* SimdPathName(SimdPath p);  // "portable", "avx2"

// MXHOROVOD_SIMD's value: "auto" (or empty: the best this CPU has), "portable", "avx2"
// (any case). Returns false for anything else. *path: the one asked for (auto: kAVX2).
bool ParseSimdPath(const std::string& value, SimdPath* path);
// The best path at most `want` that this CPU can run.
SimdPath BestSimdPath(SimdPath want);
// Uses BestSimdPath(want) from now on, process-wide (read by the background thread's
// reductions); returns it. Until called: the best this CPU has.
SimdPath SetSimdPath(SimdPath want);
SimdPath CurrentSimdPath();

// The kernels above on the current path; float16 values as their 16 bits.
// in and inout: count elements each, not overlapping; src and dst may be equal (in-place
// scaling) but not otherwise overlap.
void ReduceFloat16(const void* in, void* inout, int64_t count, ReduceOp op);  // Average: Sum
void ScaledSumFloat16(const void* in, void* inout, int64_t count, float scale);
void ScaleFloat16(void* dst, const void* src, int64_t count, float scale);

// Casts between float32 and float16 (dtype conversion, not a reduction): the same bits as
// MXNet's cast and numpy's astype. float32 -> float16 rounds to nearest, ties to even
// (65520 and up become Inf); a NaN keeps the top 10 bits of its payload (0x7C01 where they
// are all zero: still a NaN), quiet or signaling as it was. float16 -> float32 is exact,
// NaN payloads included (never quieted). dst and src must not overlap.
void CastFloat32ToFloat16(uint16_t* dst, const float* src, int64_t count);
void CastFloat16ToFloat32(float* dst, const uint16_t* src, int64_t count);

}  // namespace mxhorovod

// For tests and benchmarks (through ctypes: no MPI, no MXNet): runs one kernel on one
// path. kernel: 0 Sum, 1 Min, 2 Max, 3 Product, 4 ScaledSum, 5 Scale (dst inout, src in);
// 6 cast float32 -> float16 (dst inout, src in), 7 cast float16 -> float32 (scale unused);
// path: a SimdPath's value. Returns 0, or -1 when this CPU cannot run that path (nothing
// done), -2 for an unknown kernel.
extern "C" __attribute__((visibility("default"))) int mxhorovod_float16_kernel(
    int path, int kernel, const void* in, void* inout, int64_t count, double scale);

#endif  // MXHOROVOD_OPS_FLOAT16_H_
