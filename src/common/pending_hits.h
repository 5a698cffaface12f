// The requests of this rank answered from the response cache and waiting for every rank's
// hit: cache bit -> name. Dense, indexed by bit, with the bits as the words that the
// negotiation's AND-allreduce sends, so a cycle of thousands of hits allocates nothing once
// the names' buffers exist (a std::map did a node and a string per hit).
#ifndef MXHOROVOD_COMMON_PENDING_HITS_H_
#define MXHOROVOD_COMMON_PENDING_HITS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace mxhorovod {

class PendingHits {
 public:
  explicit PendingHits(size_t capacity) : names_(capacity), bits_((capacity + 63) / 64, 0) {}
  void Set(int bit, const std::string& name) {
    names_[bit] = name;
    bits_[bit / 64] |= Mask(bit);
  }
  bool Has(int bit) const { return bits_[bit / 64] & Mask(bit); }
  const std::string& Name(int bit) const { return names_[bit]; }
  void Erase(int bit) { bits_[bit / 64] &= ~Mask(bit); }
  // Word w holds bits 64w .. 64w+63.
  const std::vector<uint64_t>& bits() const { return bits_; }

 private:
  static uint64_t Mask(int bit) { return 1ull << (bit % 64); }
  std::vector<std::string> names_;
  std::vector<uint64_t> bits_;
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_PENDING_HITS_H_
