// castor-bench support implementation.
#include "bench_util.hpp"

#include "actors/transport/sockets.hpp"
#include "apps/common/local_launch.hpp"
#include "config/fork_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

extern char** environ;

namespace castor::bench {
namespace {

uint16_t free_port() { return castor::detail::net::free_local_port(); }

WorkerOptions bench_options(int rank, int world, uint16_t port) {
  WorkerOptions o;
  o.rank = rank;
  o.world_size = world;
  o.master = {"127.0.0.1", port};
  o.host = "127.0.0.1";
  o.rpc_timeout = std::chrono::seconds(300);
  o.init_timeout = std::chrono::seconds(300);  // 64 processes start libtorch on 2 cores
  o.intra_op_threads = 1;
  if (world > 16) o.num_worker_threads = 4;  // the scale suite: threads x workers stay in bounds
  return o;
}

std::string bench_dir() {
#ifdef CASTOR_BENCH_DIR
  return CASTOR_BENCH_DIR;
#else
  return "bench";
#endif
}

}  // namespace

double median(std::vector<double> xs) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  size_t n = xs.size();
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

double median_us(int n, const std::function<void()>& f, int warmup) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> samples;
  samples.reserve(size_t(n));
  for (int i = 0; i < n; ++i) {
    auto t = std::chrono::steady_clock::now();
    f();
    samples.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count());
  }
  return median(std::move(samples));
}

std::vector<double> paired_medians_us(const std::vector<Turn>& turns, int rounds, int block, int warmup) {
  auto run_block = [](const Turn& t, int n, std::vector<double>* samples) {
    if (t.enter) t.enter();
    for (int i = 0; i < n; ++i) {
      auto start = std::chrono::steady_clock::now();
      t.call();
      if (samples)
        samples->push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    if (t.leave) t.leave();
  };
  for (const auto& t : turns) run_block(t, warmup, nullptr);
  std::vector<std::vector<double>> samples(turns.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < turns.size(); ++i) run_block(turns[i], block, &samples[i]);
  std::vector<double> out;
  for (auto& s : samples) out.push_back(median(std::move(s)));
  return out;
}

namespace {

// Starts this binary with `args` after argv[0] by exec: a process that
// loads everything itself (the floor of process_start_ms); -1 if it cannot.
int exec_self(const Options& opts, std::vector<std::string> args) {
  args.insert(args.begin(), opts.self_path);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int pid = -1;
  return posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) == 0 ? pid : -1;
}

// A peer of a BenchWorld: forked from a loaded copy of this binary (Note
// [Fork server]), or exec'd when that cannot be; -1 if neither can.
int spawn_peer(const Options& opts, std::vector<std::string> args) {
  args.insert(args.begin(), opts.self_path);
  return config::spawn_process(apps::self_executable(), args);
}

}  // namespace

double process_start_ms(const Options& opts, int count) {
  auto t = std::chrono::steady_clock::now();
  std::vector<int> pids;
  for (int i = 0; i < count; ++i)
    if (int pid = exec_self(opts, {"_start"}); pid > 0) pids.push_back(pid);
  for (int pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

BenchCerts::BenchCerts(int workers) {
  char pattern[] = "/tmp/castor-bench-certs-XXXXXX";
  if (!::mkdtemp(pattern)) throw std::runtime_error("castor-bench: cannot make a folder for TLS files");
  dir_ = pattern;
  auto cmd = "'" + bench_dir() + "/../scripts/make-certs.sh' '" + dir_ + "'";
  for (int r = 0; r < workers; ++r) cmd += " worker" + std::to_string(r);
  if (std::system((cmd + " >/dev/null 2>&1").c_str()) != 0)
    throw std::runtime_error("castor-bench: cannot make TLS files: " + cmd + " failed");
}

BenchCerts::~BenchCerts() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

namespace {

TlsOptions tls_files_of(const std::string& dir, int rank) {
  auto name = dir + "/worker" + std::to_string(rank);
  return TlsOptions{name + ".pem", name + ".key", dir + "/ca.pem", ""};
}

}  // namespace

BenchWorld::BenchWorld(const Options& opts, int world_size, std::function<void(WorkerOptions&)> tweak,
                       AutogradMode mode, const std::string& tls_dir)
    : opts_(opts), world_size_(world_size), port_(free_port()) {
  auto port = port_;
  peer_tail_.push_back(to_string(mode));
  if (!tls_dir.empty()) peer_tail_.push_back(tls_dir);
  for (int r = 1; r < world_size; ++r) {
    std::vector<std::string> args{"_worker", std::to_string(r), std::to_string(world_size), std::to_string(port)};
    args.insert(args.end(), peer_tail_.begin(), peer_tail_.end());
    if (int pid = spawn_peer(opts, args); pid > 0) pids_.push_back(pid);
  }
  auto o = bench_options(0, world_size, port);
  if (!tls_dir.empty()) o.tls = tls_files_of(tls_dir, 0);
  if (tweak) tweak(o);
  worker_.emplace(init_rpc(o));
}

int BenchWorld::restart_peer(int rank, uint32_t incarnation) {
  std::vector<std::string> args{"_worker", std::to_string(rank), std::to_string(world_size_), std::to_string(port_)};
  args.insert(args.end(), peer_tail_.begin(), peer_tail_.end());
  ::setenv("CASTOR_INCARNATION", std::to_string(incarnation).c_str(), 1);  // as the launcher does
  int pid = spawn_peer(opts_, args);
  ::unsetenv("CASTOR_INCARNATION");
  if (pid > 0) {
    int status = 0;
    ::waitpid(pids_.at(size_t(rank - 1)), &status, WNOHANG);  // the dead one, reaped if it is
    pids_.push_back(pid);
  }
  return pid;
}

BenchWorld::~BenchWorld() {
  try {
    worker_->shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor-bench: shutdown: %s\n", e.what());
  }
  reap_peers();
}

void BenchWorld::reap_peers() {
  for (int pid : pids_) {
    int status = 0;
    for (int i = 0; i < 2000 && ::waitpid(pid, &status, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  pids_.clear();
}

int run_peer(int argc, char** argv) {
  if (argc < 5) return 2;
  try {
    auto o = bench_options(std::atoi(argv[2]), std::atoi(argv[3]), uint16_t(std::atoi(argv[4])));
    if (argc > 5) o.autograd_mode = std::string(argv[5]) == "fast" ? AutogradMode::fast : AutogradMode::smart;
    if (argc > 6) o.tls = tls_files_of(argv[6], o.rank);
    auto w = init_rpc(o);
    w.shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor-bench worker: %s\n", e.what());
    return 1;
  }
}

namespace {

// Runs one of bench/'s Python scripts and reads the JSON object it prints.
std::map<std::string, double> run_python_json(const std::string& script, const std::string& args) {
  std::string cmd = "/usr/bin/python3 " + bench_dir() + "/" + script + " " + args + " 2>/dev/null";
  std::map<std::string, double> out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  std::string text;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) text.append(buf, n);
  int rc = ::pclose(p);
  auto start = text.find('{');
  if (rc != 0 || start == std::string::npos) {
    std::fprintf(stderr, "castor-bench: the PyTorch side failed (%s)\n", cmd.c_str());
    return out;
  }
  auto j = nlohmann::json::parse(text.substr(start, text.find('}', start) - start + 1));
  for (auto it = j.begin(); it != j.end(); ++it) out[it.key()] = it.value().get<double>();
  return out;
}

}  // namespace

std::map<std::string, double> run_pytorch(const std::vector<std::string>& suites, int reps) {
  std::map<std::string, double> out;
  std::string micro;
  for (const auto& s : suites) {
    if (s == "train") {
      auto ps = run_python_json("pytorch_ps_bench.py", "--epochs " + std::to_string(train_epochs(reps)) +
                                                           " --port " + std::to_string(free_port()));
      out.insert(ps.begin(), ps.end());
    } else if (s == "scale") {  // worlds of 8-64 (PyTorch's 64 does not come up here: no figure then)
      auto sc = run_python_json("pytorch_scale_bench.py", "--port " + std::to_string(free_port()));
      out.insert(sc.begin(), sc.end());
    } else if (s == "pipeline") {
      continue;  // no PyTorch side: its reference is single-process libtorch, in castor's own figures
    } else {
      micro += " " + s;
    }
  }
  if (!micro.empty()) {
    auto m = run_python_json("pytorch_bench.py", micro + " --port " + std::to_string(free_port()) + " --reps " +
                                                     std::to_string(reps));
    out.insert(m.begin(), m.end());
  }
  return out;
}

void report(const std::vector<Figure>& figures, const Options& opts) {
  if (opts.json) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& f : figures) {
      nlohmann::json row{{"castor", f.castor}};
      if (f.pytorch) {
        row["pytorch"] = *f.pytorch;
        row["ratio"] = *f.pytorch != 0 ? f.castor / *f.pytorch : 0.0;
      }
      j[f.name] = row;
    }
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%-34s %14s %14s %10s\n", "figure", "castor", "pytorch", "ratio");
  for (const auto& f : figures) {
    if (f.pytorch) {
      double ratio = *f.pytorch != 0 ? f.castor / *f.pytorch : 0.0;
      std::printf("%-34s %14.2f %14.2f %9.2fx  (%s is better)\n", f.name.c_str(), f.castor, *f.pytorch, ratio,
                  f.better == Better::lower ? "lower" : "higher");
    } else {
      std::printf("%-34s %14.2f %14s\n", f.name.c_str(), f.castor, "-");
    }
  }
}

void let_reference_blas_settle() { std::this_thread::sleep_for(std::chrono::milliseconds(250)); }

std::vector<int> reference_thread_counts() {
  int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  return cores > 1 ? std::vector<int>{1, cores} : std::vector<int>{1};
}

double best_reference(const std::string& prefix, const std::function<double(int)>& run, std::vector<Figure>& out) {
  double best = 0;
  for (int threads : reference_thread_counts()) {
    double rate = run(threads);
    out.emplace_back(prefix + "_" + std::to_string(threads) + "t_samples_per_s", rate, Better::higher);
    best = std::max(best, rate);
  }
  return best;
}

}  // namespace castor::bench
