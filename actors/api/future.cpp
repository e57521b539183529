// Future support: blocking rules, default callback runner, user exceptions.
#include "actors/api/future.hpp"
#include "actors/api/registry.hpp"

#include "actors/calls/executor.hpp"
#include "actors/calls/thread_context.hpp"

namespace castor::detail {

WaitGuard::WaitGuard() : scope_(nullptr) {
  if (on_caf_thread())
    throw RpcError(ErrorInfo{ErrorKind::Internal, "",
                             "castor: a blocking wait on a CAF scheduler thread would stall the actor system; "
                             "use Future::then() there instead"});
  if (Executor::current()) scope_ = new Executor::BlockingScope();
}

WaitGuard::~WaitGuard() { delete static_cast<Executor::BlockingScope*>(scope_); }

ErrorInfo error_from_exception(std::exception_ptr e, const std::string& worker, const std::string& ran) {
  auto where = worker.empty() ? std::string() : "worker " + worker + ": ";
  auto raised = ran.empty() ? std::string() : ran + " raised: ";
  try {
    std::rethrow_exception(e);
  } catch (const RpcError& x) {
    return x.info();
  } catch (const CallFailure& f) {
    return ErrorInfo{f.kind, worker, where + f.message};
  } catch (const std::exception& x) {
    return ErrorInfo{ErrorKind::Remote, worker, where + raised + x.what()};
  } catch (...) {
    return ErrorInfo{ErrorKind::Remote, worker,
                     where + (ran.empty() ? std::string("an exception") : ran + " raised an exception") +
                         " that is not a std::exception"};
  }
}

void wait_all_or_first_error(const std::vector<FutureCore*>& futures) {
  // Each future tells this board when it completes, on its completing
  // thread; the board is shared, so a future that completes after we left
  // (we threw) still finds it.
  struct Board {
    std::mutex mtx;
    std::condition_variable cv;
    size_t left = 0;
    std::optional<ErrorInfo> first_error;  // the first failure to arrive
  };
  auto board = std::make_shared<Board>();
  board->left = futures.size();
  for (auto* core : futures)
    core->add_inline_callback([board, core] {
      auto error = core->error();
      {
        std::lock_guard<std::mutex> lock(board->mtx);
        --board->left;
        if (error && !board->first_error) board->first_error = std::move(error);
      }
      board->cv.notify_all();
    });
  std::optional<ErrorInfo> failed;
  {
    std::unique_lock<std::mutex> lock(board->mtx);
    auto over = [&] { return board->left == 0 || board->first_error.has_value(); };
    if (!over()) {
      WaitGuard guard;  // a wait that blocks follows Future::wait's rules
      board->cv.wait(lock, over);
    }
    failed = board->first_error;
  }
  if (failed) throw_rpc_error(std::move(*failed));
}

}  // namespace castor::detail
