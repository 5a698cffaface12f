// Log lines of the core on stderr, in the style of the Python logger 'mxhorovod':
//   [<rank>]<<level>> 2024-05-01 12:00:03.125 mxhorovod: <message>
// The level filter is HOROVOD_LOG_LEVEL (trace, debug, info, warning, error, fatal; default
// warning, so a healthy job prints nothing); HOROVOD_LOG_HIDE_TIME=1 drops the timestamp.
// Both are read at init() on every rank, as in Horovod. Callable from any thread; each line
// is written with one write(2), so lines of concurrent ranks and threads do not interleave.
#ifndef MXHOROVOD_COMMON_LOGGING_H_
#define MXHOROVOD_COMMON_LOGGING_H_

#include <string>

namespace mxhorovod {

enum class LogLevel : int { kTrace = 0, kDebug, kInfo, kWarning, kError, kFatal };

const char* LogLevelName(LogLevel level);
// Parses HOROVOD_LOG_LEVEL's value (case-insensitive; "" means warning). Throws
// std::invalid_argument naming the variable and the accepted values.
LogLevel ParseLogLevel(const std::string& value);

struct LogSettings {
  LogLevel level = LogLevel::kWarning;
  bool hide_time = false;
};
// Reads HOROVOD_LOG_LEVEL and HOROVOD_LOG_HIDE_TIME (set: not "" nor "0"; Config::FromEnv
// parses it strictly); throws std::invalid_argument for a bad level.
LogSettings LogSettingsFromEnv();
// Installs the settings and this process's rank in the job (-1: not known yet, shown "?").
void ConfigureLogging(const LogSettings& settings, int rank);

bool LogEnabled(LogLevel level);
void Log(LogLevel level, const std::string& message);
inline void LogWarning(const std::string& m) { Log(LogLevel::kWarning, m); }
inline void LogError(const std::string& m) { Log(LogLevel::kError, m); }
inline void LogDebug(const std::string& m) { if (LogEnabled(LogLevel::kDebug)) Log(LogLevel::kDebug, m); }

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_LOGGING_H_
