#include "tensor_queue.h"

#include <algorithm>
#include <iterator>

namespace mxhorovod {

uint64_t TensorQueue::Register(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t ticket = next_ticket_++;
  for (const auto& n : names) {
    Line& line = lines_[n];
    if (line.empty()) {  // new, or kept empty since its name's last call
      line.tickets.clear();
      line.head = 0;
      ++active_lines_;
    }
    line.used = sweeps_;
    line.tickets.push_back(ticket);
  }
  return ticket;
}

void TensorQueue::Sweep() {
  for (auto it = lines_.begin(); it != lines_.end();) {
    it = it->second.empty() && it->second.used < sweeps_ ? lines_.erase(it) : std::next(it);
  }
  ++sweeps_;
  finished_since_sweep_ = 0;
  kept_at_sweep_ = lines_.size();
}

bool TensorQueue::FirstInLines(const std::vector<std::string>& names, uint64_t ticket) const {
  for (const auto& n : names) {
    auto it = lines_.find(n);
    if (it == lines_.end() || it->second.empty() || it->second.front() != ticket) return false;
  }
  return true;
}

bool TensorQueue::Admit(const std::vector<std::string>& names, uint64_t ticket,
                        std::function<void()> run) {
  std::lock_guard<std::mutex> lk(mu_);
  if (FirstInLines(names, ticket)) return true;
  waiting_[ticket] = Waiting{names, std::move(run)};
  return false;
}

std::vector<std::function<void()>> TensorQueue::Finish(const std::vector<std::string>& names,
                                                       uint64_t ticket) {
  std::vector<uint64_t> fronts;  // the lines' new first tickets: the only ones that may be admitted
  std::vector<std::function<void()>> admitted;
  std::lock_guard<std::mutex> lk(mu_);
  ++finished_;
  for (const auto& n : names) {
    auto it = lines_.find(n);
    if (it == lines_.end() || it->second.empty()) continue;
    Line& line = it->second;
    if (line.front() == ticket) {
      ++line.head;
    } else {  // never admitted (its push failed): out of the middle
      auto at = std::find(line.tickets.begin() + line.head, line.tickets.end(), ticket);
      if (at != line.tickets.end()) line.tickets.erase(at);
    }
    if (line.empty()) {
      --active_lines_;
      continue;
    }
    if (line.head > 32 && line.head * 2 > line.tickets.size()) {  // amortized O(1) per ticket
      line.tickets.erase(line.tickets.begin(), line.tickets.begin() + line.head);
      line.head = 0;
    }
    fronts.push_back(line.front());
  }
  // Amortized O(1) per name: a sweep visits the lines kept by the last one plus at most
  // one per name finished since. The threshold is what the last sweep kept, counted in
  // names, not lines_.size() nor calls: with a new name per call (a step number in the
  // name, or no name: numbered) lines_ grows by one per name, as fast as such a count, and
  // the sweep after the first never came; counted in calls, a grouped call of k new names
  // made each period k times the last (every name kept: about 200 bytes each, without
  // bound).
  finished_since_sweep_ += names.size();
  if (finished_since_sweep_ >= std::max<size_t>(4096, kept_at_sweep_)) Sweep();
  std::sort(fronts.begin(), fronts.end());
  fronts.erase(std::unique(fronts.begin(), fronts.end()), fronts.end());
  for (uint64_t t : fronts) {
    auto w = waiting_.find(t);
    if (w == waiting_.end() || !FirstInLines(w->second.names, t)) continue;
    admitted.push_back(std::move(w->second.run));
    waiting_.erase(w);
  }
  return admitted;
}

void TensorQueue::RunAdmitted(std::vector<std::function<void()>> admitted) {
  // A trampoline: an admitted operation may fail at once (mxhorovod stopped, its set
  // removed) and complete, admitting the next call of its name, and so on: thousands of
  // calls of one name must not nest that deep on one stack.
  thread_local std::vector<std::function<void()>>* running = nullptr;
  if (running != nullptr) {
    for (auto& f : admitted) running->push_back(std::move(f));
    return;
  }
  std::vector<std::function<void()>> work = std::move(admitted);
  running = &work;
  for (size_t i = 0; i < work.size(); ++i) {
    std::function<void()> f = std::move(work[i]);  // work may grow (and move) while f runs
    f();
  }
  running = nullptr;
}

bool TensorQueue::Add(std::vector<TensorTableEntry>&& entries) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return false;
  for (auto& e : entries) {
    std::string name = e.request.name;  // before the entry moves
    // An entry of a name already queued is dropped (the names' lines rule that out).
    auto it = spare_.Emplace(table_, name, Slot{std::move(e)}).first;
    new_slots_.push_back(&it->second);
  }
  return true;
}

void TensorQueue::PopRequests(std::vector<Request*>* out) {
  std::lock_guard<std::mutex> lk(mu_);
  out->reserve(out->size() + new_slots_.size());
  for (Slot* slot : new_slots_) {
    slot->popped = true;
    out->push_back(&slot->entry.request);
  }
  new_slots_.clear();
}

void TensorQueue::Unlist(Slot* slot) {
  if (!slot->popped) new_slots_.erase(std::find(new_slots_.begin(), new_slots_.end(), slot));
}

TensorTableEntry* TensorQueue::Find(const std::string& name) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = table_.find(name);
  return it == table_.end() ? nullptr : &it->second.entry;
}

bool TensorQueue::Take(const std::string& name, TensorTableEntry* out) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = table_.find(name);
  if (it == table_.end()) return false;
  Unlist(&it->second);
  *out = std::move(it->second.entry);
  spare_.Erase(table_, it);
  return true;
}

void TensorQueue::TakeMany(const std::vector<const std::string*>& names,
                           std::vector<TensorTableEntry>* out, std::vector<char>* found) {
  out->resize(names.size());
  found->assign(names.size(), 0);
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = table_.find(*names[i]);
    if (it == table_.end()) continue;
    Unlist(&it->second);
    (*out)[i] = std::move(it->second.entry);
    (*found)[i] = 1;
    spare_.Erase(table_, it);
  }
}

bool TensorQueue::Empty() {
  std::lock_guard<std::mutex> lk(mu_);
  return table_.empty() && new_slots_.empty();
}

bool TensorQueue::Idle(uint64_t* finished) {
  std::lock_guard<std::mutex> lk(mu_);
  if (finished) *finished = finished_;
  return active_lines_ == 0;
}

std::vector<TensorTableEntry> TensorQueue::TakeAll() {
  std::lock_guard<std::mutex> lk(mu_);
  closed_ = true;
  std::vector<TensorTableEntry> out;
  for (auto& kv : table_) out.push_back(std::move(kv.second.entry));
  table_.clear();
  new_slots_.clear();
  return out;
}

size_t TensorQueue::Lines() {
  std::lock_guard<std::mutex> lk(mu_);
  return lines_.size();
}

}  // namespace mxhorovod
