// Thread-local facts about the current thread.
#include "actors/calls/thread_context.hpp"

namespace castor::detail {
namespace {
thread_local bool tl_on_caf_thread = false;
thread_local const ArrivalMethod* tl_arrival_method = nullptr;
}  // namespace

bool on_caf_thread() { return tl_on_caf_thread; }
void mark_caf_thread(bool value) { tl_on_caf_thread = value; }

const ArrivalMethod* arrival_method() { return tl_arrival_method; }

ArrivalMethodScope::ArrivalMethodScope(const ArrivalMethod& method) : outer_(tl_arrival_method) {
  tl_arrival_method = &method;
}
ArrivalMethodScope::~ArrivalMethodScope() { tl_arrival_method = outer_; }

}  // namespace castor::detail
