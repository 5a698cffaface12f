#include "timeline.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "own_file.h"

namespace mxhorovod {
namespace {

// The writer writes and flushes as soon as events arrive, at most once per kMinGap (at
// most ~200 writes a second while operations run, one wake of the writer per batch), so a
// process killed without warning loses the last few milliseconds of events: MPICH's
// mpirun ends the other ranks with SIGTERM and SIGKILL right after a rank's MPI_Abort,
// within the 200 ms that the writer used to wait between flushes, and a rank 0 killed
// that way left an empty timeline, the operations before the failure lost (Horovod writes
// every event at once). kIdleWait bounds a wait with nothing to write (Stop wakes the
// writer anyway).
constexpr auto kMinGap = std::chrono::milliseconds(5);
constexpr auto kIdleWait = std::chrono::milliseconds(200);

}  // namespace

const char* OpSpanName(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return "ALLREDUCE";
    case OpType::kBroadcast: return "BROADCAST";
    case OpType::kAllgather: return "ALLGATHER";
    case OpType::kAlltoall: return "ALLTOALL";
    case OpType::kReducescatter: return "REDUCESCATTER";
    case OpType::kProcessSetAdd: return "ADD_PROCESS_SET";
    case OpType::kProcessSetRemove: return "REMOVE_PROCESS_SET";
    case OpType::kJoin: return "JOIN";
  }
  return "UNKNOWN";
}

const char* MPIActivityName(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return "MPI_ALLREDUCE";
    case OpType::kBroadcast: return "MPI_BCAST";
    case OpType::kAllgather: return "MPI_ALLGATHER";
    case OpType::kAlltoall: return "MPI_ALLTOALL";
    case OpType::kReducescatter: return "MPI_REDUCE_SCATTER";
    default: break;
  }
  return "MPI";
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += (char)c;  // UTF-8 passes through (names are valid Unicode, checked in Python)
        }
    }
  }
  return out;
}

Timeline& Timeline::Get() {
  static Timeline* t = new Timeline();  // never destroyed: engine threads may outlive main()
  return *t;
}

int64_t Timeline::Now() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               start_).count();
}

Status Timeline::Start(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> control(control_mu_);
  if (writer_.joinable()) {
    return Status::PreconditionError("a timeline is already being recorded to '" + path_ +
                                     "'; call stop_timeline() first");
  }
  std::string why;
  FILE* f = OpenOwnFileForWriting(path, &why);
  if (!f) {
    return Status::InvalidArgument("cannot open the timeline file '" + path + "': " + why);
  }
  std::fputs("[\n", f);
  file_ = f;
  path_ = path;
  first_event_ = true;
  last_ts_ = 0;
  rows_.clear();
  next_pid_ = 1;
  mark_cycles_ = mark_cycles;
  start_ = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.clear();
    recorded_.store(0);
    written_.store(0);
    accepting_ = true;
    stop_ = false;
  }
  if (mark_cycles) {
    Emit("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"cycles\"}}");
  }
  // On disk at once: a job killed before the writer's first flush (a peer's abort within
  // 200 ms) leaves an open JSON array that trace viewers load, not an empty file.
  std::fflush(file_);
  writer_ = std::thread(&Timeline::WriterLoop, this);
  // Named here too, so the name is set when Start returns (the thread's own call may come
  // later: a test that listed the threads right after the first collective saw two
  // "mxhorovod-bg" and no writer).
  pthread_setname_np(writer_.native_handle(), "mxhorovod-tl");
  writer_handle_ = writer_.native_handle();
  enabled_.store(true);
  return Status::OK();
}

void Timeline::Stop() {
  std::lock_guard<std::mutex> control(control_mu_);
  if (!writer_.joinable()) return;
  enabled_.store(false);
  {
    std::lock_guard<std::mutex> lk(mu_);
    accepting_ = false;  // a hook that saw enabled() just before is dropped here
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();
  // The writer has written everything; close what is still open so the nesting is valid.
  for (auto& kv : rows_) Close(kv.second, last_ts_, true);
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

void Timeline::AwaitFlushInSignal(int limit_ms) {
  if (!enabled() || pthread_equal(pthread_self(), writer_handle_)) return;
  const uint64_t target = recorded_.load();
  const int step_ms = 2;
  for (int waited = 0; waited < limit_ms && written_.load() < target; waited += step_ms) {
    struct timespec pause = {0, step_ms * 1000000L};
    nanosleep(&pause, nullptr);
  }
}

std::string Timeline::path() {
  std::lock_guard<std::mutex> control(control_mu_);
  return writer_.joinable() ? path_ : std::string();
}

void Timeline::Push(std::vector<Event>&& events) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!accepting_ || events.empty()) return;
  recorded_.fetch_add(events.size());
  const bool first = pending_.empty();
  if (first) {
    pending_ = std::move(events);
  } else {
    for (auto& e : events) pending_.push_back(std::move(e));
  }
  if (first) cv_.notify_one();  // once per batch: the writer takes all that came since
}

std::string Timeline::RowName(const std::string& name) const {
  if (set_id_ == 0 || name.empty()) return name;
  return name + " [process set " + std::to_string(set_id_) + "]";
}

int Timeline::JobRank(int set_rank) const {
  if (set_id_ == 0 || !set_ranks_ || set_rank < 0 || set_rank >= (int)set_ranks_->size()) return set_rank;
  return (*set_ranks_)[set_rank];
}

void Timeline::Record(Kind kind, const std::string& name, const char* label, int rank) {
  std::vector<Event> one(1);
  one[0] = Event{Now(), kind, JobRank(rank), label, RowName(name), std::string()};
  Push(std::move(one));
}

void Timeline::RecordAll(Kind kind, const std::vector<TensorTableEntry*>& entries,
                         const char* label) {
  const int64_t ts = Now();
  std::vector<Event> events;
  events.reserve(entries.size());
  for (const auto* e : entries) {
    if (e) events.push_back(Event{ts, kind, 0, label, RowName(e->request.name), std::string()});
  }
  Push(std::move(events));
}

void Timeline::RecordResponses(const std::vector<Response>& responses) {
  const int64_t ts = Now();
  std::vector<Event> events;
  for (const auto& r : responses) {
    for (const auto& name : r.names) {
      const std::string n = RowName(name);
      events.push_back(Event{ts, kNegotiateEnd, 0, nullptr, n, std::string()});
      if (r.type == Response::kError) {
        events.push_back(Event{ts, kError, 0, nullptr, n, r.error});
      } else {
        events.push_back(Event{ts, kOpStart, 0, OpSpanName(r.op_type), n, DTypeName(r.dtype)});
      }
    }
  }
  Push(std::move(events));
}

void Timeline::WriterLoop() {
  // Started by the background thread, whose name a new thread inherits: named apart, so
  // that "mxhorovod-bg" is the communication alone (README, "Which thread is ours").
  pthread_setname_np(pthread_self(), "mxhorovod-tl");
  std::vector<Event> batch;
  auto last_write = std::chrono::steady_clock::now() - kMinGap;
  while (true) {
    bool stopping;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait_for(lk, kIdleWait, [&] { return stop_ || !pending_.empty(); });
      // At once after a quiet spell; within kMinGap of the last write, the events that
      // follow are gathered into one write.
      cv_.wait_until(lk, last_write + kMinGap, [&] { return stop_; });
      batch.swap(pending_);
      stopping = stop_;
    }
    for (const auto& e : batch) Write(e);
    std::fflush(file_);
    written_.fetch_add(batch.size());
    batch.clear();
    last_write = std::chrono::steady_clock::now();
    if (stopping) return;
  }
}

void Timeline::Emit(const std::string& json) {
  if (!first_event_) std::fputs(",\n", file_);
  first_event_ = false;
  std::fputs(json.c_str(), file_);
}

Timeline::Row& Timeline::RowOf(const std::string& name) {
  auto it = rows_.find(name);
  if (it != rows_.end()) return it->second;
  Row& row = rows_[name];
  row.pid = next_pid_++;
  const std::string pid = std::to_string(row.pid);
  Emit("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":\"" +
       JsonEscape(name) + "\"}}");
  Emit("{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid +
       ",\"args\":{\"sort_index\":" + pid + "}}");
  return row;
}

void Timeline::Close(Row& row, int64_t ts, bool negotiation_too) {
  const std::string end = "{\"ph\":\"E\",\"ts\":" + std::to_string(ts) +
                          ",\"pid\":" + std::to_string(row.pid) + ",\"tid\":0}";
  for (; row.activities > 0; --row.activities) Emit(end);
  if (row.op_open) Emit(end);
  row.op_open = false;
  if (negotiation_too && row.negotiating) Emit(end);
  if (negotiation_too) row.negotiating = false;
}

void Timeline::Write(const Event& e) {
  last_ts_ = std::max(last_ts_, e.ts_us);
  const std::string ts = std::to_string(e.ts_us);
  if (e.kind == kCycle) {
    Emit("{\"name\":\"CYCLE_START\",\"ph\":\"i\",\"s\":\"g\",\"ts\":" + ts + ",\"pid\":0,\"tid\":0}");
    return;
  }
  Row& row = RowOf(e.name);
  const std::string where = ",\"ts\":" + ts + ",\"pid\":" + std::to_string(row.pid) + ",\"tid\":0";
  auto begin = [&](const std::string& span, const std::string& args) {
    Emit("{\"name\":\"" + span + "\",\"ph\":\"B\"" + where + (args.empty() ? "" : ",\"args\":" + args) + "}");
  };
  const std::string end = "{\"ph\":\"E\"" + where + "}";
  switch (e.kind) {
    case kReady:
    case kCached:
      if (!row.negotiating) {
        Close(row, e.ts_us, false);  // an operation whose end was not recorded
        begin(std::string("NEGOTIATE_") + e.label,
              e.kind == kCached ? "{\"via\":\"response cache\"}" : "");
        row.negotiating = true;
      }
      Emit("{\"name\":\"" + std::to_string(e.rank) + "\",\"ph\":\"i\",\"s\":\"t\"" + where +
           ",\"args\":{\"rank\":" + std::to_string(e.rank) + "}}");
      break;
    case kNegotiateEnd:
      if (row.negotiating) Emit(end);
      row.negotiating = false;
      break;
    case kError:
      Emit("{\"name\":\"ERROR\",\"ph\":\"i\",\"s\":\"t\"" + where + ",\"args\":{\"error\":\"" +
           JsonEscape(e.text) + "\"}}");
      break;
    case kOpStart:
      Close(row, e.ts_us, true);
      begin(e.label, "{\"dtype\":\"" + e.text + "\"}");
      begin(kActivityQueue, "");
      row.op_open = true;
      row.activities = 1;
      break;
    case kActivityStart:
      if (!row.op_open) break;  // recording started in the middle of this operation
      begin(e.label, "");
      ++row.activities;
      break;
    case kActivityEnd:
      if (row.activities == 0) break;
      Emit(end);
      --row.activities;
      break;
    case kOpEnd:
      Close(row, e.ts_us, false);
      break;
    case kCycle:
      break;
  }
}

}  // namespace mxhorovod
