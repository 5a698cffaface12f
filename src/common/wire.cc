#include "wire.h"

#include <cstring>
#include <stdexcept>

namespace mxhorovod {
namespace {

class Writer {
 public:
  template <typename T> void Pod(T v) { buf_.append(reinterpret_cast<const char*>(&v), sizeof(T)); }
  void Str(const std::string& s) { Pod<uint64_t>(s.size()); buf_.append(s); }
  void Ints(const std::vector<int64_t>& v) {
    Pod<uint64_t>(v.size());
    buf_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  }
  std::string Take() { return std::move(buf_); }

 private:
  std::string buf_;
};

class Reader {
 public:
  Reader(const char* d, size_t n) : d_(d), n_(n) {}
  template <typename T> T Pod() {
    Need(sizeof(T));
    T v;
    std::memcpy(&v, d_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string Str() {
    auto n = Pod<uint64_t>();
    Need(n);
    std::string s(d_ + pos_, n);
    pos_ += n;
    return s;
  }
  std::vector<int64_t> Ints() {
    auto n = Pod<uint64_t>();
    Need(n * sizeof(int64_t));
    std::vector<int64_t> v(n);
    if (n) std::memcpy(v.data(), d_ + pos_, n * sizeof(int64_t));
    pos_ += n * sizeof(int64_t);
    return v;
  }
  bool Done() const { return pos_ == n_; }

 private:
  void Need(size_t k) {
    if (pos_ + k > n_) throw std::runtime_error("mxhorovod: truncated negotiation message");
  }
  const char* d_;
  size_t n_;
  size_t pos_ = 0;
};

}  // namespace

std::string EncodeRequests(const std::vector<Request>& reqs) {
  Writer w;
  w.Pod<uint64_t>(reqs.size());
  for (const auto& r : reqs) {
    w.Pod(r.rank);
    w.Pod(r.op_type);
    w.Pod(r.dtype);
    w.Pod(r.reduce_op);
    w.Pod(r.root_rank);
    w.Pod(r.prescale);
    w.Pod(r.postscale);
    w.Str(r.name);
    w.Ints(r.shape);
    w.Ints(r.splits);
    w.Pod(r.group_size);
    w.Pod<uint8_t>(r.grouped);
    w.Pod<uint8_t>(r.size_exchange);
    w.Pod<uint8_t>(r.join_identity);
    w.Str(r.local_error);
  }
  return w.Take();
}

std::vector<Request> DecodeRequests(const char* data, size_t size) {
  Reader rd(data, size);
  std::vector<Request> out(rd.Pod<uint64_t>());
  for (auto& r : out) {
    r.rank = rd.Pod<int32_t>();
    r.op_type = rd.Pod<OpType>();
    r.dtype = rd.Pod<DataType>();
    r.reduce_op = rd.Pod<ReduceOp>();
    r.root_rank = rd.Pod<int32_t>();
    r.prescale = rd.Pod<double>();
    r.postscale = rd.Pod<double>();
    r.name = rd.Str();
    r.shape = rd.Ints();
    r.splits = rd.Ints();
    r.group_size = rd.Pod<int32_t>();
    r.grouped = rd.Pod<uint8_t>() != 0;
    r.size_exchange = rd.Pod<uint8_t>() != 0;
    r.join_identity = rd.Pod<uint8_t>() != 0;
    r.local_error = rd.Str();
  }
  if (!rd.Done()) throw std::runtime_error("mxhorovod: trailing bytes in request list");
  return out;
}

std::string EncodeResponses(const std::vector<Response>& resps) {
  Writer w;
  w.Pod<uint64_t>(resps.size());
  for (const auto& r : resps) {
    w.Pod(r.type);
    w.Pod(r.op_type);
    w.Pod(r.dtype);
    w.Pod(r.reduce_op);
    w.Pod(r.root_rank);
    w.Pod(r.prescale);
    w.Pod(r.postscale);
    w.Pod<uint64_t>(r.names.size());
    for (const auto& n : r.names) w.Str(n);
    w.Str(r.error);
    w.Ints(r.first_dims);
    w.Ints(r.joined);
    w.Pod(r.elements);
  }
  return w.Take();
}

std::vector<Response> DecodeResponses(const char* data, size_t size) {
  Reader rd(data, size);
  std::vector<Response> out(rd.Pod<uint64_t>());
  for (auto& r : out) {
    r.type = rd.Pod<Response::Type>();
    r.op_type = rd.Pod<OpType>();
    r.dtype = rd.Pod<DataType>();
    r.reduce_op = rd.Pod<ReduceOp>();
    r.root_rank = rd.Pod<int32_t>();
    r.prescale = rd.Pod<double>();
    r.postscale = rd.Pod<double>();
    r.names.resize(rd.Pod<uint64_t>());
    for (auto& n : r.names) n = rd.Str();
    r.error = rd.Str();
    r.first_dims = rd.Ints();
    r.joined = rd.Ints();
    r.elements = rd.Pod<int64_t>();
  }
  if (!rd.Done()) throw std::runtime_error("mxhorovod: trailing bytes in response list");
  return out;
}

}  // namespace mxhorovod
