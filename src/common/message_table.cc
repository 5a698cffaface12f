#include "message_table.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <sstream>

namespace mxhorovod {
namespace {

std::string Mismatch(const std::string& what, const Request& a, const Request& b,
                     const std::string& va, const std::string& vb) {
  std::ostringstream os;
  os << "Mismatched " << what << " for " << OpTypeName(a.op_type) << " '" << a.name
     << "': rank " << a.rank << " has " << va << ", rank " << b.rank << " has " << vb;
  return os.str();
}

// "1", "1, 3": ranks in an error message.
std::string RankList(const std::vector<int64_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

void MessageTable::Add(const std::vector<Request>& reqs, std::vector<Response>* ready) {
  for (const auto& r : reqs) {
    if (r.op_type == OpType::kJoin) {
      AddJoin(r, ready);
      continue;
    }
    if (!drop_.empty() && drop_.erase({r.name, r.rank})) continue;
    auto& slot = table_[r.name];
    if (slot.empty()) {
      slot.resize(size_);
      order_.push_back(r.name);
      since_[r.name] = Arrival{std::chrono::steady_clock::now(), std::prev(order_.end())};
      for (auto& s : slot) s.rank = -1;
    }
    if (r.rank < 0 || r.rank >= size_) continue;
    slot[r.rank] = r;
    if (Complete(slot)) ready->push_back(Finish(r.name));
  }
}

bool MessageTable::Complete(const std::vector<Request>& slot) const {
  for (int i = 0; i < size_; ++i) {
    if (slot[i].rank < 0 && !(joined_count_ && joined_[i])) return false;
  }
  return true;
}

Response MessageTable::Finish(const std::string& name) {
  std::vector<Request> done = std::move(table_[name]);
  Erase(name);
  std::vector<Request> present;
  std::vector<int64_t> joined;
  for (int i = 0; i < size_; ++i) {
    if (done[i].rank >= 0) {
      present.push_back(done[i]);
    } else {
      joined.push_back(i);
    }
  }
  Response resp = Build(present);
  if (resp.type == Response::kError) {
    DropGroupExtras(present, &resp);
    return resp;
  }
  if (joined.empty()) return resp;
  const Request& a = present[0];
  // Adasum takes zeros too: Adasum(a, 0) = a (ops/adasum.h), so a joined rank drops out.
  bool zeros_ok = a.op_type == OpType::kAllreduce &&
                  (a.reduce_op == ReduceOp::kSum || a.reduce_op == ReduceOp::kAverage ||
                   a.reduce_op == ReduceOp::kAdasum);
  if (a.op_type == OpType::kAllreduce && !zeros_ok) {  // Min, Max, Product: the identity
    zeros_ok = std::all_of(present.begin(), present.end(), [](const Request& q) { return q.join_identity; });
  }
  if (!zeros_ok) {
    std::string op = OpTypeName(a.op_type);
    if (a.op_type == OpType::kAllreduce) op += std::string(" (") + ReduceOpName(a.reduce_op) + ")";
    resp.type = Response::kError;
    resp.error = op + " '" + a.name + "' cannot run while " +
                 (joined.size() == 1 ? "rank " : "ranks ") + RankList(joined) +
                 (joined.size() == 1 ? " has" : " have") +
                 " joined (hvd.join()): a joined rank adds zeros, which only Sum, Average "
                 "and Adasum allreduces can take; run it before join() or after every rank has joined";
    resp.first_dims.clear();
    return resp;
  }
  resp.joined = std::move(joined);
  resp.elements = NumElements(a.shape);
  return resp;
}

void MessageTable::AddJoin(const Request& r, std::vector<Response>* ready) {
  if (r.rank < 0 || r.rank >= size_) return;
  if (joined_.empty()) joined_.assign(size_, 0);
  if (!joined_[r.rank]) {
    if (!joined_count_) join_since_ = std::chrono::steady_clock::now();
    joined_[r.rank] = 1;
    ++joined_count_;
  }
  last_joined_ = r.rank;
  // Names waiting only for joined ranks are ready now, in first-arrival order.
  std::vector<std::string> now;
  for (const auto& name : order_) {
    if (Complete(table_.at(name))) now.push_back(name);
  }
  for (const auto& name : now) {
    if (table_.count(name)) ready->push_back(Finish(name));
  }
  if (joined_count_ < size_) return;
  Response done;
  done.op_type = OpType::kJoin;
  done.dtype = DataType::kInt64;
  done.names = {r.name};
  done.first_dims = {last_joined_};
  ready->push_back(std::move(done));
  joined_.assign(size_, 0);
  joined_count_ = 0;
  last_joined_ = -1;
}

std::vector<int> MessageTable::Joined() const {
  std::vector<int> out;
  for (int i = 0; i < (int)joined_.size(); ++i) {
    if (joined_[i]) out.push_back(i);
  }
  return out;
}

Response MessageTable::Build(const std::vector<Request>& reqs) const {
  const Request& a = reqs[0];
  Response resp;
  resp.op_type = a.op_type;
  resp.dtype = a.dtype;
  resp.reduce_op = a.reduce_op;
  resp.root_rank = a.root_rank;
  resp.prescale = a.prescale;
  resp.postscale = a.postscale;
  resp.names = {a.name};
  std::string err;
  for (const auto& r : reqs) {
    if (!r.local_error.empty()) {
      err = std::string(OpTypeName(r.op_type)) + " '" + r.name + "' failed on rank " +
            std::to_string(r.rank) + ": " + r.local_error;
      break;
    }
  }
  for (size_t i = 1; i < reqs.size() && err.empty(); ++i) {
    const Request& b = reqs[i];
    const bool reduces = a.op_type == OpType::kAllreduce || a.op_type == OpType::kReducescatter;
    if (b.op_type != a.op_type) {
      err = Mismatch("operations", a, b, OpTypeName(a.op_type), OpTypeName(b.op_type));
    } else if (b.size_exchange != a.size_exchange) {  // only through the C API
      auto what = [](const Request& q) {
        return std::string(OpTypeName(q.op_type)) + (q.size_exchange ? " (its size exchange)" : " (its data)");
      };
      err = Mismatch("operations", a, b, what(a), what(b));
    } else if (IsControl(a.op_type)) {
      if (b.shape != a.shape) {
        err = std::string(OpTypeName(a.op_type)) + ": the ranks disagree: rank " +
              std::to_string(a.rank) + " asks for " + ShapeString(a.shape) + ", rank " +
              std::to_string(b.rank) + " for " + ShapeString(b.shape);
      }
    } else if (b.grouped != a.grouped && a.group_size >= 0 && b.group_size >= 0) {
      auto call = [](const Request& q) {
        return q.grouped ? "a grouped call of " + std::to_string(q.group_size) +
                               (q.group_size == 1 ? " tensor" : " tensors")
                         : std::string("a single call");
      };
      err = Mismatch("calls", a, b, call(a), call(b)) +
            " (a grouped call under the name N names its tensors 'N.0', 'N.1' and so on: here "
            "a grouped call and a single call share a name; give them distinct names)";
    } else if (b.group_size != a.group_size && a.group_size >= 0 && b.group_size >= 0) {
      err = std::string("Mismatched numbers of tensors in the call of ") + OpTypeName(a.op_type) +
            " '" + a.name + "': rank " + std::to_string(a.rank) + " passed " +
            std::to_string(a.group_size) + ", rank " + std::to_string(b.rank) + " passed " +
            std::to_string(b.group_size) + " (a grouped call must have the same length on every rank)";
    } else if (b.dtype != a.dtype) {
      err = Mismatch("data types", a, b, DTypeName(a.dtype), DTypeName(b.dtype));
    } else if (reduces && b.reduce_op != a.reduce_op) {
      err = Mismatch("reduce ops", a, b, ReduceOpName(a.reduce_op), ReduceOpName(b.reduce_op));
    } else if (reduces && b.prescale != a.prescale) {
      err = Mismatch("prescale factors", a, b, Num(a.prescale), Num(b.prescale));
    } else if (reduces && b.postscale != a.postscale) {
      err = Mismatch("postscale factors", a, b, Num(a.postscale), Num(b.postscale));
    } else if (a.op_type == OpType::kBroadcast && b.root_rank != a.root_rank) {
      err = Mismatch("root ranks", a, b, std::to_string(a.root_rank), std::to_string(b.root_rank));
    } else if (reduces || a.op_type == OpType::kBroadcast) {
      if (b.shape != a.shape) err = Mismatch("shapes", a, b, ShapeString(a.shape), ShapeString(b.shape));
    } else if (b.shape.size() != a.shape.size() ||
               !std::equal(a.shape.begin() + std::min<size_t>(1, a.shape.size()), a.shape.end(),
                           b.shape.begin() + std::min<size_t>(1, b.shape.size()))) {
      err = Mismatch("shapes (all but the first dimension must agree)", a, b,
                     ShapeString(a.shape), ShapeString(b.shape));
    }
  }
  if (err.empty() && a.op_type == OpType::kBroadcast && (a.root_rank < 0 || a.root_rank >= size_)) {
    err = "broadcast '" + a.name + "': root rank " + std::to_string(a.root_rank) +
          " is not a rank of this process set (size " + std::to_string(size_) + ")";
  }
  if (err.empty() && a.op_type == OpType::kAlltoall) {
    // Rank j receives splits_i[j] rows from rank i; the senders' splits must add up.
    for (const auto& r : reqs) {
      if ((int)r.splits.size() != size_) {
        err = "alltoall '" + a.name + "': rank " + std::to_string(r.rank) + " gave " +
              std::to_string(r.splits.size()) + " splits for " + RankCount(size_);
        break;
      }
    }
  }
  if (err.empty() && a.group_size == 0) {
    // Every rank passed an empty list: nothing to run, and no rank reads this (an empty
    // call's entry ignores its answer). An error, not kOk: never cached, never executed.
    err = std::string("grouped ") + OpTypeName(a.op_type) + " '" + a.name +
          "': every rank passed an empty list (nothing to run)";
  }
  if (err.empty() && IsControl(a.op_type)) resp.first_dims = a.shape;  // the ranks (or the id)
  if (err.empty() && a.op_type == OpType::kAllgather) {
    for (const auto& r : reqs) resp.first_dims.push_back(r.shape.empty() ? 1 : r.shape[0]);
  }
  if (!err.empty()) {
    resp.type = Response::kError;
    resp.error = err;
  }
  return resp;
}

void MessageTable::DropGroupExtras(const std::vector<Request>& reqs, Response* resp) {
  const std::string& name = reqs[0].name;
  // Once per group, at its tensor 0 (every group has one; the tensors 1 .. smallest-1 get
  // the same mismatch error by themselves).
  if (name.size() < 2 || name.compare(name.size() - 2, 2, ".0") != 0) return;
  // A request without a group size (-1: an allgather's or alltoall's size exchange, a
  // broadcast) is one tensor: a grouped reduction of n tensors failed at its tensor 0 by
  // another kind of collective of that name (a mismatch) has n - 1 extras to fail too.
  int32_t lo = std::numeric_limits<int32_t>::max(), hi = 0;
  for (const auto& r : reqs) {
    if (!r.local_error.empty()) return;  // a refusal names all of its call's tensors
    const int32_t n = r.group_size < 0 ? 1 : r.group_size;
    lo = std::min(lo, n);
    hi = std::max(hi, n);
  }
  if (lo == hi) return;
  const std::string base = name.substr(0, name.size() - 1);
  // The extras come first: a rank fails its own call's extras before its tensor 0, which
  // completes that call and may admit its next call of these names, whose tensors must
  // not be failed by this response. From tensor 1 at least: an empty call (lo 0) stands
  // in for tensor 0, which this response names already.
  std::vector<std::string> names;
  for (int32_t k = std::max<int32_t>(lo, 1); k < hi; ++k) {
    const std::string extra = base + std::to_string(k);
    names.push_back(extra);
    auto it = table_.find(extra);
    for (const auto& r : reqs) {
      if (r.group_size <= k) continue;  // this rank has no tensor k (or no group size)
      if (it != table_.end() && it->second[r.rank].rank >= 0) {
        it->second[r.rank].rank = -1;  // submitted already: forget it
      } else {
        drop_.insert({extra, r.rank});  // still to come (a later cycle): ignore it then
      }
    }
    if (it != table_.end() &&
        std::none_of(it->second.begin(), it->second.end(), [](const Request& q) { return q.rank >= 0; })) {
      Erase(extra);
    }
  }
  names.insert(names.end(), resp->names.begin(), resp->names.end());
  resp->names.swap(names);
}

void MessageTable::Erase(const std::string& name) {
  if (!table_.erase(name)) return;
  auto it = since_.find(name);
  if (it == since_.end()) return;
  order_.erase(it->second.pos);
  since_.erase(it);
}

std::vector<PendingName> MessageTable::Pending() const {
  std::vector<PendingName> out;
  for (const auto& name : order_) {
    PendingName p;
    p.name = name;
    p.since = since_.at(name).since;
    for (const auto& r : table_.at(name)) {
      if (r.rank < 0) continue;
      p.ranks.push_back(r.rank);
      p.op_type = r.op_type;
    }
    out.push_back(std::move(p));
  }
  if (joined_count_) {  // the stall inspector names the ranks that have not joined yet
    PendingName p;
    p.name = "join";
    p.op_type = OpType::kJoin;
    p.since = join_since_;
    for (int i = 0; i < size_; ++i) {
      if (joined_[i]) p.ranks.push_back(i);
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace mxhorovod
