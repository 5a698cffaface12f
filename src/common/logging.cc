#include "logging.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <stdexcept>

namespace mxhorovod {
namespace {

std::atomic<int> g_level{(int)LogLevel::kWarning};
std::atomic<bool> g_hide_time{false};
std::atomic<int> g_rank{-1};

const char* const kNames[] = {"trace", "debug", "info", "warning", "error", "fatal"};

}  // namespace

const char* LogLevelName(LogLevel level) { return kNames[(int)level]; }

LogLevel ParseLogLevel(const std::string& value) {
  std::string v;
  for (char c : value) v += (char)std::tolower((unsigned char)c);
  if (v.empty()) return LogLevel::kWarning;
  for (int i = 0; i <= (int)LogLevel::kFatal; ++i) {
    if (v == kNames[i]) return (LogLevel)i;
  }
  throw std::invalid_argument("HOROVOD_LOG_LEVEL='" + value +
                              "' is not one of trace, debug, info, warning, error, fatal");
}

LogSettings LogSettingsFromEnv() {
  LogSettings s;
  const char* level = std::getenv("HOROVOD_LOG_LEVEL");
  s.level = ParseLogLevel(level ? level : "");
  const char* hide = std::getenv("HOROVOD_LOG_HIDE_TIME");
  s.hide_time = hide && *hide && std::string(hide) != "0";
  return s;
}

void ConfigureLogging(const LogSettings& settings, int rank) {
  g_level = (int)settings.level;
  g_hide_time = settings.hide_time;
  g_rank = rank;
}

bool LogEnabled(LogLevel level) { return (int)level >= g_level.load(std::memory_order_relaxed); }

void Log(LogLevel level, const std::string& message) {
  if (!LogEnabled(level)) return;
  std::string line = "[";
  int rank = g_rank.load();
  line += rank >= 0 ? std::to_string(rank) : "?";
  line += "]<";
  line += LogLevelName(level);
  line += "> ";
  if (!g_hide_time.load()) {
    timeval tv;
    gettimeofday(&tv, nullptr);
    tm parts;
    localtime_r(&tv.tv_sec, &parts);
    char buf[48];
    size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &parts);
    std::snprintf(buf + n, sizeof(buf) - n, ".%03d ", (int)(tv.tv_usec / 1000));
    line += buf;
  }
  line += "mxhorovod: ";
  line += message;
  line += '\n';
  // One write per line: concurrent lines (other threads, other ranks on one terminal) stay whole.
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t w = ::write(2, p, left);
    if (w <= 0) break;
    p += w;
    left -= (size_t)w;
  }
}

}  // namespace mxhorovod
