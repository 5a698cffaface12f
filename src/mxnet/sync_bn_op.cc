#include "mxnet/sync_bn_op.h"

#include <dmlc/logging.h>
#include <mxnet/c_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "mxnet/engine_op.h"
#include "mxnet/ndarray.h"
#include "ops/float16.h"

namespace mxhorovod {
namespace mx {
namespace {

constexpr int kFloat32 = 0, kFloat64 = 1, kFloat16 = 2;  // mshadow's type flags
constexpr int kNormalProperty = 0;                      // FnProperty::kNormal

// The handles an operation holds (KeepAlive copies), in SyncBNArrays' order.
constexpr int kSlots = 13;
const char* const kSlotNames[kSlots] = {"x",          "dy",        "gamma",     "beta",
                                        "mean",       "var",       "stats",     "grad_sums",
                                        "saved_mean", "saved_var", "output",    "gamma_grad",
                                        "beta_grad"};
enum Slot { X, DY, GAMMA, BETA, MEAN, VAR, STATS, GRAD_SUMS, SAVED_MEAN, SAVED_VAR, OUT, GAMMA_GRAD, BETA_GRAD };

void* const* SlotsOf(const SyncBNArrays& a) { return reinterpret_cast<void* const*>(&a); }
static_assert(sizeof(SyncBNArrays) == kSlots * sizeof(void*), "SyncBNArrays: one pointer per slot");

struct SyncBNOp {
  SyncBNStep step = SyncBNStep::kStats;
  SyncBNParams params;
  std::string layer;
  int dtype = kFloat32;  // T, of x
  int64_t outer = 0, channels = 0, inner = 0;
  void* handles[kSlots] = {};
};

void DeleteSyncBN(void* param) {
  auto* op = static_cast<SyncBNOp*>(param);
  for (void* h : op->handles) FreeHandle(h);
  delete op;
}

// A row of `n` values of T as Acc (float for float16 and float32, double for float64):
// float16 is converted into `buf`, the others are read in place.
template <typename T, typename Acc>
const Acc* Load(const T* p, int64_t n, std::vector<Acc>* buf) {
  if constexpr (std::is_same<T, uint16_t>::value) {
    buf->resize(n);
    CastFloat16ToFloat32(buf->data(), p, n);
    return buf->data();
  } else {
    (void)n;
    (void)buf;
    return p;
  }
}

// Writes (or adds) the row `v` of Acc values into `p` of T.
template <typename T, typename Acc>
void Store(T* p, const Acc* v, int64_t n, SyncBNReq req, std::vector<Acc>* buf) {
  if constexpr (std::is_same<T, uint16_t>::value) {
    if (req == SyncBNReq::kAdd) {
      buf->resize(n);
      CastFloat16ToFloat32(buf->data(), p, n);
      for (int64_t i = 0; i < n; ++i) (*buf)[i] += v[i];
      CastFloat32ToFloat16(p, buf->data(), n);
    } else {
      CastFloat32ToFloat16(p, v, n);
    }
  } else if (req == SyncBNReq::kAdd) {
    for (int64_t i = 0; i < n; ++i) p[i] += v[i];
  } else {
    std::copy(v, v + n, p);
  }
}

template <typename A>
void SetPerChannel(A* p, const std::vector<double>& v, SyncBNReq req) {
  if (p == nullptr || req == SyncBNReq::kNull) return;
  for (size_t c = 0; c < v.size(); ++c) {
    if (req == SyncBNReq::kAdd) p[c] += static_cast<A>(v[c]);
    else p[c] = static_cast<A>(v[c]);
  }
}

template <typename T, typename Acc>
void Run(const SyncBNOp& op, void* const* d) {
  const int64_t outer = op.outer, C = op.channels, inner = op.inner;
  const SyncBNParams& p = op.params;
  const T* x = static_cast<const T*>(d[X]);
  std::vector<Acc> in_buf, dy_buf, row, add_buf;
  row.resize(inner);
  auto row_of = [&](int64_t o, int64_t c) { return (o * C + c) * inner; };
  // gamma / sqrt(var + eps) and the mean, per channel, for the forward and the backward.
  auto scale_of = [&](const Acc* mean, const Acc* var, std::vector<Acc>* scale,
                      std::vector<Acc>* invstd) {
    const Acc* gamma = static_cast<const Acc*>(d[GAMMA]);
    scale->resize(C);
    invstd->resize(C);
    for (int64_t c = 0; c < C; ++c) {
      (*invstd)[c] = Acc(1) / std::sqrt(var[c] + static_cast<Acc>(p.eps));
      (*scale)[c] = (p.fix_gamma || gamma == nullptr ? Acc(1) : gamma[c]) * (*invstd)[c];
    }
  };
  switch (op.step) {
    case SyncBNStep::kStats: {
      double* stats = static_cast<double*>(d[STATS]);
      const double n = static_cast<double>(outer * inner);
      std::vector<double> sum(C, 0.0), m2(C, 0.0);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < C; ++c) {
          const Acc* v = Load<T, Acc>(x + row_of(o, c), inner, &in_buf);
          double s = 0;
          for (int64_t i = 0; i < inner; ++i) s += v[i];
          sum[c] += s;
        }
      for (int64_t c = 0; c < C; ++c) sum[c] = n > 0 ? sum[c] / n : 0.0;  // now the mean
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < C; ++c) {
          const Acc* v = Load<T, Acc>(x + row_of(o, c), inner, &in_buf);
          double s = 0;
          const double m = sum[c];
          for (int64_t i = 0; i < inner; ++i) {
            const double e = v[i] - m;
            s += e * e;
          }
          m2[c] += s;
        }
      stats[0] = n;
      for (int64_t c = 0; c < C; ++c) {
        stats[1 + c] = n * sum[c];
        stats[1 + C + c] = m2[c] + n * sum[c] * sum[c];
      }
      break;
    }
    case SyncBNStep::kForward: {
      std::vector<Acc> mean(C), var(C), scale, invstd;
      Acc* running_mean = static_cast<Acc*>(d[MEAN]);
      Acc* running_var = static_cast<Acc*>(d[VAR]);
      if (p.batch_stats) {
        const double* stats = static_cast<const double*>(d[STATS]);
        const double n = stats[0];
        Acc* saved_mean = static_cast<Acc*>(d[SAVED_MEAN]);
        Acc* saved_var = static_cast<Acc*>(d[SAVED_VAR]);
        const Acc keep = static_cast<Acc>(p.momentum);
        const Acc take = static_cast<Acc>(1.0 - static_cast<double>(p.momentum));
        for (int64_t c = 0; c < C; ++c) {
          const double m = n > 0 ? stats[1 + c] / n : 0.0;
          const double v = n > 0 ? std::max(stats[1 + C + c] / n - m * m, 0.0) : 0.0;  // biased
          mean[c] = static_cast<Acc>(m);
          var[c] = static_cast<Acc>(v);
          saved_mean[c] = mean[c];
          saved_var[c] = var[c];
          if (n > 0) {
            running_mean[c] = running_mean[c] * keep + mean[c] * take;
            running_var[c] = running_var[c] * keep + var[c] * take;
          }
        }
      } else {
        std::copy(running_mean, running_mean + C, mean.begin());
        std::copy(running_var, running_var + C, var.begin());
      }
      scale_of(mean.data(), var.data(), &scale, &invstd);
      const Acc* beta = static_cast<const Acc*>(d[BETA]);
      T* y = static_cast<T*>(d[OUT]);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < C; ++c) {
          const Acc* v = Load<T, Acc>(x + row_of(o, c), inner, &in_buf);
          const Acc s = scale[c];
          const Acc shift = (beta ? beta[c] : Acc(0)) - mean[c] * s;
          for (int64_t i = 0; i < inner; ++i) row[i] = v[i] * s + shift;
          Store<T, Acc>(y + row_of(o, c), row.data(), inner, p.out_req, &add_buf);
        }
      break;
    }
    case SyncBNStep::kGradSums: {
      const T* dy = static_cast<const T*>(d[DY]);
      std::vector<Acc> scale, invstd;
      const Acc* mean = static_cast<const Acc*>(d[MEAN]);
      scale_of(mean, static_cast<const Acc*>(d[VAR]), &scale, &invstd);
      std::vector<double> sum_dy(C, 0.0), sum_dy_xhat(C, 0.0);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < C; ++c) {
          const Acc* v = Load<T, Acc>(x + row_of(o, c), inner, &in_buf);
          const Acc* g = Load<T, Acc>(dy + row_of(o, c), inner, &dy_buf);
          const Acc m = mean[c], is = invstd[c];
          double s = 0, sx = 0;
          for (int64_t i = 0; i < inner; ++i) {
            s += g[i];
            sx += static_cast<double>(g[i] * ((v[i] - m) * is));
          }
          sum_dy[c] += s;
          sum_dy_xhat[c] += sx;
        }
      double* sums = static_cast<double*>(d[GRAD_SUMS]);
      std::copy(sum_dy.begin(), sum_dy.end(), sums);
      std::copy(sum_dy_xhat.begin(), sum_dy_xhat.end(), sums + C);
      SetPerChannel(static_cast<Acc*>(d[BETA_GRAD]), sum_dy, p.beta_req);
      if (p.fix_gamma) std::fill(sum_dy_xhat.begin(), sum_dy_xhat.end(), 0.0);
      SetPerChannel(static_cast<Acc*>(d[GAMMA_GRAD]), sum_dy_xhat, p.gamma_req);
      break;
    }
    case SyncBNStep::kGradInput: {
      const T* dy = static_cast<const T*>(d[DY]);
      std::vector<Acc> scale, invstd;
      const Acc* mean = static_cast<const Acc*>(d[MEAN]);
      scale_of(mean, static_cast<const Acc*>(d[VAR]), &scale, &invstd);
      std::vector<Acc> mean_dy(C, Acc(0)), mean_dy_xhat(C, Acc(0));
      if (p.batch_stats) {
        const double* sums = static_cast<const double*>(d[GRAD_SUMS]);
        const double n = static_cast<const double*>(d[STATS])[0];
        for (int64_t c = 0; c < C && n > 0; ++c) {
          mean_dy[c] = static_cast<Acc>(sums[c] / n);
          mean_dy_xhat[c] = static_cast<Acc>(sums[C + c] / n);
        }
      }
      T* dx = static_cast<T*>(d[OUT]);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < C; ++c) {
          const Acc* v = Load<T, Acc>(x + row_of(o, c), inner, &in_buf);
          const Acc* g = Load<T, Acc>(dy + row_of(o, c), inner, &dy_buf);
          const Acc m = mean[c], is = invstd[c], s = scale[c], mdy = mean_dy[c],
                    mdx = mean_dy_xhat[c];
          if (p.batch_stats) {
            for (int64_t i = 0; i < inner; ++i) row[i] = (g[i] - mdy - (v[i] - m) * is * mdx) * s;
          } else {
            for (int64_t i = 0; i < inner; ++i) row[i] = g[i] * s;
          }
          Store<T, Acc>(dx + row_of(o, c), row.data(), inner, p.out_req, &add_buf);
        }
      break;
    }
  }
}

void RunSyncBN(void* /*rctx*/, void* on_complete, void* param) {
  auto* op = static_cast<SyncBNOp*>(param);
  EngineCallback cb;
  std::memcpy(&cb, on_complete, sizeof(cb));
  void* data[kSlots] = {};
  for (int i = 0; i < kSlots; ++i) {
    if (op->handles[i] == nullptr) continue;
    const std::string what = "SyncBatchNorm '" + op->layer + "'";
    Status s = DataAtRun(op->handles[i], Label{what.c_str(), kSlotNames[i]}, &data[i]);
    if (!s.ok()) {
      dmlc::Error err("mxhorovod: " + s.reason());
      cb.fn(cb.engine, cb.param, &err);
      return;
    }
  }
  if (op->dtype == kFloat16) Run<uint16_t, float>(*op, data);
  else if (op->dtype == kFloat32) Run<float, float>(*op, data);
  else Run<double, double>(*op, data);
  cb.fn(cb.engine, cb.param, nullptr);
}

// Which slots a step reads and which it writes.
void Uses(SyncBNStep step, const SyncBNParams& p, std::vector<int>* reads, std::vector<int>* writes) {
  switch (step) {
    case SyncBNStep::kStats:
      *reads = {X};
      *writes = {STATS};
      break;
    case SyncBNStep::kForward:
      if (p.batch_stats) {
        *reads = {X, GAMMA, BETA, STATS};
        *writes = {OUT, MEAN, VAR, SAVED_MEAN, SAVED_VAR};
      } else {
        *reads = {X, GAMMA, BETA, MEAN, VAR};
        *writes = {OUT};
      }
      break;
    case SyncBNStep::kGradSums:
      *reads = {X, DY, MEAN, VAR};
      *writes = {GRAD_SUMS};
      if (p.gamma_req != SyncBNReq::kNull) writes->push_back(GAMMA_GRAD);
      if (p.beta_req != SyncBNReq::kNull) writes->push_back(BETA_GRAD);
      break;
    case SyncBNStep::kGradInput:
      *reads = {X, DY, MEAN, VAR, GAMMA};
      if (p.batch_stats) {
        reads->push_back(GRAD_SUMS);
        reads->push_back(STATS);
      }
      *writes = {OUT};
      break;
  }
}

}  // namespace

Status PushSyncBN(SyncBNStep step, const SyncBNArrays& arrays, const SyncBNParams& params,
                  const std::string& layer) {
  const std::string what = "SyncBatchNorm '" + layer + "'";
  auto bad = [&](const std::string& why) { return Status::InvalidArgument(what + ": " + why); };
  std::vector<int> reads, writes;
  Uses(step, params, &reads, &writes);
  if (step == SyncBNStep::kForward || step == SyncBNStep::kGradInput) {
    if (params.out_req == SyncBNReq::kNull) return bad("nothing to write (req null)");
  }
  void* const* h = SlotsOf(arrays);
  ArrayInfo info[kSlots];
  std::vector<int> used(reads);
  used.insert(used.end(), writes.begin(), writes.end());
  for (int i : used) {
    if (h[i] == nullptr) {
      if (i == GAMMA || i == BETA) continue;  // fix_gamma / center=False may pass none
      return bad(std::string("no '") + kSlotNames[i] + "' array");
    }
    Status s = Describe(h[i], Label{what.c_str(), kSlotNames[i]}, &info[i]);
    if (!s.ok()) return s;
  }
  const ArrayInfo& x = info[X];
  const int ndim = static_cast<int>(x.shape.size());
  if (params.axis < 0 || params.axis >= ndim) {
    return bad("axis " + std::to_string(params.axis) + " is out of range for an input of " +
               std::to_string(ndim) + " dimensions");
  }
  if (x.dtype != kFloat16 && x.dtype != kFloat32 && x.dtype != kFloat64) {
    return bad(std::string("the input is ") + MXDTypeName(x.dtype) +
               ": float16, float32 or float64 only");
  }
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < params.axis; ++i) outer *= x.shape[i];
  for (int i = params.axis + 1; i < ndim; ++i) inner *= x.shape[i];
  const int64_t C = x.shape[params.axis];
  const int acc = x.dtype == kFloat64 ? kFloat64 : kFloat32;
  for (int i : used) {
    if (h[i] == nullptr || i == X) continue;
    int want_dtype = acc;
    int64_t want_n = C;
    if (i == DY || i == OUT) {
      want_dtype = x.dtype;
      want_n = outer * C * inner;
    } else if (i == STATS) {
      want_dtype = kFloat64;
      want_n = 1 + 2 * C;
    } else if (i == GRAD_SUMS) {
      want_dtype = kFloat64;
      want_n = 2 * C;
    }
    int64_t n = 1;
    for (int64_t e : info[i].shape) n *= e;
    if (info[i].dtype != want_dtype || n != want_n) {
      return bad(std::string("'") + kSlotNames[i] + "' is " + MXDTypeName(info[i].dtype) + " of " +
                 std::to_string(n) + " elements, not " + MXDTypeName(want_dtype) + " of " +
                 std::to_string(want_n) + " (the input is " + MXDTypeName(x.dtype) + " with " +
                 std::to_string(C) + " channels)");
    }
  }
  auto* op = new SyncBNOp();
  op->step = step;
  op->params = params;
  op->layer = layer;
  op->dtype = x.dtype;
  op->outer = outer;
  op->channels = C;
  op->inner = inner;
  for (int i : used) {
    if (h[i] == nullptr) continue;
    Status s = KeepAlive(h[i], &op->handles[i]);
    if (!s.ok()) {
      DeleteSyncBN(op);
      return s;
    }
  }
  // The engine's lists: each memory chunk once, a written one only as a write (an array
  // listed as both would wait for itself).
  std::vector<void*> read_list, write_list;
  std::unordered_set<const void*> written, seen;
  for (int i : writes) {
    if (!written.insert(ChunkIdentity(h[i])).second) {
      DeleteSyncBN(op);
      return bad(std::string("'") + kSlotNames[i] + "' shares its memory with another output");
    }
    write_list.push_back(h[i]);
  }
  for (int i : reads) {
    if (h[i] == nullptr) continue;
    const void* chunk = ChunkIdentity(h[i]);
    if (written.count(chunk) || !seen.insert(chunk).second) continue;
    read_list.push_back(h[i]);
  }
  int ctx[2] = {kCPUContext[0], kCPUContext[1]};
  int prop = kNormalProperty;
  int rc = MXEnginePushAsyncND(&RunSyncBN, op, &DeleteSyncBN, ctx, read_list.data(),
                               static_cast<int>(read_list.size()), write_list.data(),
                               static_cast<int>(write_list.size()), &prop, 0, "SyncBatchNorm", false);
  if (rc != 0) {
    DeleteSyncBN(op);
    return Status::UnknownError("MXEnginePushAsyncND failed: " + LastMXNetError());
  }
  return Status::OK();
}

}  // namespace mx
}  // namespace mxhorovod
