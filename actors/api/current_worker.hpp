// castor::current_worker(): the Worker running the current user function.
#pragma once

namespace castor {

class Worker;

/// Inside a user function (or then-callback): the Worker running it. Elsewhere,
/// in a process with exactly one Worker: that Worker. Otherwise throws.
Worker& current_worker();

namespace detail {
/// Set on executor threads (and cleared) by the worker that owns them, and
/// around a method run on arrival; returns the thread's worker before.
Worker* set_thread_worker(Worker* w);
/// Tracks live owning Workers of this process, for the one-Worker fallback.
void register_process_worker(Worker* view);
void unregister_process_worker(Worker* view);
}  // namespace detail

}  // namespace castor
