// Cluster files: one JSON file describes a whole job (its workers, where
// they live, what they run, and the options they share), so that the same
// file deploys it on one host or many.
//
//   {
//     "app": "parameter-server", "args": ["--epochs", "1"],      // optional default for every worker;
//                                                                 // or "program": "./my_trainer" (not both)
//     "workers": [
//       {"name": "ps", "rank": 0, "host": "10.0.0.1", "port": 29600},
//       {"name": "trainer1", "host": "10.0.0.2", "port": 29600, "app": "...", "args": [...],
//        "tls": {"certificate": "certs/trainer1.pem", "key": "certs/trainer1.key"},
//        "metrics_port": 9464}                                  // optional: Prometheus text
//     ],
//     "tls": {"certificate": "certs/node.pem", "key": "certs/node.key", "ca": "certs/ca.pem"},
//     "secret_file": "cluster.secret",                          // or "secret": "..." (at least 16 characters)
//     "checkpoint_dir": "/shared/job42/ckpt",                   // optional: the job's castor::Checkpoint folder
//     "options": {"rpc_timeout_ms": 60000, "init_timeout_ms": 60000, "shutdown_timeout_ms": 60000,
//                 "num_worker_threads": 16,
//                 "eager_worker_threads": 0, "max_worker_threads": 256, "intra_op_threads": 0,
//                 "autograd_mode": "smart",
//                 "max_message_bytes": 1073741824, "bulk_threshold_bytes": 262144, "bulk_same_host": true,
//                 "heartbeat_ms": 2000, "connection_timeout_ms": 30000, "greeting_timeout_ms": 5000,
//                 "caf_config_file": "caf-application.ini", "caf": {"scheduler.max-threads": 2}}
//   }
//
// "tls" (certificate, key, ca, passphrase; see Note [TLS] in actors/transport/tls.cpp)
// is the file's default and a worker's own "tls" overrides parts of it.
// "secret" or "secret_file" is the cluster secret every worker's door checks
// (Note [The door] in actors/transport/door.cpp); without one, a launcher
// that starts every worker of the file makes one for the job.
// "checkpoint_dir" is where the job's checkpoints live: `castor worker`
// gives it to its app or program as CASTOR_CHECKPOINT_DIR (the parameter
// server's --checkpoint-dir defaults to it). Every worker that owns a part
// reads and writes there, so across hosts it must be shared storage mounted
// at the same path on every host.
// Ranks default to the position in "workers". With every address in the
// file the join needs no master (Note [Masterless join]). Relative paths are
// relative to the file's folder.
#pragma once

#include <string>
#include <vector>

#include "actors/api/worker_options.hpp"

namespace castor::config {

/// Where `castor worker` tells its app or program the file's "checkpoint_dir".
inline constexpr const char* kCheckpointDirVariable = "CASTOR_CHECKPOINT_DIR";

struct ClusterWorker {
  std::string name;
  int rank = -1;
  std::string host;
  uint16_t port = 0;
  std::string app;                // empty: serve only (or run `program`)
  std::string program;            // the user's own program instead of an app; empty: none
  std::vector<std::string> args;  // the app's flags, or the program's arguments
  TlsOptions tls;                 // the file's "tls", with this worker's own "tls" over it
  uint16_t metrics_port = 0;      // Prometheus text served here; 0: none
};

struct ClusterFile {
  std::string path;
  std::vector<ClusterWorker> workers;  // by rank
  WorkerOptions shared;                // the "options" section, and the secret
  std::string options_json;            // the "options" section as written ("" if none)
  std::string checkpoint_dir;          // "checkpoint_dir", absolute ("" if none)
  std::vector<std::string> warnings;   // unknown keys, each naming file and field

  /// The worker called `name`; throws ConfigError naming the file and the
  /// known names when there is none.
  const ClusterWorker& worker(const std::string& name) const;

  /// Everything init_rpc needs to start `name` as part of this job. The
  /// file gives the world (names, ranks, addresses, TLS, the secret), and its
  /// "options" win over `base`'s; `base` (a program's own options, see
  /// init_rpc_from_env) gives every option the file does not name.
  WorkerOptions options_for(const std::string& name, WorkerOptions base = {}) const;
};

/// A malformed file or value; what() names the file and the field.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Reads and checks a cluster file. Throws ConfigError.
ClusterFile load_cluster_file(const std::string& path);

/// The same from text (`path` only names it in messages and anchors
/// relative paths).
ClusterFile parse_cluster_file(const std::string& text, const std::string& path);

/// `--local`: every worker of the file runs on this host, at 127.0.0.1 and
/// the file's ports. Moves `opts` (options_for's) there: its own address,
/// its master's and every worker's in its list.
void move_to_this_host(WorkerOptions& opts);

/// Why the file's workers cannot all run on this host (two on one port,
/// castor's or metrics'), naming them; "" when they can.
std::string one_host_conflict(const ClusterFile& file);

/// Whether `host` names this machine (a loopback name or address, this
/// host's name, or an address of one of its interfaces).
bool is_local_host(const std::string& host);

}  // namespace castor::config
