#include "stall_inspector.h"

#include <algorithm>
#include <set>
#include <utility>
#include <cstdio>
#include <sstream>

#include "logging.h"

namespace mxhorovod {
namespace {

using Seconds = std::chrono::duration<double>;
constexpr size_t kMaxNamesInWarning = 20;

std::string Secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", s);
  return buf;
}

// The name of the call that made a collective and how it was derived: '<name>' for
// '<name>.<i>' (tensor i of a grouped call, kind 'i'; a grouped allgather's size exchange is
// its tensor 0's name); else the name itself ('-'). An allgather's and an alltoall's size
// exchanges carry the call's own name, so they meet another collective of that name at
// the coordinator (a mismatch error, no stall).
std::pair<std::string, char> CallName(const std::string& name) {
  size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == name.size() ||
      name.find_first_not_of("0123456789", dot + 1) != std::string::npos) {
    return {name, '-'};
  }
  return {name.substr(0, dot), 'i'};
}

bool WaitsAtCall(OpType t) { return t == OpType::kAllgather || t == OpType::kAlltoall; }

bool Disjoint(const std::vector<int>& a, const std::vector<int>& b) {  // both ascending
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j]) return false;
    (a[i] < b[j]) ? ++i : ++j;
  }
  return true;
}

}  // namespace

std::unordered_map<std::string, std::string> StallInspector::SameCallHints(
    const std::vector<const PendingName*>& stalled) const {
  // Stalled names of one call made by disjoint ranks: the ranks called different
  // collectives under one name (a grouped call on some, a single one on others: their
  // first collectives are 'k.0' and 'k'), which never meet.
  // Only names derived differently count ('k' and 'k.0'): 'g.3' and 'g.5' on disjoint
  // ranks are two parameters of one trainer, not one call.
  std::unordered_map<std::string, std::vector<std::pair<const PendingName*, char>>> by_call;
  for (const PendingName* p : stalled) {
    auto call = CallName(p->name);
    by_call[call.first].push_back({p, call.second});
  }
  std::unordered_map<std::string, std::string> hints;
  for (const auto& entry : by_call) {
    const auto& names = entry.second;
    bool split = false;
    for (size_t i = 0; i < names.size() && !split; ++i) {
      for (size_t j = i + 1; j < names.size() && !split; ++j) {
        split = names[i].second != names[j].second &&
                Disjoint(names[i].first->ranks, names[j].first->ranks);
      }
    }
    if (!split) continue;
    std::string calls;
    for (size_t k = 0; k < names.size() && k < 4; ++k) {
      const PendingName* p = names[k].first;
      calls += std::string(calls.empty() ? "" : "; ") + "ranks " + RankList(JobRanks(p->ranks)) +
               " submitted " + OpTypeName(p->op_type) + " '" + p->name + "'";
    }
    if (names.size() > 4) calls += "; ... (" + std::to_string(names.size()) + " names in all)";
    std::string hint = "the ranks made different calls under the name '" + entry.first + "' (" +
                       calls + "; a grouped call submits '<name>.<i>'): every rank must make the same "
                       "collective call under one name";
    for (const auto& named : names) hints[named.first->name] = hint;
  }
  // An allgather or alltoall (its size exchange) stalled beside another call's name
  // submitted by disjoint ranks: allgather and alltoall return only once every rank has
  // sent its size, so each rank waits in its own first such call and never makes the next:
  // the ranks made their calls in different orders (a loop over a Python set or dict whose
  // order differs by process). Horovod's allgather and alltoall wait at the call too.
  for (const PendingName* x : stalled) {
    auto cx = CallName(x->name);
    if (!WaitsAtCall(x->op_type) || hints.count(x->name)) continue;
    for (const PendingName* y : stalled) {
      if (y == x || hints.count(y->name) || CallName(y->name).first == cx.first ||
          !Disjoint(x->ranks, y->ranks)) {
        continue;
      }
      std::string hint =
          "the ranks made their calls in different orders: ranks " + RankList(JobRanks(x->ranks)) +
          " wait in " + OpTypeName(x->op_type) + " '" + x->name + "' while ranks " +
          RankList(JobRanks(y->ranks)) + " submitted " + OpTypeName(y->op_type) + " '" + y->name +
          "'; allgather and alltoall return only when every rank has sent its size, so "
          "a rank waiting in one makes no later call: make them (and the calls around them) in "
          "the same order on every rank";
      hints[x->name] = hint;
      hints[y->name] = hint;
      break;
    }
  }
  return hints;
}

std::string RankList(const std::vector<int>& ranks, size_t max_listed) {
  std::ostringstream os;
  for (size_t i = 0; i < ranks.size() && i < max_listed; ++i) os << (i ? ", " : "") << ranks[i];
  if (ranks.size() > max_listed) os << ", ... (" << ranks.size() << " in all)";
  return os.str();
}

StallInspector::StallInspector(const StallSettings& settings, int rank, int size)
    : settings_(settings), size_(size) {
  if (settings_.check_s <= 0) settings_.enabled = false;
  if (settings_.enabled && settings_.shutdown_s > 0 && settings_.shutdown_s < settings_.check_s) {
    if (rank == 0) {
      LogWarning("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=" + Secs(settings_.shutdown_s) +
                 " is less than HOROVOD_STALL_CHECK_TIME_SECONDS=" + Secs(settings_.check_s) +
                 ", will not shut down (as Horovod)");
    }
    settings_.shutdown_s = 0;
  }
  check_ = std::chrono::duration_cast<Clock::duration>(Seconds(settings_.check_s));
  // Looking a few times per check time bounds the lateness of a report to a tenth of it,
  // and keeps the per-cycle cost at one comparison.
  double period = std::min(1.0, std::max(0.01, settings_.check_s / 10));
  period_ = std::chrono::duration_cast<Clock::duration>(Seconds(period));
  now_ = Clock::now();
  next_hit_check_ = next_table_check_ = now_ + period_;
}

std::vector<int> StallInspector::StalledHits(const PendingHits& pending) {
  std::vector<int> stalled;
  if (!settings_.enabled || now_ < next_hit_check_) return stalled;
  next_hit_check_ = now_ + period_;
  for (auto it = hit_since_.begin(); it != hit_since_.end();) {
    if (!pending.Has(it->first)) {  // answered, evicted or resent since
      it = hit_since_.erase(it);
      continue;
    }
    if (now_ - it->second > check_) {
      stalled.push_back(it->first);
      it = hit_since_.erase(it);
      continue;
    }
    ++it;
  }
  std::sort(stalled.begin(), stalled.end());
  return stalled;
}

std::vector<int> StallInspector::JobRanks(const std::vector<int>& set_ranks) const {
  if (job_ranks_.empty()) return set_ranks;
  std::vector<int> out;
  for (int r : set_ranks) out.push_back(r >= 0 && r < (int)job_ranks_.size() ? job_ranks_[r] : r);
  return out;
}

std::string StallInspector::Describe(const PendingName& p) const {
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (!std::binary_search(p.ranks.begin(), p.ranks.end(), r)) missing.push_back(r);
  }
  return std::string(OpTypeName(p.op_type)) + " '" + p.name + "' waited " +
         Secs(Seconds(now_ - p.since).count()) + " s: missing ranks " + RankList(JobRanks(missing)) +
         " (submitted by " + std::to_string(p.ranks.size()) + " of " + std::to_string(size_) +
         " ranks: " + RankList(JobRanks(p.ranks)) + ")";
}

bool StallInspector::CheckCoordinator(const std::vector<PendingName>& pending,
                                      std::vector<Response>* errors) {
  next_table_check_ = now_ + period_;
  std::vector<const PendingName*> stalled;
  double oldest = 0;
  for (const auto& p : pending) {
    double waited = Seconds(now_ - p.since).count();
    oldest = std::max(oldest, waited);
    if (waited > settings_.check_s) stalled.push_back(&p);
  }
  if (stalled.empty()) {
    warned_ = false;
    return false;
  }
  if (settings_.shutdown_s > 0 && oldest > settings_.shutdown_s) {
    const std::string limit = "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=" + Secs(settings_.shutdown_s) + " s";
    std::string why = stops_job() ? "; mxhorovod shut down on every rank because a stall lasted more than " + limit
                                  : "; " + scope_ + " failed its waiting operations because a stall lasted more than " + limit;
    auto hints = SameCallHints(stalled);
    for (const auto& p : pending) {
      Response r;
      r.type = Response::kError;
      r.op_type = p.op_type;
      r.names = {p.name};
      auto hint = hints.find(p.name);
      r.error = "stalled: " + Prefix() + Describe(p) + why +
                (hint == hints.end() ? "" : "; " + hint->second);
      errors->push_back(std::move(r));
    }
    LogError(Prefix() + "Stall shutdown: " + std::to_string(pending.size()) + " tensor(s) still waiting after " +
             limit + "; failing them" + (stops_job() ? " and shutting down mxhorovod on every rank" : "") +
             " (first: " + Describe(pending.front()) + ")");
    return true;
  }
  if (warned_ && now_ - last_warning_ < check_) return false;
  warned_ = true;
  last_warning_ = now_;
  std::string msg = Prefix() + "One or more tensors were submitted by some ranks and not by others for more "
                    "than HOROVOD_STALL_CHECK_TIME_SECONDS=" + Secs(settings_.check_s) +
                    " s. Ranks submitting different names, or only some ranks submitting, "
                    "deadlock until the missing ranks submit them:";
  for (size_t i = 0; i < stalled.size() && i < kMaxNamesInWarning; ++i) {
    msg += "\n    " + Describe(*stalled[i]);
  }
  if (stalled.size() > kMaxNamesInWarning) {
    msg += "\n    ... and " + std::to_string(stalled.size() - kMaxNamesInWarning) + " more";
  }
  std::set<std::string> hinted;  // one line per hint (every name of its call maps to it)
  for (const auto& h : SameCallHints(stalled)) {
    if (hinted.insert(h.second).second) msg += "\n  Probably " + h.second + ".";
  }
  if (settings_.shutdown_s > 0) {
    msg += std::string("\n  ") + (stops_job() ? "mxhorovod shuts down on every rank" : "the waiting operations fail") +
           " when a stall passes HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=" + Secs(settings_.shutdown_s) + " s.";
  }
  LogWarning(msg);
  return false;
}

std::string StallInspector::ShutdownReason(const StallSettings& settings) {
  return "mxhorovod was shut down on every rank because operations stalled for more than "
         "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=" + Secs(settings.shutdown_s) +
         " s (rank 0 logged which tensors and ranks)";
}

}  // namespace mxhorovod
