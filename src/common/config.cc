#include "config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include "ops/float16.h"

namespace mxhorovod {

double EnvNumber(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  const bool converted = end != v;
  while (std::isspace((unsigned char)*end)) ++end;  // " 5" and "5 " alike (strtod skips leading)
  if (!converted || *end != '\0' || !(d >= 0) || !std::isfinite(d)) {  // nan, inf too
    throw std::invalid_argument(std::string(name) + "='" + v + "' is not a non-negative number");
  }
  if (d > 1e15) {  // a number, only too large: say so (it was "not a non-negative number")
    throw std::invalid_argument(std::string(name) + "='" + v +
                                "' is above the largest value taken, 1e15");
  }
  return d;
}

// `v` in lower case ("" for null).
static std::string LowerCase(const char* v) {
  std::string s = v ? v : "";
  for (auto& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

bool EnvBool(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  const std::string s = LowerCase(v);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  throw std::invalid_argument(std::string(name) + "='" + v + "' is not a boolean (1 or 0)");
}

std::vector<int> EnvCoreList(const char* name) {
  const char* v = std::getenv(name);
  std::vector<int> out;
  if (!v || !*v) return out;
  const std::invalid_argument bad(std::string(name) + "='" + v + "' is not a comma-separated "
                                  "list of core ids (non-negative integers, one per local rank)");
  for (const char* p = v;; ++p) {  // at an id; after it, at a comma or the end
    char* end = nullptr;
    while (std::isspace((unsigned char)*p)) ++p;
    const long id = std::isdigit((unsigned char)*p) ? std::strtol(p, &end, 10) : -1;
    if (id < 0 || id > 1 << 20) throw bad;
    out.push_back((int)id);
    for (p = end; std::isspace((unsigned char)*p);) ++p;
    if (*p == '\0') return out;
    if (*p != ',') throw bad;
  }
}

Config Config::FromEnv() {
  Config c;
  c.cycle_time_ms = EnvNumber("HOROVOD_CYCLE_TIME", c.cycle_time_ms);
  c.fusion_threshold = (int64_t)EnvNumber("HOROVOD_FUSION_THRESHOLD", (double)c.fusion_threshold);
  c.cache_capacity = (int64_t)EnvNumber("HOROVOD_CACHE_CAPACITY", (double)c.cache_capacity);
  c.slice_bytes = (int64_t)EnvNumber("MXHOROVOD_SLICE_BYTES", (double)c.slice_bytes);
  c.link_slice_bytes = (int64_t)EnvNumber("MXHOROVOD_LINK_SLICE_BYTES", (double)c.link_slice_bytes);
  c.link_slice_bytes = std::min<int64_t>(std::max<int64_t>(c.link_slice_bytes, 1024), 1ll << 30);
  c.zero_copy_bytes = (int64_t)EnvNumber("MXHOROVOD_ZERO_COPY_BYTES", (double)c.zero_copy_bytes);
  const char* blocking = std::getenv("MXHOROVOD_BLOCKING_DATA");
  if (blocking && *blocking) c.blocking_data = EnvBool("MXHOROVOD_BLOCKING_DATA", false) ? 1 : 0;
  c.cma = EnvBool("MXHOROVOD_CMA", c.cma);
  c.doorbell = EnvBool("MXHOROVOD_DOORBELL", c.doorbell);
  c.cma_min_bytes = (int64_t)EnvNumber("MXHOROVOD_CMA_MIN_BYTES", (double)c.cma_min_bytes);
  c.autotune = EnvBool("HOROVOD_AUTOTUNE", false);
  // Read here, not when the tuner starts on the background thread: a bad value is a
  // ValueError at init() (it was an uncaught exception there: std::terminate on every rank).
  c.autotune_warmup_samples = (int)std::min(1e6, EnvNumber("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", 1));
  c.autotune_steps_per_sample =
      std::max(1, (int)std::min(1e6, EnvNumber("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", 10)));
  c.dynamic_process_sets = EnvBool("HOROVOD_DYNAMIC_PROCESS_SETS", false);
  if (c.slice_bytes < 1024) c.slice_bytes = 1024;
  // One MPI call takes an int element count: 1 GiB keeps it in range for every dtype.
  if (c.slice_bytes > (1ll << 30)) c.slice_bytes = 1ll << 30;
  // [hierarchical allreduce, issue 7] Horovod's reading: a number, on when above 0.
  // Unset or empty: chosen by topology at start-up.
  const double hier = EnvNumber("HOROVOD_HIERARCHICAL_ALLREDUCE", -1);
  c.hierarchical_allreduce = hier < 0 ? -1 : hier > 0 ? 1 : 0;
  c.transfer_timeout_s = EnvNumber("MXHOROVOD_TRANSFER_TIMEOUT_SECONDS", c.transfer_timeout_s);
  c.transfer_min_mbits = EnvNumber("MXHOROVOD_TRANSFER_MIN_MBITS", c.transfer_min_mbits);
  if (c.transfer_min_mbits <= 0) {
    throw std::invalid_argument("MXHOROVOD_TRANSFER_MIN_MBITS=0: the assumed minimum link rate "
                                "must be above 0 megabits per second (to turn the bound off, "
                                "set MXHOROVOD_TRANSFER_TIMEOUT_SECONDS=0)");
  }
  {
    // Microseconds; a fraction rounds up (0.5 is a pause, not 0: no pause at all). "auto"
    // (any case), like unset: sized from the link's rate.
    const double us = LowerCase(std::getenv("MXHOROVOD_LINK_SLEEP_US")) == "auto"
                          ? -1
                          : EnvNumber("MXHOROVOD_LINK_SLEEP_US", c.link_sleep_us);
    if (us > 100000) {
      throw std::invalid_argument("MXHOROVOD_LINK_SLEEP_US='" +
                                  std::string(std::getenv("MXHOROVOD_LINK_SLEEP_US")) +
                                  "' is above the largest pause taken, 100000 microseconds "
                                  "(0.1 s)");
    }
    c.link_sleep_us = (int)std::ceil(us);
  }
  c.thread_affinity = EnvCoreList("HOROVOD_THREAD_AFFINITY");
  if (const char* simd = std::getenv("MXHOROVOD_SIMD")) {
    SimdPath unused;
    if (!ParseSimdPath(simd, &unused)) {
      throw std::invalid_argument(std::string("MXHOROVOD_SIMD='") + simd +
                                  "' is not one of auto, avx2, portable");
    }
    for (const char* p = simd; *p; ++p) {
      if (!std::isspace((unsigned char)*p)) c.simd += (char)std::tolower((unsigned char)*p);
    }
  }
  const char* timeline = std::getenv("HOROVOD_TIMELINE");
  c.timeline = timeline && std::string(timeline) != "DYNAMIC" ? timeline : "";
  c.timeline_mark_cycles = EnvBool("HOROVOD_TIMELINE_MARK_CYCLES", false);
  c.stall.check_s = EnvNumber("HOROVOD_STALL_CHECK_TIME_SECONDS", c.stall.check_s);
  c.stall.shutdown_s = EnvNumber("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", c.stall.shutdown_s);
  c.stall.enabled = !EnvBool("HOROVOD_STALL_CHECK_DISABLE", false) && c.stall.check_s > 0;
  c.log = LogSettingsFromEnv();
  c.log.hide_time = EnvBool("HOROVOD_LOG_HIDE_TIME", false);
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
