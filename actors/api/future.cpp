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

}  // namespace castor::detail
