// The machine's limits that castor's figures are read against (floors.cpp),
// as objects that live beside the figures they bound, so that both can be
// timed in turns (paired_medians_us).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "bench_util.hpp"

namespace castor::bench {

/// Exactly `n` bytes to or from a blocking socket; false once the peer went
/// away (no SIGPIPE).
bool send_all(int fd, const char* p, size_t n);
bool recv_all(int fd, char* p, size_t n);

/// A plain TCP echo on loopback between this process and a forked child:
/// `bytes` go there and back per round trip. Make it before any worker
/// starts: the child only makes system calls, but a fork should not copy a
/// process whose other threads hold locks. The child serves until this
/// object is destroyed.
class EchoFloor {
 public:
  /// `child_cpu` >= 0 pins the child to that core.
  explicit EchoFloor(size_t bytes, int child_cpu = -1);
  ~EchoFloor();
  EchoFloor(const EchoFloor&) = delete;
  EchoFloor& operator=(const EchoFloor&) = delete;

  void round_trip();  // throws if the child went away

 private:
  std::vector<char> out_, back_;
  int fd_ = -1;
  pid_t child_ = -1;
};

/// The small-message floor: a 64-byte echo whose two ends are pinned to two
/// cores (why: floors.cpp). Its turn pins the timing thread to core 0 for
/// each block and restores its cores after; with fewer than two cores to
/// pin to, nothing is pinned.
class PingPongFloor {
 public:
  PingPongFloor();
  Turn turn();

 private:
  bool pin_;
  EchoFloor echo_;
};

/// What TLS pays at least on top of the bytes: one AES-256-GCM pass over
/// `bytes` on one core, in records as TLS 1.3 makes them.
class AesFloor {
 public:
  explicit AesFloor(size_t bytes);
  ~AesFloor();
  AesFloor(const AesFloor&) = delete;
  AesFloor& operator=(const AesFloor&) = delete;

  void pass();

 private:
  struct Cipher;
  std::unique_ptr<Cipher> cipher_;
  std::vector<char> in_, out_;
};

}  // namespace castor::bench
