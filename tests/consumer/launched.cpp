// A user's own program outside castor's tree, started by the installed
// `castor run -n N ./launched MODE` or named as a cluster file's "program":
// it learns who it is from the launcher (castor::init_rpc_from_env) and
// rank 0 calls every other rank.
//   MODE ok        every rank answers; rank 0 prints what it heard
//   MODE fail      rank 1's own code fails before it joins: it exits 3 with
//                  its error
//   MODE die-once  rank 1's first life (CASTOR_INCARNATION 1 of the job's
//                  first start) SIGKILLs itself when rank 0 calls it; under
//                  --max-restarts its new life rejoins (README, "Restarts,
//                  rejoin and checkpoints") and rank 0 calls it again
//   MODE linger    as ok, after 2 s of waiting once joined
//   MODE hold DIR  every rank joins, rank 0 says so, and all wait up to 60 s
//                  (for a test that kills their launcher meanwhile); a
//                  SIGTERM makes a rank create DIR/rank<R>.term and exit 0
//   MODE early DIR every rank says it waits before it joins, and waits up to
//                  60 s for DIR/go (which a test that kills the launcher
//                  never makes) before it joins as `ok`; a SIGTERM makes it
//                  create DIR/rank<R>.term and exit 0
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <castor.hpp>

bool die_in_call = false;  // die-once, in rank 1's first life

// hold: the file a SIGTERM creates (made before the handler is set: a
// handler may only make async-signal-safe calls).
char term_marker[4096];
extern "C" void on_term(int) {
  int fd = ::open(term_marker, O_CREAT | O_WRONLY, 0600);
  if (fd >= 0) ::close(fd);
  ::_exit(0);
}

CASTOR_FUNCTION(introduce, [](int64_t from) {
  if (die_in_call) ::raise(SIGKILL);
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
    bool rank_one = rank && std::string(rank) == "1";
    if (mode == "fail" && rank_one) throw std::runtime_error("rank 1 fails on purpose");
    // Armed before it joins: rank 0 may call as soon as the world forms,
    // before init_rpc_from_env has returned here.
    const char* life = std::getenv("CASTOR_INCARNATION");
    bool first_life = (!restart || std::string(restart) == "0") && (!life || std::string(life) == "1");
    die_in_call = mode == "die-once" && rank_one && first_life;
    // hold: from before it joins, so that a SIGTERM at any moment after
    // the test saw the world formed finds the handler set.
    if ((mode == "hold" || mode == "early") && argc > 2) {
      std::snprintf(term_marker, sizeof term_marker, "%s/rank%s.term", argv[2], rank ? rank : "-");
      ::signal(SIGTERM, on_term);
    }
    if (mode == "early" && argc > 2) {  // a user's program busy before init_rpc (loading its data)
      std::printf("launched: rank %s waits before it joins\n", rank ? rank : "-");
      std::fflush(stdout);
      std::string go = std::string(argv[2]) + "/go";
      for (int i = 0; i < 600 && ::access(go.c_str(), F_OK) != 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    castor::Worker w = castor::init_rpc_from_env();
    const char* max_restarts = std::getenv("CASTOR_MAX_RESTARTS");
    bool comes_back = max_restarts && std::atoi(max_restarts) > 0;
    if (mode == "linger") std::this_thread::sleep_for(std::chrono::seconds(2));
    if (mode == "hold") {
      if (w.rank() == 0) std::printf("launched: holding\n");
      std::fflush(stdout);
      for (int i = 0; i < 600; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } else if (w.rank() == 0) {
      int rejoins = 0;
      for (int r = 1; r < w.world_size(); ++r) {
        auto name = w.get_worker_info(int64_t(r)).name;
        for (int attempt = 1;; ++attempt) {
          try {
            std::printf("launched: %s\n", w.rpc_sync<std::string>(name, "introduce", int64_t(0)).c_str());
            break;
          } catch (const castor::UnreachableError&) {
            if (!comes_back || attempt == 3) throw;
            // Its next life rejoins: wait for it (bounded), then call again.
            for (int i = 0; i < 600 && !w.is_alive(name); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
            ++rejoins;
          }
        }
      }
      std::printf("launched: done after %s restart(s) and %d rejoin(s)\n", restart ? restart : "0", rejoins);
      std::fflush(stdout);
    }
    w.shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launched: %s\n", e.what());
    return 3;
  }
}
