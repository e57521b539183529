#include "actors/observe/metrics.hpp"

#include <cmath>

namespace castor::detail {

const char* to_string(MessageType t) {
  switch (t) {
    case MessageType::call_request: return "call_request";
    case MessageType::call_reply: return "call_reply";
    case MessageType::tensor_chunk: return "tensor_chunk";
    case MessageType::rref_control: return "rref_control";
    case MessageType::rref_ack: return "rref_ack";
    case MessageType::backward_grad: return "backward_grad";
    case MessageType::backward_done: return "backward_done";
    case MessageType::context_control: return "context_control";
    case MessageType::malformed: return "malformed";
    case MessageType::unexpected: return "unexpected";
  }
  return "?";
}

const char* to_string(CallLatencyKind k) {
  switch (k) {
    case CallLatencyKind::rpc: return "rpc";
    case CallLatencyKind::remote: return "remote";
    case CallLatencyKind::method: return "method";
    case CallLatencyKind::to_here: return "to_here";
  }
  return "?";
}

namespace {

// Bucket i holds latencies up to 2^(i/4) µs.
size_t bucket_of(double us) {
  if (us <= 1) return 0;
  auto i = size_t(std::ceil(std::log2(us) * 4));
  return i < LatencyHistogram::kBuckets ? i : LatencyHistogram::kBuckets - 1;
}

double bucket_upper_us(size_t i) { return std::exp2(double(i) / 4); }

}  // namespace

void LatencyHistogram::record(std::chrono::nanoseconds d) {
  auto ns = d.count() < 0 ? 0 : uint64_t(d.count());
  buckets_[bucket_of(double(ns) / 1e3)].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
}

uint64_t LatencyHistogram::count() const {
  uint64_t n = 0;
  for (auto& b : buckets_) n += b.load(std::memory_order_relaxed);
  return n;
}

double LatencyHistogram::quantile_us(double q) const {
  std::array<uint64_t, kBuckets> snap;
  uint64_t total = 0;
  for (size_t i = 0; i < kBuckets; ++i) total += snap[i] = buckets_[i].load(std::memory_order_relaxed);
  if (total == 0) return 0;
  auto rank = uint64_t(std::ceil(q * double(total)));
  if (rank == 0) rank = 1;
  uint64_t seen = 0;
  for (size_t i = 0; i < kBuckets; ++i) {
    seen += snap[i];
    if (seen >= rank) return bucket_upper_us(i);
  }
  return bucket_upper_us(kBuckets - 1);
}

}  // namespace castor::detail
