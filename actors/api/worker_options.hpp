// WorkerOptions: everything init_rpc needs to start a worker and join a world.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "actors/runtime/fault_injection.hpp"

namespace castor {

/// How distributed backward passes find their dependencies (engine/).
enum class AutogradMode {
  fast,   // PyTorch's only mode: every send function is assumed to get a gradient
  smart,  // the RFC's: sends carry lineage, a backward waits only for sends it can reach
};

const char* to_string(AutogradMode m);

/// A per-call limit, passed as the last argument of rpc_sync, rpc_async,
/// remote and to_here: `castor::Timeout{std::chrono::milliseconds(500)}`.
struct Timeout {
  std::chrono::milliseconds value{0};
};

/// A restart policy, passed as the last argument of remote() (before or
/// after a Timeout): `castor::Restart{2}`. When the owner dies and its next
/// life rejoins, the value is made again there, by the same function or
/// constructor with the same arguments, up to `max_restarts` times; every
/// holder's RRef then reaches the new value (Note [Restartable values] in
/// rref/restart.hpp). Calls in flight at the death still fail with
/// OwnerDiedError.
struct Restart {
  uint32_t max_restarts = 1;
};

struct Address {
  std::string host;
  uint16_t port = 0;
};

/// TLS with mutual authentication on every link (Note [TLS] in
/// actors/tls.cpp). Set all three files or none: castor never runs TLS
/// without verifying peers.
struct TlsOptions {
  std::string certificate;  // this worker's certificate (PEM, may be a chain)
  std::string key;          // its private key (PEM)
  std::string ca;           // the cluster CA's certificate(s) (PEM): peers must be signed by it
  std::string passphrase;   // of the key, when it is encrypted
  bool enabled() const { return !certificate.empty() || !key.empty() || !ca.empty(); }
};

struct WorkerOptions {
  std::string name;     // unique in the world; RANK-derived "worker<rank>" if empty
  int rank = -1;        // from RANK if unset
  int world_size = -1;  // from WORLD_SIZE if unset
  Address master;       // rank 0 serves the rendezvous here (MASTER_ADDR, MASTER_PORT)

  /// Address peers use to reach this worker; derived from the route to the
  /// master when empty. Rank 0 listens on the master port.
  std::string host;
  uint16_t port = 0;  // 0: any free port

  /// Every worker's name and address, by rank (a cluster file gives them):
  /// then the join needs no master; each worker checks each peer directly.
  /// Empty: the master rendezvous.
  struct Member {
    std::string name;
    std::string host;
    uint16_t port = 0;
  };
  std::vector<Member> cluster;

  /// Which life of this rank this process is (README, "When workers fail"):
  /// 1 for a worker of a new job; k > 1 for a worker started again after
  /// its k-1-th life died, which rejoins the survivors instead of joining
  /// (Note [Rejoin] in actors/cluster/rejoin.cpp). 0: from
  /// CASTOR_INCARNATION (the launcher sets it), else 1.
  uint32_t incarnation = 0;

  std::chrono::milliseconds rpc_timeout{60000};   // default for every call
  std::chrono::milliseconds init_timeout{60000};  // until every rank has joined
  /// Bound of a graceful shutdown, counted once every worker has entered it
  /// (waiting for the others to enter is not bounded: they may still be
  /// running their app). Past it shutdown() throws a TimeoutError naming
  /// each call still running, and user code still running is left behind
  /// so that the process can exit. Also how long shutdown(false) and the
  /// end of a failed shutdown wait for running user code.
  std::chrono::milliseconds shutdown_timeout{60000};

  size_t num_worker_threads = 16;   // most runnable executor threads
  /// Runnable executor threads while their tasks make progress; more (up to
  /// num_worker_threads) only when tasks stall. 0 = the machine's cores.
  size_t eager_worker_threads = 0;
  size_t max_worker_threads = 256;  // bound including threads blocked in nested calls

  /// libtorch intra-op threads; 0 = the cores shared among this host's workers.
  int intra_op_threads = 0;

  AutogradMode autograd_mode = AutogradMode::smart;

  /// Tensors larger than this travel in chunks of at most this size (CAF's
  /// BASP frames carry a 32-bit payload length).
  size_t max_message_bytes = size_t(1) << 30;

  /// Calls and replies to other workers with a tensor of at least this many
  /// bytes take the bulk path (Note [Bulk path]; TLS in a TLS cluster); 0: never.
  size_t bulk_threshold = 256 * 1024;
  /// Same-host peers copy tensors straight from each other's memory (B7 of
  /// Note [Bulk path]); false: always through the socket.
  bool bulk_same_host = true;

  /// Tests only: drop, delay, duplicate or reorder control messages.
  FaultInjection faults;

  /// TLS: none by default (castor then says once how its links are protected).
  TlsOptions tls;

  /// The cluster secret (Note [The door] in actors/transport/door.cpp): a
  /// connection to any port of this worker is handed on only after it proved
  /// it holds the same secret. Every worker of a world needs the same one;
  /// CASTOR_SECRET fills it when empty (castor run sets it for its jobs).
  /// Empty everywhere: the door still keeps out all that is not castor, but
  /// not a stranger who speaks castor's greeting.
  std::string secret;
  /// How long a connection may take to pass the door (greeting and TLS
  /// handshake), on both sides.
  std::chrono::milliseconds greeting_timeout{5000};

  /// Prometheus text on http://metrics_host:metrics_port/metrics; 0: off.
  /// metrics_host defaults to `host`.
  uint16_t metrics_port = 0;
  std::string metrics_host;

  /// A CAF INI file ([scheduler], [middleman], ...) read over castor's
  /// defaults; empty: none.
  std::string caf_config_file;

  /// CAF settings applied last, in CAF's syntax ("scheduler.max-threads" ->
  /// "2", "middleman.heartbeat-interval" -> "5s").
  std::map<std::string, std::string> caf_settings;
};

/// A worker as others see it: its name and its id (the rank).
struct WorkerInfo {
  std::string name;
  int64_t id = -1;

  friend bool operator==(const WorkerInfo& a, const WorkerInfo& b) { return a.name == b.name && a.id == b.id; }
};

}  // namespace castor
