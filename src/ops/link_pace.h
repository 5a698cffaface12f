// The pause between tests of a wait for data between hosts, sized from the link's rate.
//
// MPI moves bytes over TCP only while a call of this process drives its progress, so a
// wait between hosts tests, pauses, tests again. Each pause costs the bytes the link could
// have moved meanwhile beyond what the socket buffers and MPI's in-flight fragments hold,
// and each test costs CPU, which backward needs where the exchange overlaps it. A fixed
// pause is right for one link rate only: 200 us took 40% less CPU than 50 us at 1 Gbit/s
// with the same speed, but slowed an allreduce 1.12-1.24x at 4 Gbit/s (docs/benchmarks.md).
//
// So the pause is the time the link takes to move kPaceBytes at its measured rate: about
// 160 us at 1 Gbit/s, 40 us at 4 Gbit/s, none (the wait yields its core) from about
// 16 Gbit/s. The rate comes from allreduces between hosts large enough to be bound by the
// link (NoteLinkAllreduce), on every rank of a host (each rank waits between hosts in some
// collectives). Until one is measured the pause is kFirstPauseUs.
//
// A pause too long for the link lowers the measured rate, and a lower rate lengthens the
// pause. That loop cannot run away: kPaceBytes is below what MPI moves per test at the
// rates measured here, so a pause too long still moves more than kPaceBytes per test, the
// measured rate exceeds the estimate, and the estimate (which follows a rise at once and a
// fall by a quarter of the difference per call) climbs back: a 1 ms pause on a link of 7
// Gbit/s still measured 891 Mbit/s, and a link that got 20 times faster was measured
// within two calls.
#ifndef MXHOROVOD_OPS_LINK_PACE_H_
#define MXHOROVOD_OPS_LINK_PACE_H_

#include <cstdint>

namespace mxhorovod {

// Bytes the link moves during one pause. Measured on namespace hosts with tc-capped veths
// (UCX over TCP): a pause of 200 us moved an allreduce at 1 Gbit/s at the TCP floor (so MPI
// moves 25 KB and more per test), and slowed 4 Gbit/s 1.24x (so less than about 80 KB).
constexpr int64_t kPaceBytes = 20000;
// The pause before any rate is measured (the fixed pause of earlier releases).
constexpr long kFirstPauseUs = 50;
// The longest pause: at 200 Mbit/s and slower a pause of 1 ms still moves at most 25 KB.
constexpr long kMaxPauseUs = 1000;
// A pause shorter than this is no pause: the wait yields its core between tests.
constexpr long kMinPauseUs = 10;
// Allreduces with fewer bytes than this are latency, not link, bound: not measured.
constexpr int64_t kPaceMinBytes = int64_t(4) << 20;

// Notes an allreduce of `bytes` (one rank's tensor, count x element size) between `hosts`
// hosts that took `seconds`. Each host must send 2(hosts-1)/hosts of the bytes (the link
// floor, DESIGN.md "Across hosts"); that over the time is one measurement of the rate. An
// algorithm that sends more (MPICH's flat allreduce with several ranks per host) must pass
// the bytes scaled accordingly, else the rate reads low and the pause long.
// Small calls (below kPaceMinBytes) and single hosts are ignored. Background thread only.
void NoteLinkAllreduce(int64_t bytes, int hosts, double seconds);
// The pause between tests of a wait between hosts, in microseconds (0: yield instead):
// the fixed one where ResetLinkPace was given one, else the one sized from the rate.
long LinkPauseUs();
// The rate estimate in bytes per second (0: none yet), for logs and tests. Measured also
// where the pause is fixed.
double LinkRateEstimate();
// Forgets the estimate (a new job, in init(); tests). `fixed_us` >= 0 fixes the pause
// (MXHOROVOD_LINK_SLEEP_US); -1 sizes it from the rate.
void ResetLinkPace(long fixed_us = -1);

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_LINK_PACE_H_
