#include "tensor_queue.h"

#include <algorithm>

namespace mxhorovod {

Status TensorQueue::Reserve(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    if (!reserved_.insert(n).second) {
      const bool ours = std::find(names.begin(), names.begin() + i, n) != names.begin() + i;
      for (size_t j = 0; j < i; ++j) reserved_.erase(names[j]);  // all or none
      if (ours) return Status::InvalidArgument("the name '" + n + "' appears twice in one grouped call");
      return Status::InvalidArgument(
          "a collective named '" + n + "' is already in flight on this rank; names must be "
          "unique among outstanding operations (wait for the first result or use another name)");
    }
  }
  return Status::OK();
}

void TensorQueue::Release(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& n : names) reserved_.erase(n);
}

void TensorQueue::Add(std::vector<TensorTableEntry>&& entries) {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& e : entries) {
    std::string name = e.request.name;
    auto it = table_.emplace(std::move(name), Slot{std::move(e)}).first;
    new_slots_.push_back(&it->second);
  }
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
  table_.erase(it);
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
    table_.erase(it);
  }
}

bool TensorQueue::Empty() {
  std::lock_guard<std::mutex> lk(mu_);
  return table_.empty() && new_slots_.empty();
}

std::vector<TensorTableEntry> TensorQueue::TakeAll() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<TensorTableEntry> out;
  for (auto& kv : table_) out.push_back(std::move(kv.second.entry));
  table_.clear();
  new_slots_.clear();
  return out;
}

}  // namespace mxhorovod
