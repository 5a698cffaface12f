// Settings read from the environment at init(), with Horovod's names, units and defaults.
#ifndef MXHOROVOD_COMMON_CONFIG_H_
#define MXHOROVOD_COMMON_CONFIG_H_

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "logging.h"
#include "stall_inspector.h"

namespace mxhorovod {

struct Config {
  double cycle_time_ms = 1.0;                 // HOROVOD_CYCLE_TIME (milliseconds)
  int64_t fusion_threshold = 128ll << 20;     // HOROVOD_FUSION_THRESHOLD (bytes)
  int64_t cache_capacity = 1024;              // HOROVOD_CACHE_CAPACITY (entries; 0 = off)
  int64_t slice_bytes = 4ll << 20;            // MXHOROVOD_SLICE_BYTES: bytes per MPI call
  // MXHOROVOD_LINK_SLICE_BYTES: bytes per allreduce call between hosts (the pipeline's
  // slices; a 64 MiB hierarchical allreduce on 2 hosts x 2 ranks at 1 Gbit/s: 1.01-1.16x
  // the TCP floor in 1 MiB slices, 1.17 in 256 KiB, 1.3-1.56 in 4 MiB, 1.45 in 16 MiB).
  int64_t link_slice_bytes = 1ll << 20;
  bool dynamic_process_sets = false;          // HOROVOD_DYNAMIC_PROCESS_SETS
  bool autotune = false;                      // HOROVOD_AUTOTUNE
  int autotune_warmup_samples = 1;            // HOROVOD_AUTOTUNE_WARMUP_SAMPLES
  int autotune_steps_per_sample = 10;         // HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE (>= 1)
  int64_t zero_copy_bytes = 64ll << 10;       // MXHOROVOD_ZERO_COPY_BYTES: larger goes in place
  // MXHOROVOD_BLOCKING_DATA: 1 = MPI's blocking (polling) calls for the data, 0 = nonblocking
  // calls waited by mxhorovod (a short busy test, then yield, then sleep); unset (-1) = 0.
  int blocking_data = -1;
  // MXHOROVOD_CMA: allreduce by cross-memory attach when all ranks share a host (ops/cma_backend.h);
  // MXHOROVOD_CMA_MIN_BYTES: smaller buffers go through MPI.
  bool cma = true;
  bool doorbell = true;                       // MXHOROVOD_DOORBELL: waits sleep on a futex in /dev/shm
  int64_t cma_min_bytes = 64ll << 10;
  // HOROVOD_HIERARCHICAL_ALLREDUCE: 1 (a number above 0) on, 0 off; unset (-1): on when the
  // job spans more than one host and some host runs more than one rank, or spans more
  // than 2 hosts (StartMPI).
  int hierarchical_allreduce = -1;
  // MXHOROVOD_TRANSFER_TIMEOUT_SECONDS (0: no bound) and MXHOROVOD_TRANSFER_MIN_MBITS: the
  // bound of a data call between hosts, base + its bytes at the rate (ops/mpi_wait.h).
  double transfer_timeout_s = 30;
  double transfer_min_mbits = 100;
  // MXHOROVOD_LINK_SLEEP_US: the pause between tests of a wait between hosts, in
  // microseconds (ops/mpi_wait.h LinkWait); 0: no pause, the wait yields its core instead;
  // -1 (unset): sized from the link's measured rate (ops/link_pace.h).
  int link_sleep_us = -1;
  // MXHOROVOD_SIMD, lower case: the float16 kernels (ops/float16.h). "" or "auto": the best
  // this CPU has; "avx2"; "portable": plain C++ (the same bits, slower).
  std::string simd;
  // HOROVOD_THREAD_AFFINITY: "c0,c1,...": the background thread of local rank i runs on core
  // ci (host_cores.h); empty: not pinned.
  std::vector<int> thread_affinity;
  std::string timeline;                       // HOROVOD_TIMELINE: file written by rank 0
                                              // ("" or DYNAMIC: only start_timeline())
  bool timeline_mark_cycles = false;          // HOROVOD_TIMELINE_MARK_CYCLES
  StallSettings stall;                        // HOROVOD_STALL_CHECK_* (stall_inspector.h)
  LogSettings log;                            // HOROVOD_LOG_LEVEL, HOROVOD_LOG_HIDE_TIME
  static Config FromEnv();
};

// Value of an environment variable as a number, or `fallback` when unset or empty.
// Throws std::invalid_argument naming the variable when it is not a number.
double EnvNumber(const char* name, double fallback);
// 1/true/yes/on or 0/false/no/off (any case), `fallback` when unset or empty; throws
// std::invalid_argument naming the variable otherwise.
bool EnvBool(const char* name, bool fallback);
// A comma-separated list of core ids (non-negative integers; spaces allowed), empty when
// unset or empty; throws std::invalid_argument naming the variable otherwise.
std::vector<int> EnvCoreList(const char* name);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_CONFIG_H_
