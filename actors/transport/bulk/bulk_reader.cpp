// The receiving side of a bulk link: its greeting (B3), then frame after
// frame rebuilt and delivered as the peer's (B1, B2, B5, B7, B8).
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <type_traits>
#include <variant>

#include <caf/binary_deserializer.hpp>
#include <caf/logger.hpp>
#include <caf/send.hpp>

#include "actors/calls/delivery.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/transport/bulk/bulk_frame.hpp"
#include "actors/transport/bulk/bulk_path.hpp"
#include "actors/transport/bulk/bulk_stream.hpp"
#include "actors/transport/bulk/receive_blocks.hpp"
#include "actors/transport/bulk/same_host.hpp"
#include "messages/autograd_proto.hpp"
#include "messages/rendezvous.hpp"
#include "messages/rref_proto.hpp"
#include "messages/tensor_wire.hpp"

namespace castor::detail {

using namespace bulk;

namespace {

// What a frame of each type carries (B1, B10).
using LaneMessage =
    std::variant<CallRequest, CallReply, BackwardGrad, BackwardDone, ContextControl, RRefControl, RRefControlAck>;
static_assert(std::variant_size_v<LaneMessage> == kLastFrameType, "one alternative per frame type, in their order");

LaneMessage empty_message(uint8_t type) {
  switch (type) {
    case kRequest: return CallRequest{};
    case kReply: return CallReply{};
    case kBackwardGrad: return BackwardGrad{};
    case kBackwardDone: return BackwardDone{};
    case kContextControl: return ContextControl{};
    case kRRefControl: return RRefControl{};
    default: return RRefControlAck{};
  }
}

// Why decoding failed (Note [Hostile input]); an ack has nothing to refuse.
template <class Message>
const std::string& malformed_of(const Message& m) {
  return m.malformed;
}
const std::string& malformed_of(const RRefControlAck&) {
  static const std::string none;
  return none;
}

}  // namespace

void BulkPath::read_loop(Stream& stream) {
  int fd = stream.fd();
  std::string from_name = "an unknown peer";
  auto drop = [&](const std::string& why) {
    if (!stopping_)
      std::fprintf(stderr, "castor[%s]: closed the bulk link from %s: %s\n", rt_.name().c_str(), from_name.c_str(),
                   why.c_str());
    ::shutdown(fd, SHUT_RDWR);
  };
  uint32_t magic = 0, version = 0;
  int32_t from = -1;
  int32_t pid = 0;
  uint32_t id_len = 0;
  // The greeting of B3 comes at once or not at all: a silent peer must not
  // hold this thread.
  timeval limit{kGreetingLimitSeconds, 0}, none{0, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  if (!stream.read_all(&magic, 4) || !stream.read_all(&from, 4) || !stream.read_all(&version, 4)) return drop("no greeting");
  if (magic != kMagic) return drop("not a castor bulk link");
  if (!stream.read_all(&pid, 4) || !stream.read_all(&id_len, 4) || id_len > 4096) return drop("no greeting");
  std::string identity(id_len, '\0');
  uint32_t sender_life = 0;
  if (!stream.read_all(identity.data(), id_len) || !stream.read_all(&sender_life, 4)) return drop("no greeting");
  bool same_host = rt_.opts.bulk_same_host && !identity.empty() && identity == host_identity() && pid > 0 &&
                   pid != ::getpid();
  // The world is known once init is done; a peer may connect a moment
  // earlier. Answer only after checking, so that a refused sender falls back
  // to CAF instead of writing frames that would be lost (B4).
  auto refuse = [&](const std::string& why) {
    char no = kRefused;
    (void)stream.write_all(&no, 1);
    drop(why);
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kGreetingLimitSeconds - 1);
  while (rt_.state.load() == RunState::starting && !stopping_ && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (rt_.state.load() == RunState::starting) return refuse("this worker's init has not finished");
  const auto& world = rt_.world();
  auto peer = world.peer(from);
  if (!peer) return refuse("rank " + std::to_string(from) + " is not a live peer of this world");
  from_name = "worker " + rt_.name_of(from);
  // B7 reads only from the process that joined as that rank (its pid came
  // with the join, not with this unauthenticated greeting).
  same_host = same_host && pid == world.member(from).pid;
  // Note [Rejoin] RJ5: this link belongs to the peer's current life only.
  const uint32_t incarnation = world.member(from).incarnation;
  if (sender_life != incarnation) {  // B3, RJ6: a dead life (or one we have not taken back yet)
    if (sender_life < incarnation) rt_.stats.stale_refused.fetch_add(1);
    return refuse("it is incarnation " + std::to_string(sender_life) + " of worker " + rt_.name_of(from) +
                  "; this world knows incarnation " + std::to_string(incarnation));
  }
  if (version != kWireProtocolVersion)
    return refuse("wire protocol " + std::to_string(version) + ", expected " + std::to_string(kWireProtocolVersion));
  char answer = same_host ? kSameHost : kOtherHost;
  if (!stream.write_all(&answer, 1)) return drop("closed during the greeting");
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
  auto sender = *peer;
  for (;;) {
    uint8_t type = 0, mode = 0;
    uint64_t env_len = 0;
    uint32_t count = 0;
    if (!stream.read_all(&type, 1)) return (void)::shutdown(fd, SHUT_RDWR);  // closed between frames: the peer is done
    if (!stream.read_all(&mode, 1) || !stream.read_all(&env_len, 8) || !stream.read_all(&count, 4))
      return drop("truncated frame");
    if (type < kRequest || type > kLastFrameType || (mode != kBytesFollow && mode != kAddresses) ||
        (mode == kAddresses && !same_host) || env_len > kMaxEnvelope || count > kMaxTensors)
      return drop("malformed frame header");
    std::vector<uint64_t> lengths(count);
    std::vector<char> env(env_len);
    if (!stream.read_all(lengths.data(), 8 * size_t(count)) || !stream.read_all(env.data(), env.size()))
      return drop("truncated frame");
    auto message = empty_message(type);
    std::vector<Value*> slots;
    caf::binary_deserializer source{nullptr, env};
    caf::error err;
    std::visit(
        [&](auto& m) {
          err = source(m);
          for (auto* v : values_in(m)) placeholders(*v, slots);
        },
        message);
    if (err || slots.size() != count) return drop("malformed envelope");
    std::vector<uint64_t> addresses(mode == kAddresses ? count : 0);
    if (!addresses.empty() && !stream.read_all(addresses.data(), 8 * size_t(count))) return drop("truncated frame");
    std::vector<at::Tensor> received(count);
    for (size_t i = 0; i < count; ++i) {
      auto ext = slots[i]->to_external();
      auto dtype = wire::from_wire_dtype(ext.dtype);
      if (!dtype) return drop("unknown dtype");
      // Check the claimed length against the shape before allocating anything.
      uint64_t expected = c10::elementSize(*dtype);
      bool overflow = false;
      for (auto d : ext.sizes) {
        if (d < 0) return drop("negative tensor size");
        overflow |= d != 0 && expected > UINT64_MAX / uint64_t(d);
        expected *= uint64_t(d);
      }
      if (overflow || expected != lengths[i]) return drop("tensor length does not match its shape");
      if (expected > kMaxTensorBytes) return drop("a tensor of " + std::to_string(expected) + " bytes");
      at::Tensor t;
      try {
        t = ReceiveBlocks::instance().empty(ext.sizes, *dtype, size_t(expected));
      } catch (const std::exception& e) {
        return drop("cannot allocate " + std::to_string(expected) + " bytes: " + e.what());
      }
      received[i] = std::move(t);
    }
    // B7: copy out of the sender's memory; if the kernel refuses, ask for the bytes.
    bool copied = !addresses.empty();
    for (size_t i = 0; copied && i < count; ++i)
      copied = copy_from_process(pid, addresses[i], received[i].data_ptr(), lengths[i]);
    if (!addresses.empty()) {
      char reply_byte = copied ? kCopied : kSendBytes;
      if (!stream.write_all(&reply_byte, 1)) return drop("closed while copying");
      if (!copied) {
        same_host = false;
        std::fprintf(stderr, "castor[%s]: cannot read tensors from %s's memory (%s); its link sends bytes\n",
                     rt_.name().c_str(), from_name.c_str(), std::strerror(errno));
      }
    }
    for (size_t i = 0; i < count; ++i) {
      if (!copied && !stream.read_all(received[i].data_ptr(), lengths[i])) return drop("truncated tensor");
      auto ext = slots[i]->to_external();
      if (ext.requires_grad) received[i].set_requires_grad(true);
      *slots[i] = Value(std::move(received[i]));
    }
    (count ? rt_.stats.bulk_received : rt_.stats.lane_received).fetch_add(1, std::memory_order_relaxed);
    for (auto n : lengths) rt_.stats.bulk_bytes_received.fetch_add(n, std::memory_order_relaxed);
    // B2: as if the peer's worker actor had sent it through CAF; B8: a
    // well-formed call or reply is delivered from here, without waking the
    // actor (malformed ones go to the actor, which reports them).
    if (!rt_.world().alive(from) || rt_.world().member(from).incarnation != incarnation) {  // B8, RJ5
      if (rt_.world().member(from).incarnation != incarnation) rt_.stats.stale_refused.fetch_add(1);  // RJ6
      return drop("worker " + rt_.name_of(from) + " was found dead");
    }
    std::string refused;
    std::visit(
        [&](auto& m) {
          using Message = std::decay_t<decltype(m)>;
          if (!malformed_of(m).empty()) {
            caf::send_as(sender, rt_.actor, std::move(m));
          } else if constexpr (std::is_same_v<Message, CallRequest>) {
            if (m.caller != from) {
              refused = "a call from rank " + std::to_string(m.caller) + " on its link";
              return;
            }
            rt_.stats.count(MessageType::call_request);
            deliver_request(rt_, std::move(m), caf::actor_cast<caf::strong_actor_ptr>(sender), nullptr);
          } else if constexpr (std::is_same_v<Message, BackwardGrad>) {
            if (m.from != from) {  // its answer would go to another worker (B10, as B8 for a call)
              refused = "a gradient from rank " + std::to_string(m.from) + " on its link";
              return;
            }
            deliver_protocol(rt_, std::move(m));
          } else if constexpr (std::is_same_v<Message, CallReply>) {
            rt_.stats.count(MessageType::call_reply);
            deliver_reply(rt_, std::move(m), nullptr);
          } else {
            deliver_protocol(rt_, std::move(m));  // B10
          }
        },
        message);
    caf::logger::set_current_actor_system(nullptr);
    if (!refused.empty()) return drop(refused);
  }
}

}  // namespace castor::detail
