// Lock-free counters of one worker's traffic, for `castor inspect` and the
// metrics port: messages handled per type, and round-trip latencies of our
// calls per kind, in log-scaled histograms (exact to within 19%).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace castor::detail {

/// What the worker actor handles (counted on arrival).
enum class MessageType : uint8_t {
  call_request, call_reply, tensor_chunk, rref_control, rref_ack,
  backward_grad, backward_done, context_control, malformed, unexpected,
};
inline constexpr size_t kNumMessageTypes = 10;
const char* to_string(MessageType t);

/// Which of our calls a latency belongs to.
enum class CallLatencyKind : uint8_t { rpc, remote, method, to_here };
inline constexpr size_t kNumCallLatencyKinds = 4;
const char* to_string(CallLatencyKind k);

/// Latencies from 1 µs to about 1 hour in buckets 2^(1/4) apart.
class LatencyHistogram {
 public:
  static constexpr size_t kBuckets = 128;
  void record(std::chrono::nanoseconds d);
  uint64_t count() const;
  /// The upper bound of the bucket holding quantile `q` (0 < q <= 1), in µs;
  /// 0 when nothing was recorded.
  double quantile_us(double q) const;
  double sum_us() const { return double(sum_ns_.load(std::memory_order_relaxed)) / 1e3; }

 private:
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> sum_ns_{0};
};

struct MessageStats {
  std::array<std::atomic<uint64_t>, kNumMessageTypes> received{};
  std::array<LatencyHistogram, kNumCallLatencyKinds> latency;
  // Note [Bulk path]: messages with large tensors and their bytes on the
  // bulk links (B1), and the other calls, replies (B8) and protocol
  // messages (B10) on them.
  std::atomic<uint64_t> bulk_sent{0}, bulk_bytes_sent{0}, bulk_received{0}, bulk_bytes_received{0};
  std::atomic<uint64_t> lane_sent{0}, lane_received{0};
  // B9, B12, B13: the writes that carried lane_sent (fewer when frames leave together).
  std::atomic<uint64_t> lane_writes{0};
  // B14: same-host frames whose head (the tensors' addresses) the sending thread wrote.
  std::atomic<uint64_t> heads_by_sender{0};
  // B15: same-host copies found revoked by their sender after they were made
  // (their bytes were asked for instead).
  std::atomic<uint64_t> copies_revoked{0};
  // SH7 of Note [Shared tensors]: same-host frames of views sent without
  // waiting for an answer (their segments were mapped by the peer before).
  std::atomic<uint64_t> views_unanswered{0};
  // RJ6 of Note [Rejoin]: messages from a dead life of a peer, refused.
  std::atomic<uint64_t> stale_refused{0};

  void count(MessageType t) { received[size_t(t)].fetch_add(1, std::memory_order_relaxed); }
};

}  // namespace castor::detail
