// POSIX socket helpers with deadlines.
#include "actors/transport/sockets.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sock_diag.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <utility>

namespace castor::detail::net {

int ms_until(Deadline d) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count();
  return left <= 0 ? 0 : int(std::min<long long>(left, 1 << 30));
}

int poll_until(pollfd& p, Deadline deadline) {
  for (;;) {
    int ready = ::poll(&p, 1, ms_until(deadline));
    if (ready >= 0 || errno != EINTR) return ready;
  }
}

void set_nonblocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK);
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int connect_tcp(const std::string& host, uint16_t port, Deadline deadline, std::string& why,
                const SocketWatch& watch) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    why = std::string("cannot resolve ") + host + ": " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (auto* ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    if (watch) watch(fd);
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int ready = poll_until(p, deadline);
      int err = 0;
      socklen_t len = sizeof err;
      if (ready == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
        rc = 0;
      else
        errno = ready == 0 ? ETIMEDOUT : (err ? err : errno);
    }
    if (rc != 0) {
      why = std::strerror(errno);
      if (watch) watch(-1);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd >= 0) set_nodelay(fd);
  return fd;
}

int listen_tcp(const std::string& host, uint16_t port, bool reuse_address, std::string& why) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res);
      rc != 0) {
    why = std::string("cannot resolve ") + host + ": " + gai_strerror(rc);
    return -1;
  }
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  if (fd >= 0 && reuse_address) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  bool ok = fd >= 0 && ::bind(fd, res->ai_addr, res->ai_addrlen) == 0 && ::listen(fd, 1024) == 0;
  if (!ok) {
    why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  return fd;
}

bool send_exact(int fd, const void* data, size_t n, Deadline deadline, std::string& why) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    auto w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w, n -= size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      if (poll_until(pf, deadline) <= 0) {
        why = "timed out writing";
        return false;
      }
      continue;
    }
    why = w == 0 ? "connection closed" : std::strerror(errno);
    return false;
  }
  return true;
}

bool recv_exact(int fd, void* data, size_t n, Deadline deadline, std::string& why) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    auto r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r, n -= size_t(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLIN, 0};
      if (poll_until(pf, deadline) <= 0) {
        why = "timed out reading";
        return false;
      }
      continue;
    }
    why = r == 0 ? "the peer closed the connection" : std::strerror(errno);
    return false;
  }
  return true;
}

bool write_all(int fd, const void* data, size_t n) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    auto w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= size_t(w);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    auto r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r, n -= size_t(r);
  }
  return true;
}

void set_bulk_buffers(int fd) {
  int big = 4 << 20;
  set_nodelay(fd);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
}

// The kernel's own measure: what the queued buffers take with their
// overhead (SIOCOUTQ counts payload only, and many small frames unacked by
// a vanished peer fill the buffer long before their bytes do).
bool has_send_room(int fd, size_t bytes) {
  uint32_t info[SK_MEMINFO_VARS] = {};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, SOL_SOCKET, SO_MEMINFO, info, &len) != 0 || len < sizeof info) return false;
  return uint64_t(info[SK_MEMINFO_WMEM_QUEUED]) + bytes <= uint64_t(info[SK_MEMINFO_SNDBUF]);
}

std::string peer_address(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (a.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

std::string host_part(const std::string& address) { return address.substr(0, address.rfind(':')); }

// A machine on IPv6 has a whole /64 to itself or shares one with its LAN
// (the prefix SLAAC and ISPs assign), and may take any address in it: a
// stranger counted per address could open as many greetings as it likes,
// fill D3's max_pending and have the oldest, peers' among them, closed.
// Counted by its /64 it takes one host's room (which fits the whole world's
// peers greeting at once: transport.cpp), and peers that share its LAN's
// /64 share that room with it. An IPv6 address that only carries an IPv4
// peer counts as that peer.
std::string network_of(const std::string& host) {
  in6_addr a6{};
  if (::inet_pton(AF_INET6, host.c_str(), &a6) != 1) return host;
  static const uint8_t kNat64[12] = {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};  // RFC 6052's 64:ff9b::/96
  if (IN6_IS_ADDR_V4MAPPED(&a6) || std::memcmp(a6.s6_addr, kNat64, sizeof kNat64) == 0) {
    in_addr a4{};
    std::memcpy(&a4, &a6.s6_addr[12], sizeof a4);
    char v4[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &a4, v4, sizeof v4);
    return v4;
  }
  std::memset(&a6.s6_addr[8], 0, 8);
  char v6[INET6_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET6, &a6, v6, sizeof v6);
  return std::string(v6) + "/64";
}

uint16_t local_port(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return 0;
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  return 0;
}

namespace {

// The kernel's ephemeral range (outgoing connections, bind to port 0).
std::pair<int, int> ephemeral_range() {
  int lo = 32768, hi = 60999;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d %d", &lo, &hi) != 2) lo = 32768, hi = 60999;
    std::fclose(f);
  }
  return {lo, hi};
}

// Binds a fresh socket to 127.0.0.1:port (0: the kernel picks); the port
// bound, or 0. No SO_REUSEADDR: a port in TIME_WAIT counts as taken.
uint16_t bind_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  socklen_t len = sizeof(addr);
  uint16_t bound = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    bound = ntohs(addr.sin_port);
  ::close(fd);
  return bound;
}

}  // namespace

uint16_t free_local_port() {
  static std::mutex mtx;
  static std::mt19937 rng(std::random_device{}() ^ uint32_t(::getpid()));
  int lo = ephemeral_range().first;
  if (lo > 11000) {
    std::uniform_int_distribution<int> pick(10000, lo - 1);
    for (int i = 0; i < 200; ++i) {
      uint16_t port;
      {
        std::lock_guard<std::mutex> lock(mtx);
        port = uint16_t(pick(rng));
      }
      if (bind_loopback(port) == port) return port;
    }
  }
  return bind_loopback(0);
}

}  // namespace castor::detail::net
