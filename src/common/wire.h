// Byte encoding of request and response lists for the negotiation messages. Every rank runs
// the same binary, so the encoding is plain host-order fields with length prefixes.
#ifndef MXHOROVOD_COMMON_WIRE_H_
#define MXHOROVOD_COMMON_WIRE_H_

#include <string>
#include <vector>

#include "common.h"

namespace mxhorovod {

std::string EncodeRequests(const std::vector<Request>& reqs);
// Throws std::runtime_error on a truncated or corrupt buffer.
std::vector<Request> DecodeRequests(const char* data, size_t size);
std::string EncodeResponses(const std::vector<Response>& resps);
std::vector<Response> DecodeResponses(const char* data, size_t size);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_WIRE_H_
