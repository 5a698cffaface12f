// pybind11 module mxhorovod._core: argument conversion only. NDArray handles arrive as
// integers (ndarray.handle.value); every failure becomes mxhorovod.common.errors.
// InvalidArgumentError (a ValueError and an MXNetError) whose text names the tensor.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/fusion.h"
#include "common/job_abort.h"
#include "common/loop_stats.h"
#include "common/operations.h"
#include "common/timeline.h"
#include "mxhorovod/c_api.h"
#include "mxnet/c_api_internal.h"
#include "mxnet/cast_op.h"
#include "mxnet/engine_op.h"
#include "mxnet/ndarray.h"
#include "mxnet/shared_array.h"
#include "mxnet/sync_bn_op.h"
#include "python/calls.h"
#include "ops/link_pace.h"

namespace py = pybind11;
using namespace mxhorovod;

namespace mxhorovod {
namespace binding {

void* H(uintptr_t h) { return reinterpret_cast<void*>(h); }

// Bad input refused at the call: mxhorovod.common.errors.InvalidArgumentError, a ValueError that
// is also an MXNetError (what Horovod's check_call raises for the same cases).
[[noreturn]] void ThrowInvalid(const std::string& text) {
  py::object cls = py::module_::import("mxhorovod.common.errors").attr("InvalidArgumentError");
  PyErr_SetString(cls.ptr(), text.c_str());
  throw py::error_already_set();
}

// -2: the collective ran (synchronously, under MXNet's NaiveEngine) and failed: raised as
// the MXNetError that the threaded engines raise at the next read of the outputs.
void Check(int rc) {
  if (rc == -2) {
    py::object mxnet_error = py::module_::import("mxnet.base").attr("MXNetError");
    PyErr_SetString(mxnet_error.ptr(), MXHorovodGetLastError());
    throw py::error_already_set();
  }
  if (rc != 0) ThrowInvalid(MXHorovodGetLastError());
}

void Raise(const Status& s) {
  if (!s.ok()) ThrowInvalid(s.reason());
}

void Init(int64_t comm_f2c, const std::vector<int>& ranks,
          const std::vector<std::vector<int>>& process_sets, bool dynamic,
          const std::string& cpu_quotas) {
  Status s;
  {
    py::gil_scoped_release nogil;
    s = Initialize(comm_f2c, ranks, process_sets, dynamic, CpuQuotas{cpu_quotas});
  }
  Raise(s);
}

// Settles the array's layout before a collective reads it: mx::WaitDefaultLayout, for an
// array MKLDNN may convert (mx::MayConvertLayout, checked first: it takes no lock) or for
// any array (`any_array`). Not when a collective of ours
// still reads or writes the array: its layout was settled for that one (or it writes the
// default layout), and waiting for the array's readers and writers would wait for it (a
// hang when the ranks issue two collectives of one array, or a collective of another's
// output, in different orders). A layout change slipped in between fails the collective on
// every rank with an error naming it.
Status Settle(void* h, bool any_array) {
  if (!any_array && !mx::MayConvertLayout(h)) return Status::OK();
  if (mx::UsedByOurCollective(h)) return Status::OK();
  return mx::WaitDefaultLayout(h);
}

// The error the other ranks get when a call's input cannot be read on this rank (waiting
// for it raised the error of the operation that wrote it): the call is submitted as failed
// (mx::Call's fail_with) so that they do not wait for this rank; here it raises `s`.
std::string UnreadableInput(const Status& s) {
  return s.ok() ? std::string() : "its input could not be read on this rank: " + s.reason();
}

}  // namespace binding
}  // namespace mxhorovod

using namespace mxhorovod::binding;

namespace {

// A group's names: a list of str as given, or one str `base` for n tensors named
// '<base>.<i>' (the group convention; formatting 1,000 names in Python cost 0.4 ms).
// `made` (if given): whether the names were made here, distinct by construction.
std::vector<std::string> GroupNames(const py::object& names, size_t n, bool* made = nullptr) {
  const bool base_given = py::isinstance<py::str>(names);
  if (made) *made = base_given;
  if (!base_given) return names.cast<std::vector<std::string>>();
  const std::string base = names.cast<std::string>() + ".";
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(base + std::to_string(i));
  return out;
}

// Settles the inputs' layout first when asked (see Settle): Python asks unless
// MXNet lacks MKLDNN or the call is a gradient reduction.
void CallGrouped(OpType type, const char* what, const std::vector<uintptr_t>& ins,
                 const std::vector<uintptr_t>& outs, const py::object& name_or_names, int op,
                 double pre, double post, int priority, int ps, bool settle,
                 bool size_exchange = false) {
  bool made = false;
  const std::vector<std::string> names = GroupNames(name_or_names, ins.size(), &made);
  if (ins.size() != outs.size() || ins.size() != names.size()) {
    ThrowInvalid(std::string(what) + ": inputs, outputs and names differ in length");
  }
  std::vector<void*> in, out;
  in.reserve(ins.size());
  out.reserve(ins.size());
  for (size_t i = 0; i < ins.size(); ++i) {
    in.push_back(H(ins[i]));
    out.push_back(H(outs[i]));
  }
  int rc = 0;
  Status s;
  {
    py::gil_scoped_release nogil;
    for (size_t i = 0; settle && s.ok() && i < in.size(); ++i) s = Settle(in[i], false);
    const std::string why = UnreadableInput(s);
    rc = mx::Call(type, in.data(), out.data(), (int)in.size(), names.data(), op, pre, post,
                  priority, ps, s.ok() ? nullptr : &why, made, size_exchange, /*grouped=*/true);
  }
  Raise(s);
  Check(rc);
}

py::tuple TopologyTuple() {
  Topology t = GetTopology();
  return py::make_tuple(t.rank, t.size, t.local_rank, t.local_size, t.cross_rank, t.cross_size);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "mxhorovod core: background thread, negotiation, fusion, MPI (internal)";
#ifdef MXHOROVOD_MXNET_VERSION
  m.attr("MXNET_VERSION") = MXHOROVOD_MXNET_VERSION;  // the MXNet whose headers built us
#endif
  m.def("init", &Init, py::arg("comm_f2c") = kWorldComm, py::arg("ranks") = std::vector<int>(),
        py::arg("process_sets") = std::vector<std::vector<int>>(), py::arg("dynamic") = false,
        py::arg("cpu_quotas") = std::string());
  m.attr("WORLD_COMM") = kWorldComm;
  m.def("shutdown", [] { py::gil_scoped_release nogil; Shutdown(); });
  m.def("finalize_mpi", [] { py::gil_scoped_release nogil; return FinalizeMPI(); },
        "MPI_Finalize if mxhorovod started MPI here and it still runs; whether it did");
  m.def("wait_local_work", [] { py::gil_scoped_release nogil; return WaitLocalWork(); });
  m.def("is_initialized", &IsInitialized);
  m.def("is_recording", &mx::AutogradIsRecording, "mx.autograd.is_recording(), without ctypes");
  m.def("engine_noop", [](uintptr_t h) { Raise(mx::PushNoop(H(h))); },
        "benchmarks: one engine operation on the array that completes at once");
  m.def("cast", [](uintptr_t src, uintptr_t dst, int priority, const std::string& name) {
    Status s;
    {
      py::gil_scoped_release nogil;  // NaiveEngine runs it before the push returns
      s = mx::PushCast(H(src), H(dst), priority, name);
    }
    Raise(s);
  }, py::arg("src"), py::arg("dst"), py::arg("priority") = 0, py::arg("name") = std::string(),
  "mx.nd.cast(src, out=dst) between float32 and float16, by the F16C kernels; `name` "
  "(the tensor's) names it in the error of a cast that fails when it runs");
  m.def("sync_bn", [](int step, py::dict arrays, int axis, double eps, float momentum,
                      bool fix_gamma, bool batch_stats, int out_req, int gamma_req, int beta_req,
                      const std::string& layer) {
    mx::SyncBNArrays a;
    void** slots = reinterpret_cast<void**>(&a);
    static const char* const names[] = {"x", "dy", "gamma", "beta", "mean", "var", "stats",
                                        "grad_sums", "saved_mean", "saved_var", "out",
                                        "gamma_grad", "beta_grad"};
    for (auto item : arrays) {
      const std::string key = item.first.cast<std::string>();
      const auto at = std::find_if(std::begin(names), std::end(names),
                                   [&](const char* n) { return key == n; });
      if (at == std::end(names)) throw py::value_error("sync_bn: no array slot '" + key + "'");
      slots[at - std::begin(names)] = H(item.second.cast<uintptr_t>());
    }
    mx::SyncBNParams p;
    p.axis = axis;
    p.eps = eps;
    p.momentum = momentum;
    p.fix_gamma = fix_gamma;
    p.batch_stats = batch_stats;
    p.out_req = static_cast<mx::SyncBNReq>(out_req);
    p.gamma_req = static_cast<mx::SyncBNReq>(gamma_req);
    p.beta_req = static_cast<mx::SyncBNReq>(beta_req);
    Status s;
    {
      py::gil_scoped_release nogil;  // NaiveEngine runs it before the push returns
      s = mx::PushSyncBN(static_cast<mx::SyncBNStep>(step), a, p, layer);
    }
    Raise(s);
  }, "SyncBatchNorm's local arithmetic as one engine operation (mxnet/sync_bn_op.h); `arrays` "
  "maps slot names to NDArray handles, reqs are 0 null, 1 write, 2 add");
  // A DLPack capsule ("dltensor", for mx.nd.from_dlpack) of a zero-filled flat array the
  // peers on this host can map, or None when none can be made.
  m.def("shared_array", [](int64_t elements, int code, int bits) -> py::object {
    std::string why;
    DLManagedTensor* t = mx::NewSharedArray(elements, (uint8_t)code, (uint8_t)bits, &why);
    if (!t) return py::none();
    // Deleted here unless a consumer took it (and renamed the capsule "used_dltensor").
    return py::capsule(t, "dltensor", [](PyObject* o) {
      if (!PyCapsule_IsValid(o, "dltensor")) return;
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(o, "dltensor"));
      m->deleter(m);
    });
  });
  m.def("stop_reason", &StopReason);
  m.def("host_quota", &HostQuota, "tests: what the ranks' cgroup quota chains allow together");
  // Rank 0 records (as in Horovod); on the other ranks these are no-ops.
  m.def("start_timeline", [](const std::string& path, bool mark_cycles) {
    if (GetTopology().rank != 0) return;
    Status s = Timeline::Get().Start(path, mark_cycles);
    if (!s.ok()) ThrowInvalid(s.reason());
  });
  m.def("stop_timeline", [] { py::gil_scoped_release nogil; Timeline::Get().Stop(); });
  m.def("timeline_path", [] { return Timeline::Get().path(); }, "the file being recorded, or ''");
  m.def("abort_job", [](int code) { py::gil_scoped_release nogil; AbortJob(code); },
        "MPI_Abort(MPI_COMM_WORLD, code); returns only if MPI is not running");
  m.def("install_signal_reports", &InstallSignalReports);
  m.def("mpi_world", [] {
    int rank = -1, size = 0;
    const bool running = MPIWorld(&rank, &size);
    return py::make_tuple(running, rank, size);
  }, "(MPI runs in this process, its rank in MPI_COMM_WORLD, the size), by anyone started");
  m.def("topology", &TopologyTuple, "(rank, size, local_rank, local_size, cross_rank, cross_size)");
  m.def("mpi_threads_supported", &MPIThreadsSupported);
  m.def("process_sets", [] {
    py::list out;
    for (const auto& ps : ProcessSets()) {
      out.append(py::make_tuple(ps->id, ps->ranks, ps->included, ps->rank, ps->size));
    }
    return out;
  }, "[(id, ranks, included, rank in set or -1, size)] of the registered sets");
  m.def("queue_lines", [](int32_t id) {
    for (const auto& ps : ProcessSets()) {
      if (ps->id == id) return static_cast<int64_t>(ps->queue.Lines());
    }
    return static_cast<int64_t>(-1);
  }, "names with a call-order line kept in the set's queue (-1: no such set); for tests");
  m.def("add_process_set", [](const std::vector<int>& ranks) {
    int32_t id = -1;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = AddProcessSet(ranks, &id);
    }
    Raise(s);
    return id;
  });
  m.def("join", []() {
    int last = -1;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = Join(&last);
    }
    Raise(s);
    return last;
  }, "hvd.join(): blocks until every rank has joined; returns the rank that joined last");
  m.def("set_join_identity", [](bool on) { mx::SetJoinIdentity(on); },
        "Request::join_identity of this thread's next allreduce calls (internal checks)");
  m.def("remove_process_set", [](int32_t id) {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = RemoveProcessSet(id);
    }
    Raise(s);
  });
  m.def("loop_stats", [] {
    LoopStats& st = Stats();
    py::dict d;
    for (const auto& kv : {std::make_pair("cycles", &st.cycles), std::make_pair("tensors", &st.tensors),
                           std::make_pair("groups", &st.groups),
                           std::make_pair("negotiate_ns", &st.negotiate_ns),
                           std::make_pair("plan_ns", &st.plan_ns),
                           std::make_pair("execute_ns", &st.execute_ns),
                           std::make_pair("complete_ns", &st.complete_ns),
                           std::make_pair("sleep_ns", &st.sleep_ns)}) {
      d[kv.first] = kv.second->load(std::memory_order_relaxed);
    }
    return d;
  }, "The background thread's time by stage since init() (common/loop_stats.h): counts, "
     "and nanoseconds summed per stage (benchmarks/call_cost.py)");
  AddFastAllreduce(m);  // python/fast_call.cc: a METH_FASTCALL function, not pybind11's
  m.def("grouped_allreduce", [](const std::vector<uintptr_t>& ins, const std::vector<uintptr_t>& outs,
                                const py::object& names, int op, double pre, double post,
                                int priority, int ps, bool settle) {
    CallGrouped(OpType::kAllreduce, "grouped_allreduce", ins, outs, names, op, pre,
                post, priority, ps, settle);
  });
  m.def("grouped_reducescatter", [](const std::vector<uintptr_t>& ins,
                                    const std::vector<uintptr_t>& outs,
                                    const py::object& names, int op, double pre,
                                    double post, int priority, int ps, bool settle) {
    CallGrouped(OpType::kReducescatter, "grouped_reducescatter", ins, outs, names,
                op, pre, post, priority, ps, settle);
  });
  // size_exchange: an allgather's or alltoall's size exchange (Request::size_exchange).
  // settle: as for allreduce (Settle; an inference-mode forward's output or weight in
  // MKLDNN's layout failed the gather on every rank).
  m.def("grouped_allgather", [](const std::vector<uintptr_t>& ins, const std::vector<uintptr_t>& outs,
                                const py::object& names, int priority, int ps, bool size_exchange,
                                bool settle) {
    CallGrouped(OpType::kAllgather, "grouped_allgather", ins, outs, names, 0, 1.0, 1.0, priority, ps,
                settle, size_exchange);
  }, py::arg("inputs"), py::arg("outputs"), py::arg("names"), py::arg("priority"),
     py::arg("process_set"), py::arg("size_exchange") = false, py::arg("settle") = false);
  // wait: 0 none; 1 the input's writers (wait_to_read); 2 its writers and readers, then the
  // default layout (Settle: MXNet with MKLDNN). If the wait raises the error of the operation
  // that wrote the input, the call is submitted as failed (the other ranks get the error)
  // and raises it here.
  m.def("broadcast", [](uintptr_t in, uintptr_t out, const std::string& name, int root, int priority,
                        int ps, int wait) {
    int rc;
    Status s;
    {
      py::gil_scoped_release nogil;
      if (wait == 2) {
        s = Settle(H(in), true);
      } else if (wait == 1) {
        s = mx::WaitWriters(H(in));
      }
      const std::string why = UnreadableInput(s);
      rc = mx::Broadcast(H(in), H(out), name, root, priority, ps, s.ok() ? nullptr : &why);
    }
    Raise(s);
    Check(rc);
  }, py::arg("input"), py::arg("output"), py::arg("name"), py::arg("root_rank"),
     py::arg("priority"), py::arg("process_set"), py::arg("wait") = 0);
  m.def("alltoall", [](uintptr_t in, uintptr_t out, const std::string& name,
                       const std::vector<int64_t>& splits, const std::vector<int64_t>& recv_splits,
                       int priority, int ps, bool size_exchange, bool settle) {
    if (splits.size() != recv_splits.size()) ThrowInvalid("alltoall: splits sizes differ");
    int rc;
    Status s;
    {
      py::gil_scoped_release nogil;
      if (settle) s = Settle(H(in), false);  // as for allreduce (see Settle)
      const std::string why = UnreadableInput(s);
      rc = mx::Alltoall(H(in), H(out), name.c_str(), splits.data(), recv_splits.data(),
                        (int)splits.size(), priority, ps, size_exchange, s.ok() ? nullptr : &why);
    }
    Raise(s);
    Check(rc);
  }, py::arg("input"), py::arg("output"), py::arg("name"), py::arg("splits"),
     py::arg("recv_splits"), py::arg("priority"), py::arg("process_set"),
     py::arg("size_exchange") = false, py::arg("settle") = false);
  // A call that Python's checks refused on this rank: the same call fails on the other ranks
  // instead of waiting for this one (mx::SubmitRefused). `names`: a list of str, or a base
  // str for `n` tensors named '<base>.<i>'. Nothing if this rank is not a member of the set.
  m.def("refuse", [](const std::string& op, const py::object& names, size_t n, int ps,
                     const std::string& why) {
    int type = 0;
    while (type <= static_cast<int>(OpType::kReducescatter) && op != OpTypeName(static_cast<OpType>(type))) ++type;
    if (type > static_cast<int>(OpType::kReducescatter)) ThrowInvalid("refuse: unknown collective " + op);
    std::vector<std::string> all = GroupNames(names, n);
    py::gil_scoped_release nogil;
    std::shared_ptr<ProcessSet> set;
    if (!MemberSet(ps, op.c_str(), nullptr, &set).ok()) return;
    mx::SubmitRefused(std::move(set), static_cast<OpType>(type), all, why);
  });
  // A grouped allreduce / reducescatter given an empty list on this rank (op: "allreduce"
  // or "reducescatter"): submits '<base>.0' as a group of 0 tensors (mx::SubmitEmptyGroup),
  // so that peers that passed tensors fail instead of waiting. Nothing if this rank is not
  // a member of the set (or mxhorovod is not running).
  m.def("empty_group", [](const std::string& op, const py::object& base, int ps) {
    const OpType type = op == "reducescatter" ? OpType::kReducescatter : OpType::kAllreduce;
    if (op != OpTypeName(type)) ThrowInvalid("empty_group: not a reduction: " + op);
    const std::string name = GroupNames(base, 1)[0];
    py::gil_scoped_release nogil;
    std::shared_ptr<ProcessSet> set;
    if (!MemberSet(ps, op.c_str(), nullptr, &set).ok()) return;
    mx::SubmitEmptyGroup(std::move(set), type, name);
  });
  // Test hook for the fusion planner: items are (fusable, dtype, reduce_op, prescale,
  // postscale, bytes); returns the groups of item indices.
  m.def("plan_fusion", [](const std::vector<std::tuple<bool, int, int, double, double, int64_t>>& items,
                          int64_t threshold) {
    std::vector<FusionItem> v;
    for (const auto& it : items) {
      v.push_back({std::get<0>(it), OpType::kAllreduce, (DataType)std::get<1>(it),
                   (ReduceOp)std::get<2>(it), std::get<3>(it), std::get<4>(it), std::get<5>(it)});
    }
    return PlanFusion(v, threshold);
  });
  m.def("link_pace", [] { return py::make_tuple(LinkRateEstimate(), LinkPauseUs()); },
        "(the link rate measured by allreduces between hosts in bytes/s, 0: none yet; the "
        "pause between tests of a wait between hosts it gives, in microseconds)");
  m.def("note_link_allreduce", &NoteLinkAllreduce, py::arg("bytes"), py::arg("hosts"),
        py::arg("seconds"), "tests: one measurement of the link pace (no job running)");
  m.def("reset_link_pace", &ResetLinkPace, py::arg("fixed_us") = -1,
        "tests: forget the link pace, and fix the pause (>= 0) or not (-1) (no job running)");
}
