// Buffers that the ranks of one host can map into each other's address space: anonymous
// shared memory (a memfd) that a peer opens through /proc/<pid>/fd/<fd>, which needs the
// same permission as cross-memory attach (ptrace access to the owner). The CMA backend
// reads a peer's buffer that lies in such a region with plain loads through its mapping
// instead of process_vm_readv, which runs at about a third of memcpy's speed here (4.4
// against 16 GB/s; docs/benchmark_runs.md, twenty-second run). DistributedTrainer's
// gradient buckets are allocated here (mxhorovod/training/buckets.py), and each CMA backend's staging
// region (cma_backend.h); arrays MXNet allocates are not.
#ifndef MXHOROVOD_OPS_SHARED_REGIONS_H_
#define MXHOROVOD_OPS_SHARED_REGIONS_H_

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace mxhorovod {

// Where a buffer lies in a shared region of its process.
struct SharedRef {
  int32_t fd = -1;      // the region's memfd in the owner
  uint32_t id = 0;      // the region's number in the owner (never reused; 0: none)
  uint64_t offset = 0;  // the buffer's first byte in the region
};

// A new zero-filled region of `bytes` (> 0), mapped read-write, or nullptr with the reason
// in *why (no memfd, a full /dev/shm, ...). `name`: the memfd's name, which /proc/PID/maps
// shows ("/memfd:<name> (deleted)"). Thread-safe.
void* AllocSharedRegion(int64_t bytes, std::string* why, const char* name = "mxhorovod-bucket");
// Unmaps and closes a region AllocSharedRegion returned. Thread-safe.
void FreeSharedRegion(void* base);
// For each buffer i, whether [bufs[i], bufs[i] + bytes[i]) lies in one region of this
// process (then (*refs)[i] says where; else its id is 0). Returns how many do.
size_t FindSharedRegions(const std::vector<void*>& bufs, const std::vector<int64_t>& bytes,
                         std::vector<SharedRef>* refs);

// Peers' regions mapped read-only into this process, kept for later calls (a trainer's
// buckets live as long as it). A mapping keeps its region's memory even after the peer has
// freed it (a trainer made again each epoch makes new buckets), so one not used in the
// last kIdleCalls calls is unmapped (mapped again if it comes back), and at most
// kMaxMapped are kept (the least recently used goes first; never one that the current
// call has handed out).
class PeerMappings {
 public:
  PeerMappings() = default;
  PeerMappings(const PeerMappings&) = delete;
  PeerMappings& operator=(const PeerMappings&) = delete;
  ~PeerMappings();
  // This process's address of byte 0 of the peer's region, holding at least `need` bytes,
  // mapping it the first time; nullptr when it cannot be mapped (the caller reads the peer
  // another way).
  const char* Map(pid_t pid, const SharedRef& ref, uint64_t need);
  // Once per call that may Map: counts the call and unmaps the idle mappings.
  void Tick();

 private:
  static constexpr size_t kMaxMapped = 64;
  static constexpr uint64_t kIdleCalls = 1000;
  struct Entry {
    pid_t pid;
    uint32_t id;
    const char* base;
    uint64_t bytes;
    uint64_t last_use;  // calls_ when last mapped or found
  };
  std::vector<Entry> entries_;  // oldest first
  uint64_t calls_ = 0;
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_SHARED_REGIONS_H_
