// The machine's limits, measured in the same run as the figures they bound:
// a plain TCP ping-pong and echo between two processes on loopback (what any
// RPC stack pays at least), memcpy (what shared memory pays at least) and
// AES-256-GCM on one core (what TLS pays at least on top).
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <chrono>
#include <algorithm>
#include <cstring>
#include <memory>
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

  // `child_cpu` >= 0 pins the echoing child to that core.
  EchoPeer(size_t size, std::vector<char>& buf, int child_cpu = -1) {
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
      if (child_cpu >= 0) {
        cpu_set_t one_cpu;
        CPU_ZERO(&one_cpu);
        CPU_SET(child_cpu, &one_cpu);
        ::sched_setaffinity(0, sizeof one_cpu, &one_cpu);
      }
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

double tcp_echo_us(size_t size, int n, int warmup, int child_cpu = -1) {
  std::vector<char> out(size, 'x'), back(size);
  EchoPeer peer(size, back, child_cpu);
  return median_us(n, [&] {
    if (!send_all(peer.fd, out.data(), size) || !recv_all(peer.fd, back.data(), size))
      throw std::runtime_error("floors: the echo peer went away");
  }, warmup);
}

// A small round trip depends on where the kernel puts the pair: on one core
// the waker runs the woken process at once (4.5 µs in one run on this VM),
// on two cores it pays a wake-up across cores (75 µs). Left to the kernel,
// the figure swung between the two from run to run. castor's and PyTorch's
// workers (an I/O thread each, other threads beside it) run on both cores,
// so the floor is the ping-pong pinned to two cores; the one-core figure is
// printed beside it. `same_core` pins both ends to core 0.
double tcp_pingpong_pinned_us(int n, int warmup, bool same_core) {
  cpu_set_t before;
  if (::sched_getaffinity(0, sizeof before, &before) != 0 || CPU_COUNT(&before) < 2 || !CPU_ISSET(0, &before) ||
      !CPU_ISSET(1, &before))
    return same_core ? 0.0 : tcp_echo_us(64, n, warmup);  // fewer than two cores to pin to
  cpu_set_t core0;
  CPU_ZERO(&core0);
  CPU_SET(0, &core0);
  ::sched_setaffinity(0, sizeof core0, &core0);
  double us = tcp_echo_us(64, n, warmup, same_core ? 0 : 1);
  ::sched_setaffinity(0, sizeof before, &before);  // the benchmarks after run unpinned
  return us;
}

}  // namespace

// Encrypts `in` as TLS 1.3 does with the cipher it negotiates here:
// AES-256-GCM, the key set once, per 16 KiB record a fresh nonce, the
// record header as associated data and a tag; one core.
double aes_gcm_us(const std::vector<char>& in, std::vector<char>& out, int n, int warmup) {
  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  unsigned char key[32] = {1}, iv[12] = {2}, header[5] = {23, 3, 3, 64, 17}, tag[16], rest[32];
  EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key, nullptr);
  constexpr size_t kRecord = 16384;
  return median_us(n, [&] {
    for (size_t at = 0; at < in.size(); at += kRecord) {
      int len = 0;
      ++iv[11];
      EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, nullptr, iv);
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, header, sizeof header);
      EVP_EncryptUpdate(ctx.get(), reinterpret_cast<unsigned char*>(out.data() + at), &len,
                        reinterpret_cast<const unsigned char*>(in.data() + at), int(std::min(kRecord, in.size() - at)));
      EVP_EncryptFinal_ex(ctx.get(), rest, &len);  // GCM writes nothing here
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, sizeof tag, tag);
    }
  }, warmup);
}

std::vector<Figure> bench_floors(const Options& opts) {
  std::vector<Figure> out;
  int r = opts.reps;
  out.push_back({"floor_tcp_pingpong_us", tcp_pingpong_pinned_us(3000 * r, 200, false)});
  out.push_back({"floor_tcp_pingpong_same_core_us", tcp_pingpong_pinned_us(3000 * r, 200, true)});
  out.push_back({"floor_tcp_echo_1MiB_ms", tcp_echo_us(size_t(1) << 20, 50 * r, 5) / 1e3});
  out.push_back({"floor_tcp_echo_64MiB_ms", tcp_echo_us(size_t(64) << 20, 7 * r, 2) / 1e3});
  std::vector<char> a(size_t(64) << 20, 'a'), b(size_t(64) << 20);
  out.push_back({"floor_memcpy_64MiB_ms", median_us(7 * r, [&] { std::memcpy(b.data(), a.data(), a.size()); }, 2) / 1e3});
  out.push_back({"floor_aes256gcm_64MiB_ms", aes_gcm_us(a, b, 7 * r, 2) / 1e3});
  return out;
}

}  // namespace castor::bench
