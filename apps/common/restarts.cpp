// The restart loop around run_processes.
//
// Note [Restart policy]
// ~~~~~~~~~~~~~~~~~~~~~
//  R1. Without --max-restarts (0), a job runs once under Note [Launch
//      policy], L1-L4.
//  R2. With --max-restarts N > 0, a worker killed by a signal the launcher
//      did not send (SIGKILL, the OOM killer, a crash) stops the whole job
//      (L5), and the job is started again: every worker, with
//      CASTOR_RESTART=<restarts so far> in its environment. The app resumes
//      from its last checkpoint (castor::Checkpoint); this is torchrun's
//      group restart. It holds for rank 0 as for any other rank.
//  R3. Restarts are counted per worker: the death that would be a worker's
//      N+1-th restart fails the job, naming the worker and the count, with
//      that death's exit code (128 + the signal).
//  R4. A worker that exits with an error code of its own is not restarted
//      (L2: the same error would come back); a job whose rank 0 ended well
//      is over, whatever died after it.
// Not yet: a worker other than rank 0 that restarts alone and rejoins the
// survivors under a new incarnation; until then every death costs the
// whole job its progress since the last checkpoint.
#include "apps/common/restarts.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <map>
#include <stdexcept>

#include "apps/common/training_log.hpp"

namespace castor::apps {

void declare_max_restarts(po::options_description& flags) {
  flags.add_options()
      ("max-restarts", po::value<int>()->default_value(0)->value_name("N"),
       "a worker's death restarts the whole job, up to N times per worker (README, \"When workers fail\")");
}

int max_restarts_from(const Flags& flags) {
  int n = flags.get<int>("max-restarts");
  if (n < 0 || n > 1000) throw std::invalid_argument("--max-restarts takes a number from 0 to 1000, not " + std::to_string(n));
  return n;
}

LaunchResult run_with_restarts(const std::function<std::vector<ProcessSpec>(int restart)>& make_specs, int max_restarts,
                      const std::string& command) {
  std::map<std::string, int> restarts;  // R3: per worker
  // Note [Curve files], C2: one name for the job, whatever restarts it; a
  // CASTOR_JOB_ID of the user's is kept.
  const char* given_job = std::getenv("CASTOR_JOB_ID");
  const std::string job = given_job && *given_job ? given_job : new_job_id();
  for (int restart = 0;; ++restart) {
    auto specs = make_specs(restart);
    for (auto& s : specs) s.env.emplace("CASTOR_JOB_ID", job);
    if (max_restarts > 0)
      for (auto& s : specs) s.env["CASTOR_RESTART"] = std::to_string(restart);
    auto result = run_processes(specs, std::chrono::seconds(5), max_restarts > 0);
    report_lost(result, command);
    if (max_restarts == 0 || result.exit_code == 0 || result.died.empty()) return result;  // R1, R4
    const auto& death = result.died.front();  // the first death seen caused the others' ends
    int count = ++restarts[death.name];
    if (count > max_restarts) {  // R3: the death is the verdict, whoever was reaped first
      result.failed = death.name;
      result.exit_code = 128 + death.signal;
      std::fprintf(stderr, "%s: %s died (killed by signal %d) %d times; --max-restarts %d allows %d restart(s) per "
                   "worker: the job fails\n",
                   command.c_str(), death.name.c_str(), death.signal, count, max_restarts, max_restarts);
      return result;
    }
    std::printf("[launch] %s died (killed by signal %d): restarting the job (restart %d of %d for %s); it resumes "
                "from its last checkpoint\n",
                death.name.c_str(), death.signal, count, max_restarts, death.name.c_str());
    std::fflush(stdout);
  }
}

}  // namespace castor::apps
