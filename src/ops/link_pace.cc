#include "ops/link_pace.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <string>

#include "common/logging.h"

namespace mxhorovod {
namespace {

// Bytes per second; 0 until the first measurement. Written by the background thread only;
// atomic because logs and tests may read it from other threads.
std::atomic<double> g_rate{0};
std::atomic<long> g_fixed_us{-1};  // MXHOROVOD_LINK_SLEEP_US; -1: sized from the rate
long g_logged_pause_us = -1;

long PauseFor(double rate) {
  if (rate <= 0) return kFirstPauseUs;
  const double us = (double)kPaceBytes / rate * 1e6;
  if (us < kMinPauseUs) return 0;
  return (long)std::min<double>(kMaxPauseUs, std::ceil(us));
}

}  // namespace

void NoteLinkAllreduce(int64_t bytes, int hosts, double seconds) {
  if (hosts < 2 || bytes < kPaceMinBytes || !(seconds > 0) || !std::isfinite(seconds)) return;
  const double sent = 2.0 * (hosts - 1) / hosts * (double)bytes;
  const double r = sent / seconds;
  const double old = g_rate.load();
  // A rise is taken at once (a faster call proves the link is at least that fast); a fall
  // by a quarter of the difference per call (a slow call may have waited for a late peer,
  // or for a core, not for the link).
  const double now = old <= 0 || r > old ? r : 0.75 * old + 0.25 * r;
  g_rate.store(now);
  const long pause = PauseFor(now);
  if (g_logged_pause_us < 0 || std::abs(pause - g_logged_pause_us) * 4 > g_logged_pause_us) {
    g_logged_pause_us = pause;
    const long fixed = g_fixed_us.load();
    char line[200];
    if (fixed >= 0) {
      std::snprintf(line, sizeof(line),
                    "link pace: %.0f Mbit/s measured; the pause between tests of a wait "
                    "between hosts is %ld us, fixed by MXHOROVOD_LINK_SLEEP_US", now * 8 / 1e6,
                    fixed);
    } else {
      std::snprintf(line, sizeof(line),
                    "link pace: %.0f Mbit/s measured, pause %ld us between tests of a wait "
                    "between hosts", now * 8 / 1e6, pause);
    }
    LogDebug(line);
  }
}

long LinkPauseUs() {
  const long fixed = g_fixed_us.load(std::memory_order_relaxed);
  return fixed >= 0 ? fixed : PauseFor(g_rate.load(std::memory_order_relaxed));
}

double LinkRateEstimate() { return g_rate.load(); }

void ResetLinkPace(long fixed_us) {
  g_rate.store(0);
  g_fixed_us.store(fixed_us < 0 ? -1 : fixed_us);
  g_logged_pause_us = -1;
}

}  // namespace mxhorovod
