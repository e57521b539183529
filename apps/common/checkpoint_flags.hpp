// The checkpoint flags and folders that the training apps share (Note
// [Owner recovery], OR5; Note [Parameter-server checkpoints]): where a
// job's checkpoints go, and whether it runs under a restart policy.
#pragma once

#include <cstdint>
#include <string>

#include "apps/common/flags.hpp"
#include "optimizer/checkpoint.hpp"

namespace castor::apps {

/// --checkpoint-dir D and --checkpoint-every N (`unit`: "epochs", "steps");
/// `saved` says what a checkpoint holds ("the server").
void declare_checkpoint_flags(po::options_description& flags, const std::string& saved, int64_t every,
                              const std::string& unit);

/// The job's checkpoint settings, from those flags and the environment.
struct CheckpointSettings {
  bool restart_policy = false;  // CASTOR_MAX_RESTARTS > 0: dead workers come back
  std::string given;            // --checkpoint-dir, else a cluster file's "checkpoint_dir"; "" if neither
  std::string own;              // a folder of the job's own, for a restart policy with none given (absolute)
  int64_t every = 1;
};

/// Throws std::invalid_argument for --checkpoint-every below 1 (F5).
CheckpointSettings checkpoint_settings(const Flags& flags, const std::string& app);

/// Throws CheckpointError when `saved` was made with other settings than
/// `settings` (its meta's "settings"), naming both, the folder and its
/// `unit` ("epoch", "step"): a checkpoint of another model is not loaded.
void check_checkpoint_settings(const CheckpointInfo& saved, const std::string& settings, const std::string& app,
                               const std::string& folder, const std::string& unit);

/// Removes `used`, the folder a job checkpointed in, once training has
/// ended well, if it was the job's own: none was `given`. A folder that was
/// given stays, whatever its name.
void remove_own_checkpoint_folder(const std::string& given, const std::string& used);

}  // namespace castor::apps
