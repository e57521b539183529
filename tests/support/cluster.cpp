// Test support implementation: free ports, local worlds, child workers.
#include "support/cluster.hpp"

#include "actors/runtime/testing.hpp"
#include "actors/transport/sockets.hpp"
#include "config/fork_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>


namespace castor::test {

uint16_t free_port() { return castor::detail::net::free_local_port(); }

WorkerOptions local_options(int rank, int world_size, uint16_t master_port) {
  WorkerOptions o;
  o.name = "worker" + std::to_string(rank);
  o.rank = rank;
  o.world_size = world_size;
  o.master = {"127.0.0.1", master_port};
  o.host = "127.0.0.1";
  o.init_timeout = std::chrono::seconds(30);
  o.num_worker_threads = 4;
  o.intra_op_threads = 1;
  return o;
}

LocalWorld::LocalWorld(int n, std::function<void(WorkerOptions&)> tweak) : port_(free_port()) {
  std::vector<std::future<Worker>> starting;
  for (int r = 0; r < n; ++r) {
    auto o = local_options(r, n, port_);
    if (tweak) tweak(o);
    starting.push_back(std::async(std::launch::async, [o] { return init_rpc(o); }));
  }
  for (auto& f : starting) {
    if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      std::fprintf(stderr, "TEST HANG: init_rpc did not return within 60 s\n");
      std::_Exit(3);
    }
    workers_.push_back(f.get());
  }
}

void LocalWorld::shutdown_all() {
  bool was_running = false;
  for (auto& w : workers_) was_running = was_running || !w.is_shut_down();
  std::vector<std::future<void>> stopping;
  for (auto& w : workers_)
    if (!w.is_shut_down()) stopping.push_back(std::async(std::launch::async, [&w] { w.shutdown(); }));
  for (auto& f : stopping) {
    if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      std::fprintf(stderr, "TEST HANG: graceful shutdown did not finish within 60 s\n");
      std::_Exit(3);
    }
    f.get();
  }
  // Leak check after every test: graceful shutdown leaves no owned value.
  if (was_running)
    for (auto& w : workers_) {
      auto info = w.rref_debug_info();
      if (info["num_owner_rrefs"] != 0 || info["num_forks"] != 0) {
        std::fprintf(stderr, "LEAK: %s still owns %lld RRefs (%lld forks) after shutdown\n", w.name().c_str(),
                     (long long)info["num_owner_rrefs"], (long long)info["num_forks"]);
        leaked_ = true;
      }
    }
}

LocalWorld::~LocalWorld() {
  try {
    shutdown_all();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "LocalWorld shutdown: %s\n", e.what());
  }
}

ChildWorker::ChildWorker(int rank, int world_size, uint16_t master_port, std::vector<std::string> extra) {
  std::vector<std::string> args{CASTOR_TEST_WORKER_PATH, std::to_string(rank), std::to_string(world_size),
                                std::to_string(master_port)};
  args.insert(args.end(), extra.begin(), extra.end());
  pid_ = castor::config::spawn_process(CASTOR_TEST_WORKER_PATH, args);  // Note [Fork server]
}

void ChildWorker::kill() {
  if (pid_ > 0) ::kill(pid_, SIGKILL);
}

int ChildWorker::wait_exit(std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (pid_ > 0) {
    int status = 0;
    auto r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

ChildWorker::~ChildWorker() {
  if (pid_ > 0) {
    if (wait_exit(std::chrono::seconds(20)) == -1) {
      kill();
      wait_exit(std::chrono::seconds(5));
    }
  }
}

namespace {

int loopback_listener(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 16) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

uint16_t local_port(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

// Waits up to `ms` for a connection on `listener`; -1 if none came.
int accept_within(int listener, int ms) {
  pollfd p{listener, POLLIN, 0};
  if (::poll(&p, 1, ms) <= 0) return -1;
  return ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
}

bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    auto w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= size_t(w);
  }
  return true;
}

}  // namespace

GatedRelay::GatedRelay(uint16_t target) : target_(target) {
  listener_ = loopback_listener(0);
  if (listener_ < 0) throw std::runtime_error("GatedRelay: cannot listen on a loopback port");
  port_ = local_port(listener_);
}

void GatedRelay::open() {
  std::lock_guard<std::mutex> lock(mtx_);
  threads_.emplace_back([this] { accept_loop(); });
}

void GatedRelay::accept_loop() {
  while (!stop_) {
    int client = accept_within(listener_, 100);
    if (client < 0) continue;
    int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(target_);
    if (upstream < 0 || ::connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      if (upstream >= 0) ::close(upstream);
      ::close(client);  // the dialer sees a closed connection and retries
      continue;
    }
    std::lock_guard<std::mutex> lock(mtx_);
    threads_.emplace_back([this, client, upstream] { pump(client, upstream); });
  }
}

// Copies bytes both ways; a side that ends its sending ends ours to the
// other; done when both have, or on an error, or when the relay stops.
void GatedRelay::pump(int a, int b) {
  bool a_open = true, b_open = true;  // a -> b and b -> a still carry data
  char buf[64 * 1024];
  while (!stop_ && (a_open || b_open)) {
    pollfd ps[2] = {{a, short(a_open ? POLLIN : 0), 0}, {b, short(b_open ? POLLIN : 0), 0}};
    if (::poll(ps, 2, 100) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    bool failed = false;
    for (int i = 0; i < 2 && !failed; ++i) {
      if (!(ps[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int from = i == 0 ? a : b, to = i == 0 ? b : a;
      auto n = ::recv(from, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        failed = true;
      } else if (n == 0) {
        ::shutdown(to, SHUT_WR);
        (i == 0 ? a_open : b_open) = false;
      } else if (!write_all(to, buf, size_t(n))) {
        failed = true;
      }
    }
    if (failed) break;
  }
  ::close(a);
  ::close(b);
}

GatedRelay::~GatedRelay() {
  stop_ = true;
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    threads = std::move(threads_);
  }
  for (auto& t : threads) t.join();  // the accept loop first: it adds no pump after stop_
  std::lock_guard<std::mutex> lock(mtx_);
  for (auto& t : threads_) t.join();
  ::close(listener_);
}

bool await_dialers(uint16_t port, size_t n, std::chrono::milliseconds limit) {
  int listener = loopback_listener(port);
  if (listener < 0) return false;
  std::vector<int> open;
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (open.size() < n && std::chrono::steady_clock::now() < deadline) {
    int c = accept_within(listener, 100);
    if (c >= 0) open.push_back(c);
  }
  bool all = open.size() >= n;
  for (int c : open) ::close(c);
  ::close(listener);
  return all;
}

namespace {

// The state letter of /proc/<pid>/task/<tid>/stat: after the command's
// closing parenthesis (the command may hold spaces and parentheses).
char thread_state(const std::string& stat_path) {
  std::ifstream in(stat_path);
  std::string line;
  std::getline(in, line);
  auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
}

bool all_threads_stopped(int pid) {
  std::error_code ec;
  auto tasks = std::filesystem::path("/proc") / std::to_string(pid) / "task";
  bool any = false;
  for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
    auto state = thread_state((t.path() / "stat").string());
    if (state != 'T' && state != 't') return false;
    any = true;
  }
  return any && !ec;
}

}  // namespace

bool ChildWorker::freeze(std::chrono::milliseconds limit) {
  if (::kill(pid_, SIGSTOP) != 0) return false;
  return eventually([&] { return all_threads_stopped(pid_); }, limit);
}

bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

bool open_lanes(LocalWorld& world) {
  auto x = at::rand({4});
  auto lane_sent = [](Worker& w) { return castor::testing::runtime(w).stats.lane_sent.load(); };
  return eventually([&] {
    return at::equal(world[0].rpc_sync<at::Tensor>("worker1", "identity", x), x) &&
           at::equal(world[1].rpc_sync<at::Tensor>("worker0", "identity", x), x) && lane_sent(world[0]) >= 1 &&
           lane_sent(world[1]) >= 1;
  });
}

}  // namespace castor::test
