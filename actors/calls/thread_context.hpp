// What the current thread is: a CAF scheduler thread (must never block) or a
// castor executor thread (may block, managed), and whether it is running a
// method on arrival.
#pragma once

#include <chrono>
#include <string>

namespace castor::detail {

/// True on threads started by a CAF actor system (scheduler, middleman).
bool on_caf_thread();

/// Installed into every actor system castor starts (see make_caf_config).
void mark_caf_thread(bool value);

/// How long this thread's next Future wait watches before it sleeps (Note
/// [Waiting for a reply], WR4, in actors/api/future.cpp).
std::chrono::microseconds wait_watch_limit();

/// Note [Methods run on arrival] (rref/owner_rref_actor.cpp): the method
/// this thread is running on arrival, while it runs.
struct ArrivalMethod {
  const std::string* worker;
  const std::string* method;  // "Class.method"
};

/// The innermost method running on arrival on this thread, or null.
const ArrivalMethod* arrival_method();

/// Marks the thread as running `method` on arrival for the scope's life.
class ArrivalMethodScope {
 public:
  explicit ArrivalMethodScope(const ArrivalMethod& method);
  ~ArrivalMethodScope();
  ArrivalMethodScope(const ArrivalMethodScope&) = delete;
  ArrivalMethodScope& operator=(const ArrivalMethodScope&) = delete;

 private:
  const ArrivalMethod* outer_;
};

}  // namespace castor::detail
