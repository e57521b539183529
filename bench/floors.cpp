// The machine's limits, measured in the same run as the figures they bound:
// a plain TCP ping-pong and echo between two processes on loopback (what any
// RPC stack pays at least) and memcpy (what shared memory pays at least).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "bench_suites.hpp"

namespace castor::bench {

namespace {

bool send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    auto w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w, n -= size_t(w);
  }
  return true;
}

bool recv_all(int fd, char* p, size_t n) {
  while (n > 0) {
    auto r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r, n -= size_t(r);
  }
  return true;
}

// A child process that echoes messages of `size` bytes until the socket closes.
// The parent owns `buf`; the child uses its copy (only system calls after fork).
struct EchoPeer {
  int fd = -1;
  pid_t child = -1;

  EchoPeer(size_t size, std::vector<char>& buf) {
    int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(lfd, 1) != 0 ||
        ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      throw std::runtime_error("floors: cannot listen on loopback");
    child = ::fork();
    if (child == 0) {
      int c = ::accept(lfd, nullptr, nullptr);
      int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      while (recv_all(c, buf.data(), size) && send_all(c, buf.data(), size)) {
      }
      ::_exit(0);
    }
    ::close(lfd);
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("floors: cannot connect on loopback");
  }
  ~EchoPeer() {
    ::close(fd);
    int status;
    ::waitpid(child, &status, 0);
  }
};

double tcp_echo_us(size_t size, int n, int warmup) {
  std::vector<char> out(size, 'x'), back(size);
  EchoPeer peer(size, back);
  return median_us(n, [&] {
    if (!send_all(peer.fd, out.data(), size) || !recv_all(peer.fd, back.data(), size))
      throw std::runtime_error("floors: the echo peer went away");
  }, warmup);
}

// The median over `rounds` fresh peer processes. Where the kernel puts a
// process pair decides a small round trip: both on one core (the waker runs
// the woken at once) took 4.5 µs in one run, on two cores 75 µs (a wake-up
// across cores of this VM). castor's workers, with their I/O threads, never
// get the first, so one odd placement must not set the floor.
double tcp_echo_us_over_peers(size_t size, int n, int warmup, int rounds) {
  std::vector<double> medians;
  for (int i = 0; i < rounds; ++i) medians.push_back(tcp_echo_us(size, n / rounds, warmup));
  return median(medians);
}

}  // namespace

std::vector<Figure> bench_floors(const Options& opts) {
  std::vector<Figure> out;
  int r = opts.reps;
  out.push_back({"floor_tcp_pingpong_us", tcp_echo_us_over_peers(64, 3000 * r, 200, 5)});
  out.push_back({"floor_tcp_echo_1MiB_ms", tcp_echo_us(size_t(1) << 20, 50 * r, 5) / 1e3});
  out.push_back({"floor_tcp_echo_64MiB_ms", tcp_echo_us(size_t(64) << 20, 7 * r, 2) / 1e3});
  std::vector<char> a(size_t(64) << 20, 'a'), b(size_t(64) << 20);
  out.push_back({"floor_memcpy_64MiB_ms", median_us(7 * r, [&] { std::memcpy(b.data(), a.data(), a.size()); }, 2) / 1e3});
  return out;
}

}  // namespace castor::bench
