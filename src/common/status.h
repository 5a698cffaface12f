// The result of an operation: OK, or a category and a message that names the tensor.
#ifndef MXHOROVOD_COMMON_STATUS_H_
#define MXHOROVOD_COMMON_STATUS_H_

#include <string>

namespace mxhorovod {

class Status {
 public:
  enum Code { kOk = 0, kInvalidArgument, kPrecondition, kAborted, kUnknown };
  Status() = default;
  static Status OK() { return Status(); }
  static Status InvalidArgument(const std::string& m) { return Status(kInvalidArgument, m); }
  static Status PreconditionError(const std::string& m) { return Status(kPrecondition, m); }
  static Status Aborted(const std::string& m) { return Status(kAborted, m); }
  static Status UnknownError(const std::string& m) { return Status(kUnknown, m); }
  bool ok() const { return code_ == kOk; }
  Code code() const { return code_; }
  const std::string& reason() const { return reason_; }

 private:
  Status(Code c, std::string m) : code_(c), reason_(std::move(m)) {}
  Code code_ = kOk;
  std::string reason_;
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_STATUS_H_
