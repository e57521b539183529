// castor-bench support: timing, medians, the table/JSON report, the peer
// worker process, and running PyTorch's side in the same run.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/api/worker.hpp"

namespace castor::bench {

/// Which way is better, for the report.
enum class Better { lower, higher };

struct Figure {
  Figure(std::string n, double c, Better b = Better::lower) : name(std::move(n)), castor(c), better(b) {}
  std::string name;  // unit in the name: _us, _ms, _per_s, _bytes, _MiB
  double castor = 0;
  std::optional<double> pytorch;
  Better better = Better::lower;
};

struct Options {
  bool vs_pytorch = false;
  bool json = false;
  int reps = 1;  // multiplies the number of repetitions
  std::string self_path;  // argv[0], to start peer workers
  std::string plot;       // sweep: write the SVG here
};

/// Median of `n` timed runs of `f` (after `warmup` untimed runs), in µs.
double median_us(int n, const std::function<void()>& f, int warmup = 10);
double median(std::vector<double> xs);

/// One figure of a group timed in turns (paired_medians_us).
struct Turn {
  std::function<void()> call;                // one timed repetition
  std::function<void()> enter = {}, leave = {};  // around each block of it, untimed (may be empty)
};

/// Times the `turns` in alternation: `rounds` rounds, in each of which every
/// turn runs `block` timed calls in a row (after `warmup` untimed calls of
/// each, once). Returns each turn's median over all its calls, in µs.
/// This machine's speed drifts by up to 2x within minutes (a shared VM), so
/// two figures taken one after the other can differ by that much for no
/// reason of their own; taken in turns, both see the same machine and their
/// ratio holds from run to run.
std::vector<double> paired_medians_us(const std::vector<Turn>& turns, int rounds, int block, int warmup);

/// TLS files for a bench world, made as a user makes them
/// (scripts/make-certs.sh): a CA and certificates for worker0 to
/// worker<n-1> in a temporary folder, removed with this object.
class BenchCerts {
 public:
  explicit BenchCerts(int workers);
  ~BenchCerts();
  BenchCerts(const BenchCerts&) = delete;
  BenchCerts& operator=(const BenchCerts&) = delete;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

/// Starts `count` peer workers (ranks 1..count) as child processes of this
/// binary and joins as rank 0. The peers serve until rank 0 shuts down.
class BenchWorld {
 public:
  /// `mode` is passed to the peer processes too (they must agree), and so is
  /// `tls_dir` (a BenchCerts folder: every worker runs TLS; empty: none).
  BenchWorld(const Options& opts, int world_size, std::function<void(WorkerOptions&)> tweak = {},
             AutogradMode mode = AutogradMode::smart, const std::string& tls_dir = {});
  ~BenchWorld();
  Worker& self() { return *worker_; }
  int peer_pid(int rank) const { return pids_.at(size_t(rank - 1)); }
  /// Starts rank `rank` again, in its life `incarnation` (it rejoins: Note
  /// [Rejoin]); its earlier process must be dead. Its pid, or -1.
  int restart_peer(int rank, uint32_t incarnation);
  /// Waits (10 s at most each, then SIGKILL) until every peer process has
  /// ended and reaps it; call after shutdown(). The world has no peer
  /// processes afterwards (peer_pid and restart_peer have none to name).
  void reap_peers();

 private:
  const Options& opts_;
  int world_size_;
  uint16_t port_;
  std::vector<std::string> peer_tail_;  // the peer command line after the port: mode, TLS folder
  std::vector<int> pids_;
  std::optional<Worker> worker_;
};

/// Floor of a world's init: milliseconds until `count` processes of this
/// binary, started at once, have loaded (libtorch's and CAF's static
/// initialisation included) and exited (`castor-bench _start`).
double process_start_ms(const Options& opts, int count);

/// Entry point of a peer worker process (`castor-bench _worker RANK WORLD PORT MODE [TLS_DIR]`).
int run_peer(int argc, char** argv);

/// Epochs the train suite runs on each side (the median epoch is reported).
inline int train_epochs(int reps) { return 2 + reps; }

/// Thread counts the single-process references run with: 1 and the
/// machine's cores. The faster is the reference: on small matrices libtorch's
/// threads can cost more than they bring (on this 2-core machine the
/// parameter-server MLP ran 3-4x slower on 2 threads than on 1).
std::vector<int> reference_thread_counts();

/// After a single-process reference's epoch, before castor's next one:
/// the reference's OpenBLAS threads spin in sched_yield for about 0.1 s
/// after its last product, so castor's epoch starts once they sleep (as the
/// floor's starts with castor's trainers asleep).
void let_reference_blas_settle();

/// Runs `run(threads)` (samples/s) for each of reference_thread_counts(),
/// adds a figure `<prefix>_<n>t_samples_per_s` for each, and returns the best.
double best_reference(const std::string& prefix, const std::function<double(int)>& run, std::vector<Figure>& out);

/// Runs PyTorch's side for `suites` (bench/pytorch_bench.py, and
/// bench/pytorch_ps_bench.py for train) and returns its figures.
std::map<std::string, double> run_pytorch(const std::vector<std::string>& suites, int reps);

/// Prints the figures as a table with ratios, or as one JSON object.
void report(const std::vector<Figure>& figures, const Options& opts);

}  // namespace castor::bench
