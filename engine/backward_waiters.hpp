// BackwardWaiters: the backward() callers of one worker that wait for their
// pass, so that stopping the worker ends their wait (Note [Backward at
// shutdown]).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "messages/error_info.hpp"
#include "messages/ids.hpp"

namespace castor::detail {

// Note [Backward at shutdown]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// backward() waits for its graph task to end the pass, and the task ends it
// when its part is done, a peer fails it, a peer dies or its watchdog fires.
// Once its worker stops (shutdown(false), a graceful shutdown that gave up,
// the Worker's destructor), none of these may come: the peers' answers and
// deaths are no longer delivered, and the task's actor may be ended without
// running its handlers. A backward() on another thread then waited forever
// (found by the endings test with an early gradient in flight).
//  BW1. Every backward() caller is listed here while it waits; stopping the
//       worker's autograd layer fails each with a ShutdownError naming the
//       worker and the context, and fails at once any caller that comes
//       after. The task's own ending may come too: the first one wins (the
//       caller's promise takes the first outcome only).
//  BW2. The list is shared by the callers and the runtime: a caller that
//       wakes after the worker went still finds it.
class BackwardWaiters {
 public:
  using Fail = std::function<void(ErrorInfo)>;

  /// `fail` ends the wait of a backward() in context `ctx`; an id for
  /// remove(), or 0 if the worker stopped already (`fail` ran, here).
  uint64_t add(ContextId ctx, Fail fail);
  void remove(uint64_t id);
  /// Fails every waiter and every later add(), naming worker `worker`.
  void close(const std::string& worker);

 private:
  ErrorInfo stopped_error(ContextId ctx) const;

  std::mutex mtx_;
  bool closed_ = false;
  std::string worker_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, std::pair<ContextId, Fail>> waiting_;
};

}  // namespace castor::detail
