// A user's own program outside castor's tree, started by the installed
// `castor run -n N ./launched MODE` or named as a cluster file's "program":
// it learns who it is from the launcher (castor::init_rpc_from_env) and
// rank 0 calls every other rank.
//   MODE ok        every rank answers; rank 0 prints what it heard
//   MODE fail      rank 1's own code fails before it joins: it exits 3 with
//                  its error
//   MODE die-once  the first start of the job loses rank 1 to a SIGKILL of
//                  its own (CASTOR_RESTART unset); a restart finishes
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <castor.hpp>

CASTOR_FUNCTION(introduce, [](int64_t from) {
  auto& w = castor::current_worker();
  return w.name() + " of " + std::to_string(w.world_size()) + " greets rank " + std::to_string(from);
});

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "ok";
  const char* restart = std::getenv("CASTOR_RESTART");
  try {
    // Before it joins: rank 0 is still waiting for it, so the launcher's
    // verdict is this failure (L2), not rank 0's clean end (L1).
    const char* rank = std::getenv("RANK");
    if (mode == "fail" && rank && std::string(rank) == "1") throw std::runtime_error("rank 1 fails on purpose");
    castor::Worker w = castor::init_rpc_from_env();
    bool first_start = !restart || std::string(restart) == "0";
    if (mode == "die-once" && w.rank() == 1 && first_start) ::raise(SIGKILL);
    if (w.rank() == 0) {
      for (int r = 1; r < w.world_size(); ++r)
        std::printf("launched: %s\n",
                    w.rpc_sync<std::string>(w.get_worker_info(int64_t(r)).name, "introduce", int64_t(0)).c_str());
      std::printf("launched: done after %s restart(s)\n", restart ? restart : "0");
      std::fflush(stdout);
    }
    w.shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launched: %s\n", e.what());
    return 3;
  }
}
