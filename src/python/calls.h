// What the binding's calls share (module.cc): handles, the checks of an array's layout,
// and raising a refused call as Python's InvalidArgumentError.
#ifndef MXHOROVOD_PYTHON_CALLS_H_
#define MXHOROVOD_PYTHON_CALLS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "common/common.h"

namespace mxhorovod {
namespace binding {

// An NDArray handle as Python passes it (NDArray.handle.value).
void* H(uintptr_t h);
// Raises mxhorovod.common.errors.InvalidArgumentError (a ValueError and an MXNetError)
// with `text`, as pybind11::error_already_set.
[[noreturn]] void ThrowInvalid(const std::string& text);
// Raises for a C API result: -1 InvalidArgumentError, -2 MXNetError (NaiveEngine).
void Check(int rc);
// Raises InvalidArgumentError for a status that is not OK.
void Raise(const Status& s);
// Settles the array's layout before a collective reads it (see module.cc).
Status Settle(void* h, bool any_array);
// The peers' error for a call whose input could not be read here ("" when `s` is OK).
std::string UnreadableInput(const Status& s);

// Adds _core.allreduce(in, out, name, op, prescale, postscale, priority, process_set,
// settle), a METH_FASTCALL function (fast_call.cc).
void AddFastAllreduce(pybind11::module_& m);

}  // namespace binding
}  // namespace mxhorovod

#endif  // MXHOROVOD_PYTHON_CALLS_H_
