// castor::init_rpc_from_env(): a program started by a launcher finds out who
// it is from the launcher's variables (castor run's and torchrun's, Slurm's,
// Open MPI's) and joins its world.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "actors/api/worker.hpp"
#include "actors/api/worker_options.hpp"

namespace castor {

/// What a launcher told this process (see Note [Launch variables] V1-V3).
struct LaunchEnv {
  std::string source;  // "torchrun" (castor run uses the same variables), "Slurm" or "Open MPI"
  int rank = -1;
  int world_size = -1;
  int local_rank = -1;  // -1 when the launcher does not say
  std::string master_host;
  uint16_t master_port = 0;
};

/// Joins the world that this process' launcher describes; `base` gives the
/// other options, and what it sets (rank, world_size, master) wins over the
/// environment. The worker is called "worker<rank>" unless `base` names it.
/// Started from a cluster file (CASTOR_CLUSTER_FILE, V0) the file gives the
/// world (names, ranks, addresses, TLS, the secret) and its "options" win
/// over `base`'s; `base` still gives every option the file does not name.
/// Throws RpcError (ErrorKind::Lookup) naming the variable at fault.
Worker init_rpc_from_env(WorkerOptions base = {});

namespace detail {

/// The most workers a launcher may describe (WORLD_SIZE's bound), so that
/// a launcher refuses a larger job before it starts any process of it.
inline constexpr int kMaxWorld = 32767;

/// The launch variables as `lookup` (getenv, or a test's map) gives them;
/// without `need_master`, rank and world size only (the caller has a master).
LaunchEnv read_launch_env(const std::function<const char*(const char*)>& lookup, bool need_master = true);

/// Slurm's compressed host list, expanded in order: "node[01-03,7],gpu5"
/// gives node01 node02 node03 node7 gpu5; several bracket groups multiply.
/// Throws std::invalid_argument on a malformed list.
std::vector<std::string> expand_host_list(const std::string& list);

/// Throws the RpcError (ErrorKind::Lookup) of init_rpc_from_env.
[[noreturn]] void refuse(const std::string& why);

/// The master port a launcher without one implies: 10000 + job id mod 20000
/// (below Linux's ephemeral ports, the same on every rank of the job).
uint16_t port_from_job_id(uint64_t job_id);

}  // namespace detail
}  // namespace castor
