// Thread-local facts about the current thread.
#include "actors/calls/thread_context.hpp"

namespace castor::detail {
namespace {
thread_local bool tl_on_caf_thread = false;
}

bool on_caf_thread() { return tl_on_caf_thread; }
void mark_caf_thread(bool value) { tl_on_caf_thread = value; }

}  // namespace castor::detail
