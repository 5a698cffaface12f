// Adasum (Maleki et al., MLSys 2021; Horovod's op=Adasum): the ranks' vectors combined in
// pairs, Adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b, along a binary
// tree over the ranks in rank order, each tensor of a fused group on its own (its own dot
// product and norms). Any number of ranks; every rank gets the same bits (the tree is
// reduced into rank 0, which broadcasts the result). Works through any Backend (its
// Sendrecv and Broadcast), so on any process set's communicator.
#ifndef MXHOROVOD_OPS_ADASUM_H_
#define MXHOROVOD_OPS_ADASUM_H_

#include <cstdint>
#include <vector>

#include "common/common.h"
#include "ops/backend.h"

namespace mxhorovod {

// Whether Adasum takes this dtype: float16, float32, float64.
bool AdasumDType(DataType dtype);

// The two coefficients of Adasum(a, b) from a.b, |a|^2 and |b|^2 (accumulated in float64).
// A side whose squared norm is below sqrt(DBL_MIN) (~1.5e-154: a zero vector in practice)
// gets coefficient 1, as Horovod's: its term is (about) zero, so Adasum(a, 0) = a,
// Adasum(0, b) = b and Adasum(0, 0) = 0, with no 0/0.
void AdasumCoefficients(double dot, double anormsq, double bnormsq, double* acoeff,
                        double* bcoeff);

// a = Adasum(a, b), segment by segment: segment i holds counts[i] elements (one tensor of
// a fused group), at the same offsets in a and b. Sums in float64; float32 and float64
// results are acoeff * a + bcoeff * b in float64, rounded once; float16 values are read
// exactly, combined in float64 and rounded through float32. a and b must not overlap.
void AdasumPair(void* a, const void* b, const std::vector<int64_t>& counts, DataType dtype);

// In place over the backend's ranks: buf holds this rank's sum(counts) elements, and on
// return the Adasum of every rank's buf, segment by segment, the same bits on every rank.
// The tree: at stride s = 1, 2, 4, ... (while s < size), rank g (a multiple of 2s) takes
// v[g] = Adasum(v[g], v[g + s]) when g + s < size: pairs (0,1), (2,3), ..., then pairs of
// pairs, a rank or block without a partner carried up as it is (3 ranks:
// Adasum(Adasum(v0, v1), v2)); the lower ranks' vector is always the left operand. Rank
// 0 then broadcasts v[0]. `scratch` grows to hold one partner's vector.
Status AdasumAllreduce(Backend* backend, void* buf, const std::vector<int64_t>& counts,
                       DataType dtype, int rank, int size, std::vector<char>* scratch);

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_ADASUM_H_
