#include "apps/common/rejoin_wait.hpp"

#include <thread>

namespace castor::apps {

bool await_rejoin(Worker& w, int64_t rank, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!w.is_alive(rank)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace castor::apps
