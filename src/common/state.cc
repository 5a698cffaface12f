#include "state.h"

#include "loop_stats.h"

namespace mxhorovod {

State& S() {
  static State* s = new State();  // never destroyed: engine threads may outlive main()
  return *s;
}

void Wake() {
  State& st = S();
  if (st.wake.exchange(true)) return;  // the loop has not consumed the last one yet
  // The lock orders this signal after the loop's check of `wake` (made under wake_mu,
  // then waiting): the signal cannot fall between them and be lost.
  { std::lock_guard<std::mutex> lk(st.wake_mu); }
  st.wake_cv.notify_one();
}

LoopStats& Stats() {
  static LoopStats* s = new LoopStats();  // never destroyed, as S()
  return *s;
}

}  // namespace mxhorovod
