// current_worker(): the thread's worker (executor threads), else the process'
// only worker. Also the default place where then-callbacks run.
#include "actors/api/current_worker.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

#include "actors/api/errors.hpp"
#include "actors/calls/executor.hpp"
#include "actors/api/future.hpp"
#include "actors/api/worker.hpp"
#include "actors/api/worker_access.hpp"

namespace castor {
namespace detail {
namespace {
thread_local Worker* tl_worker = nullptr;

std::mutex& process_mutex() {
  static std::mutex m;
  return m;
}
std::vector<Worker*>& process_workers() {
  static std::vector<Worker*> v;
  return v;
}
}  // namespace

Worker* set_thread_worker(Worker* w) { return std::exchange(tl_worker, w); }

void register_process_worker(Worker* view) {
  std::lock_guard<std::mutex> lock(process_mutex());
  process_workers().push_back(view);
}

void unregister_process_worker(Worker* view) {
  std::lock_guard<std::mutex> lock(process_mutex());
  auto& v = process_workers();
  v.erase(std::remove(v.begin(), v.end(), view), v.end());
}

CallbackRunner default_callback_runner() {
  if (auto* ex = Executor::current()) return ex->runner();
  std::lock_guard<std::mutex> lock(process_mutex());
  if (process_workers().size() == 1) return callback_runner(*process_workers().front());
  return {};  // no executor to use: callbacks run on the completing thread
}

}  // namespace detail

Worker& current_worker() {
  if (detail::tl_worker) return *detail::tl_worker;
  std::lock_guard<std::mutex> lock(detail::process_mutex());
  auto& v = detail::process_workers();
  if (v.size() == 1) return *v.front();
  throw LookupError(ErrorInfo{ErrorKind::Lookup, "",
                              v.empty() ? "castor::current_worker(): no worker is running in this process"
                                        : "castor::current_worker(): called outside a user function in a process "
                                          "with " + std::to_string(v.size()) + " workers; pass the Worker explicitly"});
}

}  // namespace castor
