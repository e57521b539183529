// The machine's limits, measured in the same run as the figures they bound
// (those that bound one are timed in turns with it: floors.hpp):
// a plain TCP ping-pong and echo between two processes on loopback (what any
// RPC stack pays at least), memcpy (what shared memory pays at least) and
// AES-256-GCM on one core (what TLS pays at least on top).
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <cerrno>
#include <chrono>
#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "bench_suites.hpp"
#include "floors.hpp"

namespace castor::bench {

bool send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    auto w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= size_t(w);
  }
  return true;
}

bool recv_all(int fd, char* p, size_t n) {
  while (n > 0) {
    auto r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r, n -= size_t(r);
  }
  return true;
}

namespace {

// The calling thread's cores: all of `mask`, or the one core `cpu`.
void set_cores(const cpu_set_t& mask) { ::sched_setaffinity(0, sizeof mask, &mask); }

void pin_to(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  set_cores(one);
}

cpu_set_t cores_now() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ::sched_getaffinity(0, sizeof mask, &mask);
  return mask;
}

bool two_cores_to_pin() {
  auto mask = cores_now();
  return CPU_COUNT(&mask) >= 2 && CPU_ISSET(0, &mask) && CPU_ISSET(1, &mask);
}

}  // namespace

EchoFloor::EchoFloor(size_t bytes, int child_cpu) : out_(bytes, 'x'), back_(bytes) {
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(lfd, 1) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (lfd >= 0) ::close(lfd);
    throw std::runtime_error("floors: cannot listen on loopback");
  }
  child_ = ::fork();
  if (child_ == 0) {  // only system calls from here on
    if (child_cpu >= 0) pin_to(child_cpu);
    int c = ::accept(lfd, nullptr, nullptr);
    if (c < 0) ::_exit(1);
    int one = 1;
    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    while (recv_all(c, back_.data(), back_.size()) && send_all(c, back_.data(), back_.size())) {
    }
    ::_exit(0);
  }
  ::close(lfd);
  if (child_ < 0) throw std::runtime_error("floors: cannot fork the echo peer");
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd_);
    ::kill(child_, SIGKILL);  // it waits in accept, for no one now
    int status;
    ::waitpid(child_, &status, 0);
    throw std::runtime_error("floors: cannot connect on loopback");
  }
}

EchoFloor::~EchoFloor() {
  ::close(fd_);  // the child's recv ends, and so does the child
  int status;
  ::waitpid(child_, &status, 0);
}

void EchoFloor::round_trip() {
  if (!send_all(fd_, out_.data(), out_.size()) || !recv_all(fd_, back_.data(), back_.size()))
    throw std::runtime_error("floors: the echo peer went away");
}

// A small round trip depends on where the kernel puts the pair: on one core
// the waker runs the woken process at once (4.5 µs in one run on this VM),
// on two cores it pays a wake-up across cores (75 µs). Left to the kernel,
// the figure swung between the two from run to run. castor's and PyTorch's
// workers (an I/O thread each, other threads beside it) run on both cores,
// so the floor is the ping-pong pinned to two cores; bench_floors prints
// the one-core figure beside it.
PingPongFloor::PingPongFloor() : pin_(two_cores_to_pin()), echo_(64, pin_ ? 1 : -1) {}

Turn PingPongFloor::turn() {
  auto before = std::make_shared<cpu_set_t>(cores_now());
  Turn t{[this] { echo_.round_trip(); }};
  if (pin_) {
    t.enter = [] { pin_to(0); };
    t.leave = [before] { set_cores(*before); };  // the figures timed in turns with it run unpinned
  }
  return t;
}

// As TLS 1.3 encrypts with the cipher it negotiates here: AES-256-GCM, the
// key set once, per 16 KiB record a fresh nonce, the record header as
// associated data and a tag; one core.
struct AesFloor::Cipher {
  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx{EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free};
  unsigned char iv[12] = {2};
};

AesFloor::AesFloor(size_t bytes) : cipher_(std::make_unique<Cipher>()), in_(bytes, 'a'), out_(bytes) {
  unsigned char key[32] = {1};
  if (!cipher_->ctx || EVP_EncryptInit_ex(cipher_->ctx.get(), EVP_aes_256_gcm(), nullptr, key, nullptr) != 1)
    throw std::runtime_error("floors: cannot set up AES-256-GCM");
}

AesFloor::~AesFloor() = default;

void AesFloor::pass() {
  constexpr size_t kRecord = 16384;
  unsigned char header[5] = {23, 3, 3, 64, 17}, tag[16], rest[32];
  auto* ctx = cipher_->ctx.get();
  for (size_t at = 0; at < in_.size(); at += kRecord) {
    int len = 0;
    ++cipher_->iv[11];
    EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, cipher_->iv);
    EVP_EncryptUpdate(ctx, nullptr, &len, header, sizeof header);
    EVP_EncryptUpdate(ctx, reinterpret_cast<unsigned char*>(out_.data() + at), &len,
                      reinterpret_cast<const unsigned char*>(in_.data() + at), int(std::min(kRecord, in_.size() - at)));
    EVP_EncryptFinal_ex(ctx, rest, &len);  // GCM writes nothing here
    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, sizeof tag, tag);
  }
}

// The floors that nothing is timed in turns with (the others are made in
// bench_rpc, beside the figures they bound).
std::vector<Figure> bench_floors(const Options& opts) {
  std::vector<Figure> out;
  int r = opts.reps;
  double same_core = 0;
  if (two_cores_to_pin()) {
    auto before = cores_now();
    pin_to(0);
    EchoFloor echo(64, 0);
    same_core = median_us(3000 * r, [&] { echo.round_trip(); }, 200);
    set_cores(before);
  }
  out.push_back({"floor_tcp_pingpong_same_core_us", same_core});
  EchoFloor echo_1mib(size_t(1) << 20);
  out.push_back({"floor_tcp_echo_1MiB_ms", median_us(50 * r, [&] { echo_1mib.round_trip(); }, 5) / 1e3});
  return out;
}

}  // namespace castor::bench
