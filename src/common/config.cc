#include "config.h"

#include <stdexcept>

namespace mxhorovod {

double EnvNumber(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(d >= 0) || d > 1e15) {  // also refuses nan and inf
    throw std::invalid_argument(std::string(name) + "='" + v + "' is not a non-negative number");
  }
  return d;
}

Config Config::FromEnv() {
  Config c;
  c.cycle_time_ms = EnvNumber("HOROVOD_CYCLE_TIME", c.cycle_time_ms);
  c.fusion_threshold = (int64_t)EnvNumber("HOROVOD_FUSION_THRESHOLD", (double)c.fusion_threshold);
  c.cache_capacity = (int64_t)EnvNumber("HOROVOD_CACHE_CAPACITY", (double)c.cache_capacity);
  c.slice_bytes = (int64_t)EnvNumber("MXHOROVOD_SLICE_BYTES", (double)c.slice_bytes);
  if (c.slice_bytes < 1024) c.slice_bytes = 1024;
  // [hierarchical allreduce, issue 7] Horovod's reading: a number, on when above 0.
  c.hierarchical_allreduce = EnvNumber("HOROVOD_HIERARCHICAL_ALLREDUCE", 0) > 0;
  if (c.cycle_time_ms > 60000) {
    throw std::invalid_argument("HOROVOD_CYCLE_TIME=" + std::to_string(c.cycle_time_ms) +
                                " ms is more than a minute between cycles");
  }
  if (c.cache_capacity > (1 << 20)) {
    throw std::invalid_argument("HOROVOD_CACHE_CAPACITY=" + std::to_string(c.cache_capacity) +
                                " is above the limit of 1048576 entries");
  }
  return c;
}

}  // namespace mxhorovod
