// castor_test_worker: one worker in its own process, for tests that kill
// peers or need separate processes.
// Usage: castor_test_worker RANK WORLD MASTER_PORT [KIND ENDING [READY_FILE]]
//   KIND    what rank 0 leaves live at the end: "context" (an autograd
//           context with a call to worker1 recorded in it)
//   ENDING  how every rank ends: "shutdown", "shutdown_false" (shutdown(false)),
//           "destructor" (the Worker goes without shutdown()), "unwind" (an
//           exception unwinds through the live state), "killed" (rank 0
//           waits to be SIGKILLed; the others shut down)
//   READY_FILE  rank 0 writes it once its state is live; the other ranks
//           wait for it before an ending that does not wait for them
// Exit 0 unless something failed; a crash shows as 128 + the signal.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include <ATen/ATen.h>

#include "engine/context.hpp"
#include "support/cluster.hpp"

namespace {

struct Unwind : std::runtime_error {
  Unwind() : std::runtime_error("unwinding through live state on purpose") {}
};

int run(castor::Worker& w, const std::string& kind, const std::string& ending, const std::string& ready_file) {
  std::optional<castor::autograd::Context> ctx;
  if (w.rank() == 0 && kind == "context") {
    ctx.emplace(w);
    auto x = at::ones({2}).set_requires_grad(true);
    auto y = w.rpc_sync<at::Tensor>("worker1", "my_add", x, x);
    if (!at::equal(y, at::full({2}, 2.0))) throw std::runtime_error("my_add returned a wrong value");
  } else if (kind != "context") {
    throw std::invalid_argument("unknown KIND " + kind);
  }
  if (w.rank() == 0 && !ready_file.empty()) std::ofstream(ready_file) << "ready\n";
  if (ending == "killed" && w.rank() == 0) {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // the test kills us long before
    return 3;
  }
  // Endings that do not wait for the others (all but a graceful shutdown)
  // wait for rank 0's call first: a peer that left before it would fail it.
  if (w.rank() != 0 && !ready_file.empty() && ending != "shutdown" && ending != "killed") {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!std::ifstream(ready_file).good()) {
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("rank 0 never made its call");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (ending == "killed") {
    // A graceful shutdown with a dead peer fails, naming it; the survivor
    // then ends like any program that caught it.
    try {
      w.shutdown();
    } catch (const castor::RpcError& e) {
      if (std::string(e.what()).find("worker worker0 is unreachable") == std::string::npos) throw;
    }
  } else if (ending == "shutdown")
    w.shutdown();
  else if (ending == "shutdown_false")
    w.shutdown(false);
  else if (ending == "unwind")
    throw Unwind();
  else if (ending != "destructor")
    throw std::invalid_argument("unknown ENDING " + ending);
  return 0;  // `ctx` ends after the worker's shutdown, or with the Worker (destructor)
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s RANK WORLD_SIZE MASTER_PORT [KIND ENDING [READY_FILE]]\n", argv[0]);
    return 2;
  }
  try {
    auto opts = castor::test::local_options(std::atoi(argv[1]), std::atoi(argv[2]), uint16_t(std::atoi(argv[3])));
    auto w = castor::init_rpc(opts);
    if (argc < 6) {
      w.shutdown();
      return 0;
    }
    return run(w, argv[4], argv[5], argc > 6 ? argv[6] : "");
  } catch (const Unwind&) {
    return 0;  // the live state and the Worker were destroyed on the way here
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor_test_worker: %s\n", e.what());
    return 1;
  }
}
