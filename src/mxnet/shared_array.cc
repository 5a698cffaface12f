#include "mxnet/shared_array.h"

#include "ops/shared_regions.h"

namespace mxhorovod {
namespace mx {
namespace {

struct SharedArray {
  DLManagedTensor managed;
  int64_t shape[1];
};

void Delete(DLManagedTensor* t) {
  auto* a = static_cast<SharedArray*>(t->manager_ctx);
  FreeSharedRegion(t->dl_tensor.data);
  delete a;
}

}  // namespace

DLManagedTensor* NewSharedArray(int64_t elements, uint8_t code, uint8_t bits, std::string* why) {
  if (elements <= 0 || bits == 0 || bits % 8) {
    *why = "no elements, or a type of no whole bytes";
    return nullptr;
  }
  void* data = AllocSharedRegion(elements * (bits / 8), why);
  if (!data) return nullptr;
  auto* a = new SharedArray();
  a->shape[0] = elements;
  DLTensor& t = a->managed.dl_tensor;
  t.data = data;
  t.ctx = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = {code, bits, 1};
  t.shape = a->shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  a->managed.manager_ctx = a;
  a->managed.deleter = &Delete;
  return &a->managed;
}

}  // namespace mx
}  // namespace mxhorovod
