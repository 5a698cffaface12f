#include "ops/shared_regions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mxhorovod {
namespace {

struct Region {
  char* base;
  uint64_t bytes;
  int fd;
  uint32_t id;
};

struct Registry {
  std::mutex mu;
  std::vector<Region> regions;  // few: one per bucket
  uint32_t next_id = 1;
};

// Never destroyed: MXNet frees arrays (and so regions) from its engine threads, which may
// outlive main() and the static destructors.
Registry& R() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

void* AllocSharedRegion(int64_t bytes, std::string* why, const char* name) {
  if (bytes <= 0) {
    *why = "no bytes";
    return nullptr;
  }
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) {
    *why = std::string("memfd_create: ") + std::strerror(errno);
    return nullptr;
  }
  // posix_fallocate, not ftruncate alone: where shared memory is full, a sparse region's
  // first touch would kill the process with SIGBUS.
  int rc = posix_fallocate(fd, 0, bytes);
  if (rc != 0) {
    *why = std::string("posix_fallocate: ") + std::strerror(rc);
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *why = std::string("mmap: ") + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  Registry& reg = R();
  std::lock_guard<std::mutex> lk(reg.mu);
  reg.regions.push_back({static_cast<char*>(p), (uint64_t)bytes, fd, reg.next_id++});
  return p;
}

void FreeSharedRegion(void* base) {
  Registry& reg = R();
  std::lock_guard<std::mutex> lk(reg.mu);
  for (size_t i = 0; i < reg.regions.size(); ++i) {
    if (reg.regions[i].base != base) continue;
    munmap(reg.regions[i].base, reg.regions[i].bytes);
    close(reg.regions[i].fd);
    reg.regions.erase(reg.regions.begin() + i);
    return;
  }
}

size_t FindSharedRegions(const std::vector<void*>& bufs, const std::vector<int64_t>& bytes,
                         std::vector<SharedRef>* refs) {
  refs->assign(bufs.size(), SharedRef());
  Registry& reg = R();
  std::lock_guard<std::mutex> lk(reg.mu);  // once per call: a group may hold 1,000s of buffers
  if (reg.regions.empty()) return 0;
  size_t found = 0;
  for (size_t i = 0; i < bufs.size(); ++i) {
    const char* c = static_cast<const char*>(bufs[i]);
    for (const Region& r : reg.regions) {
      if (c >= r.base && bytes[i] >= 0 && (uint64_t)(c - r.base) + (uint64_t)bytes[i] <= r.bytes) {
        (*refs)[i] = {r.fd, r.id, (uint64_t)(c - r.base)};
        ++found;
        break;
      }
    }
  }
  return found;
}

PeerMappings::~PeerMappings() {
  for (const Entry& e : entries_) munmap(const_cast<char*>(e.base), e.bytes);
}

const char* PeerMappings::Map(pid_t pid, const SharedRef& ref, uint64_t need) {
  for (Entry& e : entries_) {
    if (e.pid != pid || e.id != ref.id) continue;
    e.last_use = calls_;
    return e.bytes >= need ? e.base : nullptr;
  }
  // Full: the least recently used mapping goes, never one handed out in this call (its
  // caller still reads through it); if all were, this peer is read another way.
  size_t victim = entries_.size();
  if (entries_.size() >= kMaxMapped) {
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].last_use == calls_) continue;
      if (victim == entries_.size() || entries_[i].last_use < entries_[victim].last_use) victim = i;
    }
    if (victim == entries_.size()) return nullptr;
  }
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(ref.fd);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st;
  void* p = MAP_FAILED;
  // The region is in use by the collective (its array is held by the engine until the
  // operation completes), so the descriptor is still that region's.
  if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= need) {
    p = mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  if (victim < entries_.size()) {
    munmap(const_cast<char*>(entries_[victim].base), entries_[victim].bytes);
    entries_.erase(entries_.begin() + victim);
  }
  entries_.push_back({pid, ref.id, static_cast<const char*>(p), (uint64_t)st.st_size, calls_});
  return static_cast<const char*>(p);
}

void PeerMappings::Tick() {
  ++calls_;
  for (size_t i = 0; i < entries_.size();) {
    if (calls_ - entries_[i].last_use <= kIdleCalls) {
      ++i;
      continue;
    }
    munmap(const_cast<char*>(entries_[i].base), entries_[i].bytes);
    entries_.erase(entries_.begin() + i);
  }
}

}  // namespace mxhorovod
