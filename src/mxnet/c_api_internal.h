// The C entry points' common path for C++ callers that hold the names as std::strings (the
// Python binding): the same checks, errors and return codes as MXWaitforHorovodAllreduce
// and its grouped forms, without copying each name into a new string.
#ifndef MXHOROVOD_MXNET_C_API_INTERNAL_H_
#define MXHOROVOD_MXNET_C_API_INTERNAL_H_

#include <string>

#include "common/common.h"

namespace mxhorovod {
namespace mx {

// One engine operation over `num` tensors of kind `type` (kAllreduce, kReducescatter or
// kAllgather; reduce_op and the factors are ignored for kAllgather). Returns 0, -1 (refused
// at the call) or -2 (ran and failed, NaiveEngine only); the error text is
// MXHorovodGetLastError(). With `fail_with`, nothing is pushed: the tensors are submitted
// as failed on this rank with that text, so that the other ranks get the error instead of
// waiting (for a call whose input could not be read here), and the call returns -1.
// `names_distinct`: the caller made the names distinct ('<base>.<i>'), so the check for a
// name given twice (a sort of the names: 9% of a 1,000-tensor group's call) is skipped.
// `size_exchange`: an allgather's size exchange (Request::size_exchange). `grouped`: a
// grouped call, even of one tensor (Request::grouped).
// Request::join_identity for this thread's next allreduce calls (mxhorovod's checks).
void SetJoinIdentity(bool on);
int Call(OpType type, void** inputs, void** outputs, int num, const std::string* names,
         int reduce_op, double prescale, double postscale, int priority, int process_set_id,
         const std::string* fail_with = nullptr, bool names_distinct = false,
         bool size_exchange = false, bool grouped = false);

// MXWaitforHorovodAlltoall, marking the request as a size exchange when asked; with
// `fail_with`, submitted as failed as Call does.
int Alltoall(void* input, void* output, const char* name, const int64_t* splits,
             const int64_t* recv_splits, int num_splits, int priority, int process_set_id,
             bool size_exchange, const std::string* fail_with = nullptr);

// MXWaitforHorovodBroadcast with a std::string name and the same `fail_with`.
int Broadcast(void* input, void* output, const std::string& name, int root_rank, int priority,
              int process_set_id, const std::string* fail_with = nullptr);

}  // namespace mx
}  // namespace mxhorovod

#endif  // MXHOROVOD_MXNET_C_API_INTERNAL_H_
