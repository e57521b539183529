// The bulk path's frames (B1 of Note [Bulk path] in bulk_path.cpp): the
// constants of the link's protocol, a message's envelope with its large
// tensors taken out, and the frame a writer sends.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <caf/binary_serializer.hpp>
#include <caf/message.hpp>

#include "actors/transport/bulk/same_host.hpp"
#include "messages/ids.hpp"
#include "messages/value.hpp"

namespace castor {
struct CallRequest;
struct CallReply;
struct BackwardGrad;
}  // namespace castor

namespace castor::detail::bulk {

inline constexpr uint32_t kMagic = 0x31425343;  // "CSB1"
inline constexpr uint8_t kRequest = 1, kReply = 2;
// B10: protocol messages to the peer's worker actor.
inline constexpr uint8_t kBackwardGrad = 3, kBackwardDone = 4, kContextControl = 5, kRRefControl = 6, kRRefAck = 7;
inline constexpr uint8_t kLastFrameType = kRRefAck;
inline constexpr uint8_t kBytesFollow = 0, kAddresses = 1;  // B1 or B7
// SH7 of Note [Shared tensors]: addresses of tensors that all lie in segments
// the receiver mapped before; it maps them again if it must, and answers nothing.
inline constexpr uint8_t kViews = 2;
inline constexpr char kCopied = 'A', kSendBytes = 'N', kSameHost = 'C', kOtherHost = 'T', kRefused = 'R';
// B15: the copy may hold freed memory (its sender revoked copies meanwhile):
// the bytes of this frame follow, and the link stays same-host.
inline constexpr char kCopyRevoked = 'B';
// SH7: copied, and every tensor of the frame that names a segment was
// mapped: the sender keeps those segments for the frames that follow.
inline constexpr char kMapped = 'V';
// B7 and SH3 of Note [Shared tensors]: per tensor of a same-host head, its
// address, then its segment's descriptor, id and offset (descriptor -1: none).
inline constexpr size_t kAddressRecordBytes = 32;
// B15: after a head's addresses, the sender's revocation word (its address
// and the value the head was made with).
inline constexpr size_t kRevocationBytes = 16;
inline constexpr int kGreetingLimitSeconds = 5;
inline constexpr uint64_t kMaxTensorBytes = uint64_t(1) << 46;  // 64 TiB: beyond any machine, far from overflow
inline constexpr uint64_t kMaxEnvelope = uint64_t(1) << 30;
inline constexpr uint32_t kMaxTensors = 1 << 20;

/// Appends the bytes of `x` to `buf`.
template <class T>
void put(std::vector<char>& buf, T x) {
  auto at = buf.size();
  buf.resize(at + sizeof x);
  std::memcpy(buf.data() + at, &x, sizeof x);
}

/// The CAF encoding of `msg`, its large tensors already replaced (B1).
template <class Message>
std::vector<char> envelope_of(Message& msg) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  if (auto err = sink(msg)) throw std::runtime_error("cannot encode a message for the bulk link");
  return buf;
}

/// The values of a message in which its large tensors travel apart (B1,
/// B10); a message without any has none.
std::vector<Value*> values_in(CallRequest& m);
std::vector<Value*> values_in(CallReply& m);
std::vector<Value*> values_in(BackwardGrad& m);
template <class Message>
std::vector<Value*> values_in(Message&) {
  return {};
}

/// Whether `v` holds a tensor of at least `threshold` bytes, or a shared one
/// (SH2 of Note [Shared tensors]).
bool has_large(const Value& v, size_t threshold);

/// Replaces every tensor of at least `threshold` bytes in `v`, and every
/// shared one (SH2), by an ExternalTensor placeholder and appends it to
/// `out` (depth-first: B1).
void extract(Value& v, size_t threshold, IdGenerator<TransferId>& ids, std::vector<at::Tensor>& out);

/// The placeholders in `v`, in the order extract() made them.
void placeholders(Value& v, std::vector<Value*>& out);

/// Undoes extract(): the tensors it took out go back in their placeholders
/// (for a message that goes through CAF after all: B11).
void restore(const std::vector<Value*>& values, std::vector<at::Tensor>& tensors);

/// B15 of Note [Bulk path]: held by a frame from the moment its head of
/// addresses is made until the receiver's answer says the copy is over. A
/// frame let go of before then (its link broke or stopped) revokes the
/// copies in flight, before its tensors can be freed.
class CopyLease {
 public:
  CopyLease() = default;
  CopyLease(CopyLease&& other) noexcept : held_(std::exchange(other.held_, false)) {}
  CopyLease& operator=(CopyLease&& other) noexcept {
    if (this != &other) {
      give_up();
      held_ = std::exchange(other.held_, false);
    }
    return *this;
  }
  ~CopyLease() { give_up(); }
  void take() { held_ = true; }
  void answered() { held_ = false; }
  /// The receiver may still be copying: revoke (once).
  void give_up() {
    if (std::exchange(held_, false)) revoke_copies();
  }

 private:
  bool held_ = false;
};

/// One message as a writer sends it. Moved, never assigned over: an
/// assignment would let go of the old tensors before its lease (B15).
struct Frame {
  Frame() = default;
  Frame(Frame&&) = default;
  Frame& operator=(Frame&&) = delete;

  uint8_t type = 0;
  std::vector<char> head;  // type, mode, envelope length, tensor count, tensor lengths, envelope
  std::vector<at::Tensor> tensors;
  CallId call;  // requests: failed at once if the link breaks (B4)
  caf::message fallback;  // protocol messages: sent through CAF if the link breaks (B10)
  // B14: the sending thread wrote the head (the tensors' addresses, B7),
  // and the writer goes on from the receiver's answer; `head_error` is the
  // errno of a head write that failed (the writer fails the frame as if
  // the write had been its own).
  bool head_written = false;
  int head_error = 0;
  // SH7 of Note [Shared tensors]: every tensor lies in a segment the
  // receiver mapped before; the head of addresses is made (add_views), and
  // no answer comes.
  bool views_only = false;
  bool mapped_answer = false;  // SH7: the receiver answered kMapped
  uint64_t number = 0;         // SH7: the frame's place on its link (1, 2, ...)
  // Last, so that it goes first: a copy is revoked before the tensors
  // (and the fallback's references to them) are let go of (B15).
  CopyLease lease;
};

/// B7: the head says addresses follow, and ends with the tensors' addresses
/// and segments (SH3) and (B15) the revocation word; the frame takes its lease.
void add_addresses(Frame& out);

/// SH7 of Note [Shared tensors]: the same records under kViews, with no
/// lease (nothing is copied, and no answer comes).
void add_views(Frame& out);

Frame make_frame(uint8_t type, std::vector<char> envelope, std::vector<at::Tensor> tensors, CallId call);

}  // namespace castor::detail::bulk
