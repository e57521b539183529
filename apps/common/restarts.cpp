// The restart loop around run_processes.
//
// Note [Restart policy]
// ~~~~~~~~~~~~~~~~~~~~~
//  R1. Without --max-restarts (0), a job runs once under Note [Launch
//      policy], L1-L4.
//  R2. With --max-restarts N > 0, a worker other than rank 0 killed by a
//      signal the launcher did not send (SIGKILL, the OOM killer, a crash)
//      is started again alone (L6), with CASTOR_INCARNATION=<its life>:
//      it rejoins the survivors under that incarnation (Note [Rejoin] in
//      actors/cluster/rejoin.cpp), who carried on meanwhile; the app takes
//      it back (the parameter server gives it a trainer again).
//  R3. When rank 0 dies (the driver, the name store, the shutdown
//      coordinator), the job stops whole (L1) and is started again: every
//      worker, in its first life, with CASTOR_RESTART=<restarts so far> in
//      its environment. The app resumes from its last checkpoint
//      (castor::Checkpoint); this is torchrun's group restart.
//  R4. Restarts are counted per worker, both kinds together: the death
//      that would be a worker's N+1-th restart fails the job, naming the
//      worker and the count, with that death's exit code (128 + the
//      signal). Every worker sees CASTOR_MAX_RESTARTS=N.
//  R5. A worker that exits with an error code of its own is not restarted
//      (L2: the same error would come back); a job whose rank 0 ended well
//      is over, whatever died after it.
//  R6. Except kExitRestartJob (75), which a worker started again under R2
//      exits with when the world its previous life died from never finished
//      joining (RJ8 of Note [Rejoin]): the job starts again whole, as R3,
//      without counting that worker twice.
//  R7. A launch without rank 0 (one host of a multi-host cluster file)
//      cannot see rank 0 die, but its workers can: each notes it (N2 of
//      Note [Launch notes], actors/cluster/launch_notes.cpp). When one of
//      them did, this host's workers all start again in their first life,
//      with CASTOR_RESTART one higher, and join the job that rank 0's own
//      launcher restarts whole (R3) at the file's ports. Such restarts are
//      counted by rank 0's launcher, which ends the job when they are
//      spent; this host gives up after N x the job's workers of them (each
//      is some worker's restart), and then the next start's join would
//      have failed anyway, within the init timeout.
#include "apps/common/restarts.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>

#include "actors/api/errors.hpp"
#include "actors/cluster/launch_notes.hpp"
#include "apps/common/training_log.hpp"

namespace castor::apps {

void declare_max_restarts(po::options_description& flags) {
  flags.add_options()
      ("max-restarts", po::value<int>()->default_value(0)->value_name("N"),
       "a worker's death restarts the whole job, up to N times per worker (README, \"When workers fail\")");
}

int max_restarts_from(const Flags& flags) {
  int n = flags.get<int>("max-restarts");
  // A worker's lives are numbered 1..256 (Note [Incarnation ids]).
  if (n < 0 || n > 255) throw std::invalid_argument("--max-restarts takes a number from 0 to 255, not " + std::to_string(n));
  return n;
}

namespace {

// N1 of Note [Launch notes]: a folder of this launch's notes files, one per
// worker, removed with the launch.
class NotesFolder {
 public:
  NotesFolder() {
    auto pattern = (std::filesystem::temp_directory_path() / "castor-launch-XXXXXX").string();
    if (::mkdtemp(pattern.data())) path_ = pattern;
  }
  ~NotesFolder() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  NotesFolder(const NotesFolder&) = delete;
  NotesFolder& operator=(const NotesFolder&) = delete;

  /// Gives `spec` an empty notes file.
  void give(ProcessSpec& spec) const {
    if (path_.empty()) return;  // no temporary folder: exit codes alone, as without notes
    auto file = path_ + "/" + spec.name + ".notes";
    std::error_code ignored;
    std::filesystem::remove(file, ignored);
    spec.env[detail::kLaunchNotesVariable] = file;
  }

  /// R7: the first worker's note that rank 0 was lost, if any.
  std::optional<std::string> rank_zero_lost(const std::vector<ProcessSpec>& specs) const {
    for (const auto& s : specs) {
      auto it = s.env.find(detail::kLaunchNotesVariable);
      if (it == s.env.end()) continue;
      if (auto note = detail::read_launch_note(it->second, detail::kRankZeroLost)) return note;
    }
    return std::nullopt;
  }

 private:
  std::string path_;
};

}  // namespace

LaunchResult run_with_restarts(const std::function<std::vector<ProcessSpec>(int restart)>& make_specs, int max_restarts,
                      const std::string& command, size_t job_workers) {
  std::map<std::string, int> restarts;  // R3: per worker
  std::optional<NotesFolder> notes;
  if (max_restarts > 0) notes.emplace();
  int followed = 0;  // R7: job restarts this launch followed
  // Note [Curve files], C2: one name for the job, whatever restarts it; a
  // CASTOR_JOB_ID of the user's is kept.
  const char* given_job = std::getenv("CASTOR_JOB_ID");
  const std::string job = given_job && *given_job ? given_job : new_job_id();
  for (int restart = 0;; ++restart) {
    auto specs = make_specs(restart);
    for (auto& s : specs) s.env.emplace("CASTOR_JOB_ID", job);
    if (max_restarts > 0)
      for (auto& s : specs) {
        s.env["CASTOR_RESTART"] = std::to_string(restart);
        s.env["CASTOR_MAX_RESTARTS"] = std::to_string(max_restarts);
        s.env["CASTOR_INCARNATION"] = "1";  // R3: a new world
        notes->give(s);
      }
    bool holds_rank_zero = std::any_of(specs.begin(), specs.end(), [](const ProcessSpec& s) { return s.leader; });
    if (job_workers == 0) job_workers = specs.size();
    std::map<std::string, int> lives;  // R2: in this start of the job
    Respawn respawn = [&](const Death& death) -> std::optional<ProcessSpec> {
      if (restarts[death.name] >= max_restarts) return std::nullopt;  // R4: L5 stops the job, counted below
      auto it = std::find_if(specs.begin(), specs.end(), [&](const ProcessSpec& s) { return s.name == death.name; });
      if (it == specs.end()) return std::nullopt;
      int count = ++restarts[death.name];
      int life = ++lives[death.name] + 1;
      auto spec = *it;
      spec.env["CASTOR_INCARNATION"] = std::to_string(life);
      notes->give(spec);
      std::printf("[launch] %s died (killed by signal %d): starting it again (restart %d of %d for %s); it rejoins "
                  "under incarnation %d\n",
                  death.name.c_str(), death.signal, count, max_restarts, death.name.c_str(), life);
      std::fflush(stdout);
      return spec;
    };
    auto result = run_processes(specs, std::chrono::seconds(5), max_restarts > 0,
                                max_restarts > 0 ? respawn : Respawn{});
    report_lost(result, command);
    if (result.stopped_by) return result;  // L8: the launcher was told to stop; nothing starts again
    if (max_restarts > 0 && result.exit_code == kExitRestartJob && lives.count(result.failed)) {  // R6
      std::printf("[launch] %s could not rejoin: its world never finished joining; the job starts again whole\n",
                  result.failed.c_str());
      std::fflush(stdout);
      continue;
    }
    // R3, R4: counts `death` against its worker; true, with the job's
    // verdict set and told, once that worker's restarts are spent.
    auto spent = [&](const Death& death) {
      int count = ++restarts[death.name];
      if (count <= max_restarts) return false;
      result.failed = death.name;
      result.exit_code = 128 + death.signal;
      std::fprintf(stderr, "%s: %s died (killed by signal %d) %d times; --max-restarts %d allows %d restart(s) per "
                   "worker: the job fails\n",
                   command.c_str(), death.name.c_str(), death.signal, count, max_restarts, max_restarts);
      return true;
    };
    if (max_restarts > 0 && !holds_rank_zero) {  // R7
      if (auto lost = notes->rank_zero_lost(specs)) {
        // A death of this host's own in the same round counts, as in R3.
        if (!result.died.empty() && spent(result.died.front())) return result;
        if (++followed > max_restarts * int(job_workers)) {
          result.exit_code = result.exit_code ? result.exit_code : 1;
          std::fprintf(stderr, "%s: rank 0 was lost again (%s) after %d restarts of the job; --max-restarts %d "
                       "allows at most %d for its %zu worker(s): the job fails\n",
                       command.c_str(), lost->c_str(), followed - 1, max_restarts, max_restarts * int(job_workers),
                       job_workers);
          return result;
        }
        std::printf("[launch] rank 0 was lost (%s): this host's %zu worker(s) start again in their first life, to "
                    "join the job's restart (restart %d here)\n",
                    lost->c_str(), specs.size(), followed);
        std::fflush(stdout);
        continue;
      }
    }
    if (max_restarts == 0 || result.exit_code == 0 || result.died.empty()) return result;  // R1, R5
    const auto& death = result.died.front();  // the first death seen caused the others' ends
    if (spent(death)) return result;  // R3: the death is the verdict, whoever was reaped first
    int count = restarts[death.name];
    std::printf("[launch] %s died (killed by signal %d): restarting the job (restart %d of %d for %s); it resumes "
                "from its last checkpoint\n",
                death.name.c_str(), death.signal, count, max_restarts, death.name.c_str());
    std::fflush(stdout);
  }
}

}  // namespace castor::apps
