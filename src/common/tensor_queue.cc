#include "tensor_queue.h"

namespace mxhorovod {

Status TensorQueue::Reserve(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lk(mu_);
  std::unordered_set<std::string> seen;
  for (const auto& n : names) {
    if (reserved_.count(n)) {
      return Status::InvalidArgument(
          "a collective named '" + n + "' is already in flight on this rank; names must be "
          "unique among outstanding operations (wait for the first result or use another name)");
    }
    if (!seen.insert(n).second) {
      return Status::InvalidArgument("the name '" + n + "' appears twice in one grouped call");
    }
  }
  reserved_.insert(names.begin(), names.end());
  return Status::OK();
}

void TensorQueue::Release(const std::string& name) {
  std::lock_guard<std::mutex> lk(mu_);
  reserved_.erase(name);
}

void TensorQueue::Add(std::vector<TensorTableEntry>&& entries) {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& e : entries) {
    new_requests_.push_back(e.request);
    std::string name = e.request.name;
    table_.emplace(std::move(name), std::move(e));
  }
}

void TensorQueue::PopRequests(std::vector<Request>* out) {
  std::lock_guard<std::mutex> lk(mu_);
  out->insert(out->end(), new_requests_.begin(), new_requests_.end());
  new_requests_.clear();
}

TensorTableEntry* TensorQueue::Find(const std::string& name) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = table_.find(name);
  return it == table_.end() ? nullptr : &it->second;
}

bool TensorQueue::Take(const std::string& name, TensorTableEntry* out) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = table_.find(name);
  if (it == table_.end()) return false;
  *out = std::move(it->second);
  table_.erase(it);
  return true;
}

bool TensorQueue::Empty() {
  std::lock_guard<std::mutex> lk(mu_);
  return table_.empty() && new_requests_.empty();
}

std::vector<TensorTableEntry> TensorQueue::TakeAll() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<TensorTableEntry> out;
  for (auto& kv : table_) out.push_back(std::move(kv.second));
  table_.clear();
  new_requests_.clear();
  return out;
}

}  // namespace mxhorovod
