#include "apps/common/checkpoint_flags.hpp"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "apps/common/training_log.hpp"
#include "config/cluster_file.hpp"

namespace castor::apps {

void declare_checkpoint_flags(po::options_description& flags, const std::string& saved, int64_t every,
                              const std::string& unit) {
  flags.add_options()
      ("checkpoint-dir", po::value<std::string>()->value_name("D"),
       ("save " + saved + " to D every --checkpoint-every " + unit + " and at the end, and resume from D's last "
        "checkpoint at start (default: the cluster file's \"checkpoint_dir\", if any; under --max-restarts, a "
        "folder of the job's own, removed when training ends)").c_str())
      ("checkpoint-every", po::value<int64_t>()->default_value(every)->value_name("N"), (unit + " between checkpoints").c_str());
}

CheckpointSettings checkpoint_settings(const Flags& flags, const std::string& app) {
  CheckpointSettings s;
  const char* restarts = std::getenv("CASTOR_MAX_RESTARTS");  // Note [Restart policy], R4
  s.restart_policy = restarts && std::atoi(restarts) > 0;
  const char* job_dir = std::getenv(config::kCheckpointDirVariable);
  s.given = flags.find<std::string>("checkpoint-dir").value_or(job_dir ? job_dir : "");
  // One name for every restart of the job (CASTOR_JOB_ID), absolute so that
  // every worker of this host reads the same folder whatever its own
  // working folder.
  s.own = std::filesystem::absolute(curve_prefix("", app) + ".checkpoint").lexically_normal().string();
  s.every = flags.get<int64_t>("checkpoint-every");
  if (s.every < 1) throw std::invalid_argument("--checkpoint-every must be at least 1");
  return s;
}

void check_checkpoint_settings(const CheckpointInfo& saved, const std::string& settings, const std::string& app,
                               const std::string& folder, const std::string& unit) {
  auto it = saved.meta.find("settings");
  auto made_with = it == saved.meta.end() ? std::string("(none)") : it->second;
  if (made_with != settings)
    throw CheckpointError(app + ": the checkpoint in " + folder + " (" + unit + " " + std::to_string(saved.step) +
                          ") was made with " + made_with + "; this run has " + settings +
                          ": give another --checkpoint-dir");
}

void remove_own_checkpoint_folder(const std::string& given, const std::string& used) {
  if (!given.empty() || used.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(used, ignored);
}

}  // namespace castor::apps
