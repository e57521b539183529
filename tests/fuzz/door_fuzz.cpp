// Fuzzes the door of a live world (Note [The door]): two worker processes
// call each other while this program opens connection after connection to
// their ports and sends mutated byte streams -- starting from a real session
// it recorded (greeting, BASP handshake, join, calls), a crafted BASP header,
// TLS and HTTP openings and noise -- chunked, delayed, cut short or reset.
// In TLS mode it also passes the greeting with the cluster's secret and then
// sends mutated TLS records: the door's TLS handshake must refuse them.
// It fails when a worker dies, the workers' calls go wrong, or the door
// admits a stranger.
//
//   castor-door-fuzz --connections N [--seed S] [--tls] [--threads T]
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/observe/inspector.hpp"
#include "actors/api/registry.hpp"
#include "actors/transport/dialer.hpp"
#include "actors/transport/sockets.hpp"
#include "actors/api/worker.hpp"
#include "messages/rendezvous.hpp"
#include "support/door_probes.hpp"

extern char** environ;

CASTOR_FUNCTION(door_fuzz_add, [](int64_t a, int64_t b) { return a + b; });

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace net = castor::detail::net;
using Bytes = std::vector<uint8_t>;

const std::string kSecret = "door-fuzz-secret-0123456789abcdef";

// -- the job: rank 0 serves, rank 1 calls it until the stop file appears -------

int run_worker(int rank, uint16_t port, const std::string& certs, const std::string& stop_file) {
  castor::WorkerOptions o;
  o.name = "worker" + std::to_string(rank);
  o.rank = rank;
  o.world_size = 2;
  o.master = {"127.0.0.1", port};
  o.host = "127.0.0.1";
  o.secret = kSecret;
  o.init_timeout = 60s;
  // The fuzzer mutates the recorded BASP session between the two: the job's
  // calls must cross it, not the bulk link's direct lane (B8 of Note [Bulk
  // path]), whose port has its own door (tests/integration/test_door*).
  o.bulk_threshold = 0;
  if (!certs.empty()) o.tls = {certs + "/" + o.name + ".pem", certs + "/" + o.name + ".key", certs + "/ca.pem", ""};
  try {
    auto w = castor::init_rpc(o);
    int64_t calls = 0, wrong = 0;
    if (rank == 1) {
      auto big = at::ones({100000});  // a bulk link (400 KB) when there is one
      while (!fs::exists(stop_file)) {
        if (w.rpc_sync<int64_t>("worker0", "door_fuzz_add", calls, int64_t(1)) != calls + 1) ++wrong;
        if (calls % 50 == 0 && !w.rpc_sync<at::Tensor>("worker0", "aten::add", big, big).equal(big * 2)) ++wrong;
        ++calls;
      }
      std::printf("door-fuzz job: %lld calls, %lld wrong\n", (long long)calls, (long long)wrong);
    }
    w.shutdown();
    return wrong == 0 ? 0 : 4;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "door-fuzz worker %d: %s\n", rank, e.what());
    return 5;
  }
}

pid_t spawn_self(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "?";
}

// -- recording: a proxy between rank 1 and rank 0 keeps the client's bytes -----

class Recorder {
 public:
  Recorder(uint16_t target) : target_(target) {
    std::string why;
    listen_fd_ = net::listen_tcp("127.0.0.1", 0, false, why);
    port_ = net::local_port(listen_fd_);
    thread_ = std::thread([this] { run(); });
  }
  ~Recorder() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(listen_fd_);
  }
  uint16_t port() const { return port_; }
  Bytes recorded() {
    std::lock_guard<std::mutex> lock(mtx_);
    return client_bytes_;
  }

 private:
  void run() {
    pollfd lp{listen_fd_, POLLIN, 0};
    while (!stop_ && ::poll(&lp, 1, 100) >= 0) {
      if (!(lp.revents & POLLIN)) continue;
      int in = ::accept(listen_fd_, nullptr, nullptr);
      if (in < 0) continue;
      std::string why;
      int out = net::connect_tcp("127.0.0.1", target_, net::Clock::now() + 5s, why);
      if (out < 0) {
        ::close(in);
        continue;
      }
      net::set_nonblocking(in, true);
      pump(in, out);  // one session: rank 1's link to rank 0, for the job's life
      ::close(in);
      ::close(out);
    }
  }
  void pump(int a, int b) {
    char buf[65536];
    while (!stop_) {
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (::poll(p, 2, 100) < 0) return;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        int from = i == 0 ? a : b, to = i == 0 ? b : a;
        auto n = ::recv(from, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) return;
        std::string why;
        if (!net::send_exact(to, buf, size_t(n), net::Clock::now() + 10s, why)) return;
        if (i == 0) {
          std::lock_guard<std::mutex> lock(mtx_);
          if (client_bytes_.size() < 64 * 1024) client_bytes_.insert(client_bytes_.end(), buf, buf + n);
        }
      }
    }
  }
  uint16_t target_, port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mtx_;
  Bytes client_bytes_;
  std::thread thread_;
};

// -- mutations ------------------------------------------------------------------

Bytes mutate(Bytes b, std::mt19937_64& rng, const std::vector<Bytes>& seeds) {
  auto pick = [&](size_t n) { return n == 0 ? size_t(0) : size_t(rng() % n); };
  int rounds = 1 + int(rng() % 6);
  for (int r = 0; r < rounds; ++r) {
    switch (rng() % 9) {
      case 0:  // flip a bit
        if (!b.empty()) b[pick(b.size())] ^= uint8_t(1u << (rng() % 8));
        break;
      case 1:  // a byte to an extreme
        if (!b.empty()) b[pick(b.size())] = (rng() & 1) ? 0x00 : 0xff;
        break;
      case 2: {  // insert random bytes
        Bytes ins(1 + pick(64));
        for (auto& x : ins) x = uint8_t(rng());
        b.insert(b.begin() + long(pick(b.size() + 1)), ins.begin(), ins.end());
        break;
      }
      case 3:  // delete a range
        if (!b.empty()) {
          auto at = pick(b.size()), n = 1 + pick(std::min<size_t>(64, b.size() - at));
          b.erase(b.begin() + long(at), b.begin() + long(at + n));
        }
        break;
      case 4:  // duplicate a range
        if (!b.empty()) {
          auto at = pick(b.size()), n = 1 + pick(std::min<size_t>(128, b.size() - at));
          Bytes copy(b.begin() + long(at), b.begin() + long(at + n));
          b.insert(b.begin() + long(pick(b.size() + 1)), copy.begin(), copy.end());
        }
        break;
      case 5:  // truncate
        b.resize(pick(b.size() + 1));
        break;
      case 6: {  // splice in another seed
        const auto& other = seeds[pick(seeds.size())];
        if (!other.empty()) {
          auto from = pick(other.size());
          b.insert(b.begin() + long(pick(b.size() + 1)), other.begin() + long(from),
                   other.begin() + long(std::min(other.size(), from + 1 + pick(256))));
        }
        break;
      }
      case 7:  // a length field somewhere to a huge value
        if (b.size() >= 4) {
          auto at = pick(b.size() - 3);
          b[at] = b[at + 1] = b[at + 2] = b[at + 3] = 0xff;
        }
        break;
      default:  // leave it
        break;
    }
  }
  if (b.size() > 256 * 1024) b.resize(256 * 1024);
  return b;
}

struct Stats {
  std::atomic<uint64_t> connections{0}, refused_connect{0}, greeted{0};
};

// One stranger: connect, maybe wait for the door's hello, send the bytes in
// chunks (sometimes with pauses), then close or reset.
void one_connection(uint16_t port, const Bytes& bytes, std::mt19937_64& rng, Stats& stats) {
  std::string why;
  int fd = net::connect_tcp("127.0.0.1", port, net::Clock::now() + 5s, why);
  if (fd < 0) {
    stats.refused_connect.fetch_add(1);
    return;
  }
  stats.connections.fetch_add(1);
  if (rng() % 2) {  // read the door's hello first, as a real client does
    uint8_t hello[castor::detail::door::kServerHelloBytes];
    (void)net::recv_exact(fd, hello, sizeof hello, net::Clock::now() + 2s, why);
  }
  size_t at = 0;
  bool chunked = rng() % 3 == 0;
  while (at < bytes.size()) {
    size_t n = chunked ? std::min(bytes.size() - at, size_t(1 + rng() % 97)) : bytes.size() - at;
    if (!net::send_exact(fd, bytes.data() + at, n, net::Clock::now() + 2s, why)) break;
    at += n;
    if (chunked && rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
  }
  if (rng() % 4 == 0) {  // wait for the door's verdict
    pollfd p{fd, POLLIN, 0};
    char sink[256];
    while (::poll(&p, 1, 200) == 1 && ::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
  }
  linger l{1, 0};  // mostly a reset: scanners do, and no TIME_WAIT piles up here
  if (rng() % 8 != 0) ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  ::close(fd);
}

// TLS mode: the greeting with the secret, then mutated TLS records.
void greeted_tls_garbage(uint16_t port, const Bytes& tls_bytes, std::mt19937_64& rng, Stats& stats) {
  castor::detail::DialOptions opts;
  opts.key.secret = kSecret;
  opts.wire_version = uint16_t(castor::kWireProtocolVersion);
  opts.claim_tls = true;
  auto d = castor::detail::dial(opts, "127.0.0.1", port, castor::detail::door::Purpose::basp, net::Clock::now() + 5s);
  if (!d.ok()) return;
  stats.greeted.fetch_add(1);
  stats.connections.fetch_add(1);
  std::string why;
  (void)net::send_exact(d.fd, tls_bytes.data(), tls_bytes.size(), net::Clock::now() + 2s, why);
  pollfd p{d.fd, POLLIN, 0};
  (void)::poll(&p, 1, int(rng() % 50));
  linger l{1, 0};
  ::setsockopt(d.fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  ::close(d.fd);
}

long arg_long(const std::vector<std::string>& args, const std::string& name, long fallback) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == name) return std::stol(args[i + 1]);
  return fallback;
}

bool has_flag(const std::vector<std::string>& args, const std::string& name) {
  for (auto& a : args)
    if (a == name) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  ::signal(SIGPIPE, SIG_IGN);  // this harness writes to sockets the door resets
  if (args.size() == 5 && args[0] == "--worker")
    return run_worker(std::stoi(args[1]), uint16_t(std::stoi(args[2])), args[3] == "-" ? "" : args[3], args[4]);

  long connections = arg_long(args, "--connections", 10000);
  long threads = arg_long(args, "--threads", 4);
  uint64_t seed = uint64_t(arg_long(args, "--seed", 1));
  bool tls = has_flag(args, "--tls");
  auto work = fs::temp_directory_path() / ("castor-door-fuzz-" + std::to_string(::getpid()));
  fs::create_directories(work);
  std::string certs = "-";
  if (tls) {
    certs = (work / "certs").string();
    auto cmd = "'" + std::string(CASTOR_SOURCE_DIR) + "/scripts/make-certs.sh' '" + certs + "' worker0 worker1 >/dev/null";
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "door-fuzz: cannot make certificates\n");
      return 2;
    }
  }
  auto stop_file = (work / "stop").string();
  char exe[4096];
  auto len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return 2;
  exe[len] = 0;
  std::string why;
  int probe_fd = net::listen_tcp("127.0.0.1", 0, false, why);
  auto port0 = net::local_port(probe_fd);
  ::close(probe_fd);

  // The job: rank 1 reaches rank 0 through the recorder, so the session
  // this fuzzer mutates is a real one.
  Recorder recorder(port0);
  pid_t workers[2] = {spawn_self({exe, "--worker", "0", std::to_string(port0), certs, stop_file}),
                      spawn_self({exe, "--worker", "1", std::to_string(recorder.port()), certs, stop_file})};
  std::atomic<bool> failed{false};
  std::string failure;
  std::mutex failure_mtx;
  auto fail = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(failure_mtx);
    if (!failed.exchange(true)) failure = why;
  };
  int status[2] = {0, 0};
  bool exited[2] = {false, false};
  auto check_workers = [&] {
    for (int r = 0; r < 2; ++r)
      if (!exited[r] && ::waitpid(workers[r], &status[r], WNOHANG) == workers[r]) {
        exited[r] = true;
        fail("worker" + std::to_string(r) + " ended during the fuzzing: " + describe_status(status[r]));
      }
  };
  auto deadline = std::chrono::steady_clock::now() + 90s;
  while (recorder.recorded().size() < 4096 && std::chrono::steady_clock::now() < deadline && !failed) {
    check_workers();
    std::this_thread::sleep_for(20ms);
  }
  auto session = recorder.recorded();
  if (session.size() < 4096) fail("the job did not start calling within 90 s");

  castor::TlsOptions files;
  if (tls) files = {certs + "/worker1.pem", certs + "/worker1.key", certs + "/ca.pem", ""};
  uint16_t bulk_port = 0;
  std::unique_ptr<castor::InspectionClient> inspector;  // one connection for every look
  auto door_counts = [&]() -> nlohmann::json { return nlohmann::json::parse(inspector->snapshot()); };
  if (!failed) {
    try {
      inspector = std::make_unique<castor::InspectionClient>("127.0.0.1", port0, files, kSecret, 10000ms);
      bulk_port = door_counts()["bulk"]["port"].get<uint16_t>();
    } catch (const std::exception& e) {
      fail(std::string("cannot inspect worker0: ") + e.what());
    }
  }

  std::vector<Bytes> seeds = {session, castor::test::probe::crafted_basp_header(), castor::test::probe::tls_client_hello(),
                              castor::test::probe::http_get(), castor::test::probe::garbage(512, uint32_t(seed))};
  Bytes tls_records;  // the recorded session past the greeting: TLS records
  if (session.size() > castor::detail::door::kClientHelloBytes)
    tls_records.assign(session.begin() + long(castor::detail::door::kClientHelloBytes), session.end());
  if (tls_records.size() > 4096) tls_records.resize(4096);

  Stats stats;
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (long t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 1000003 + uint64_t(t));
      for (long i = t; i < connections && !failed; i += threads) {
        uint16_t port = bulk_port && rng() % 5 == 0 ? bulk_port : port0;
        if (tls && !tls_records.empty() && rng() % 3 == 0) {
          greeted_tls_garbage(port0, mutate(tls_records, rng, {tls_records}), rng, stats);
          continue;
        }
        auto& base = seeds[rng() % seeds.size()];
        one_connection(port, rng() % 10 == 0 ? base : mutate(base, rng, seeds), rng, stats);
        if (t == 0 && i % 1000 == 0) check_workers();
      }
    });
  for (auto& th : pool) th.join();
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  check_workers();

  nlohmann::json snap;
  if (!failed) {
    // Let the door finish the last greetings, then read its counts.
    for (int i = 0; i < 100; ++i) {
      try {
        snap = door_counts();
      } catch (const std::exception& e) {
        fail(std::string("cannot inspect worker0 after the fuzzing: ") + e.what());
        break;
      }
      uint64_t refused = 0;
      for (auto& [k, v] : snap["door"]["refused"].items()) refused += v.get<uint64_t>();
      if (refused >= stats.connections.load()) break;
      std::this_thread::sleep_for(100ms);
    }
  }
  uint64_t refused = 0;
  std::string by_cause;
  if (!snap.is_null()) {
    for (auto& [k, v] : snap["door"]["refused"].items()) {
      refused += v.get<uint64_t>();
      by_cause += (by_cause.empty() ? "" : ", ") + k + " " + std::to_string(v.get<uint64_t>());
    }
    // The job's own links (rank 1's castor and bulk links) and this
    // fuzzer's inspector; no stranger.
    auto admitted = snap["door"]["admitted"].get<uint64_t>();
    if (admitted > 3) fail("the door admitted " + std::to_string(admitted) + " connections; the job and the inspector need 3");
    if (refused < stats.connections.load())
      fail("the door counted " + std::to_string(refused) + " refusals for " + std::to_string(stats.connections.load()) +
           " strangers");
  }
  inspector.reset();
  { std::ofstream(stop_file) << "stop\n"; }
  auto end_by = std::chrono::steady_clock::now() + 60s;
  for (int r = 0; r < 2; ++r) {
    while (!exited[r] && std::chrono::steady_clock::now() < end_by) {
      if (::waitpid(workers[r], &status[r], WNOHANG) == workers[r])
        exited[r] = true;
      else
        std::this_thread::sleep_for(20ms);
    }
    if (!exited[r]) {
      ::kill(workers[r], SIGKILL);
      ::waitpid(workers[r], &status[r], 0);
      fail("worker" + std::to_string(r) + " did not shut down within 60 s of the stop");
    } else if (!(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)) {
      fail("worker" + std::to_string(r) + " ended with " + describe_status(status[r]));
    }
  }
  fs::remove_all(work);
  if (failed) {
    std::fprintf(stderr, "door-fuzz: FAILED after %llu connections: %s\n", (unsigned long long)stats.connections.load(),
                 failure.c_str());
    return 1;
  }
  std::printf(
      "door-fuzz: OK: %llu connections (%s, %llu after a valid greeting) in %.1f s at worker0's castor%s port, the "
      "door refused all (%s); both workers exited 0\n",
      (unsigned long long)stats.connections.load(), tls ? "TLS" : "plain", (unsigned long long)stats.greeted.load(),
      seconds, bulk_port ? " and bulk" : "", by_cause.c_str());
  return 0;
}
