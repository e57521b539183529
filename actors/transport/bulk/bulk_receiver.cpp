// The receiving side of every bulk link into one worker: one epoll thread
// (B11), each link's greeting (B3), then frame after frame rebuilt and
// delivered as the peer's (B1, B2, B5, B7, B8, B10).
#include "actors/transport/bulk/bulk_receiver.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <system_error>
#include <type_traits>
#include <unordered_map>
#include <variant>

#include <caf/binary_deserializer.hpp>
#include <caf/logger.hpp>
#include <caf/send.hpp>

#include "actors/calls/delivery.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/transport/bulk/bulk_frame.hpp"
#include "actors/transport/bulk/receive_blocks.hpp"
#include "actors/transport/bulk/same_host.hpp"
#include "actors/transport/bulk/shared_segments.hpp"
#include "actors/transport/door.hpp"
#include "actors/transport/sockets.hpp"
#include "messages/autograd_proto.hpp"
#include "messages/rendezvous.hpp"
#include "messages/rref_proto.hpp"
#include "messages/tensor_wire.hpp"

namespace castor::detail::bulk {

namespace {

using Clock = std::chrono::steady_clock;

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
template <class Message>
void mark_malformed(Message& m, std::string why) {
  m.malformed = std::move(why);
}
void mark_malformed(RRefControlAck&, std::string) {}  // carries no tensor

// B9: what one read takes from a socket into a link's buffer at most.
constexpr size_t kReadAhead = 64 * 1024;
// B11: what one link reads before the others get their turn.
constexpr size_t kTurnBytes = size_t(4) << 20;
// A frame's fixed head: type, mode, envelope length, tensor count.
constexpr size_t kHeadBytes = 1 + 1 + 8 + 4;
// A greeting's fixed part: magic, rank, wire protocol, pid, identity length.
constexpr size_t kGreetingBytes = 5 * 4;
// Empty read-ahead buffers the receiver keeps for the links' next turns.
constexpr size_t kSpareBuffers = 16;
// How often links that wait for their greeting, or for this worker's init,
// are looked at again.
constexpr int kGreetingTickMs = 5;

enum class Got { bytes, later, ended };

// B9 with TLS: OpenSSL reads the socket itself (through castor's socket
// BIO); this callback on a link's session sees each read return and marks
// the link drained when the socket gave less than the session asked for.
long note_short_read(BIO* b, int oper, const char*, size_t len, int, long, int ret, size_t* processed) {
  if (oper == (BIO_CB_READ | BIO_CB_RETURN))
    *static_cast<bool*>(static_cast<void*>(BIO_get_callback_arg(b))) = ret <= 0 || !processed || *processed < len;
  return ret;
}

template <class T>
T peek(const char* p) {
  T x;
  std::memcpy(&x, p, sizeof x);
  return x;
}

}  // namespace

// Where a link is (a type of the bulk namespace, not of the anonymous one:
// Incoming, declared in the header, has a field of this type).
enum class Phase { greeting, waiting_for_init, head, tensors };

// One link's state. Only the receiver's thread touches it once added.
struct Incoming {
  int fd = -1;
  SslPtr ssl;
  Phase phase = Phase::greeting;
  Clock::time_point deadline;  // of the greeting and the answer to it (B3)
  std::string from_name = "an unknown peer";
  bool ended = false;  // the peer closed, the link broke, or it was dropped
  bool muted = false;  // off epoll while it waits for this worker's init
  size_t turn = 0;     // bytes read in this turn (B11)
  // B9: a read of the socket this turn came back short (plain: ours; TLS:
  // the session's, seen by note_short_read): the socket held no more then,
  // so the next read would only say EAGAIN. The link waits for epoll instead
  // (level-triggered: it reports bytes that came since).
  bool drained = false;
  // The greeting (B3).
  int32_t from = -1;
  int32_t pid = 0;
  uint32_t version = 0, life = 0;
  bool same_host = false;
  bool warned_shared = false;  // SH4: a segment could not be mapped (said once per link)
  worker_peer sender;  // the peer's worker actor, once greeted
  bool greeted = false;
  // Read ahead (B9): bytes [begin, end) of buf came in and are not parsed yet.
  std::unique_ptr<char[]> buf;
  size_t cap = 0, begin = 0, end = 0;
  std::vector<std::unique_ptr<char[]>>* spares = nullptr;  // the receiver's, of kReadAhead bytes
  // The frame being read: its message, and the tensors its bytes go into.
  LaneMessage message;
  std::vector<Value*> slots;
  std::vector<uint64_t> lengths;
  std::vector<at::Tensor> received;
  size_t tensor = 0;
  uint64_t offset = 0;

  size_t buffered() const { return end - begin; }

  // One non-blocking read of at most `n` bytes.
  Got read_some(char* p, size_t n, size_t& got) {
    if (!ssl) {
      if (drained) return Got::later;
      for (;;) {
        auto r = ::recv(fd, p, n, 0);
        if (r > 0) return drained = size_t(r) < n, got = size_t(r), turn += got, Got::bytes;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Got::later;
        return Got::ended;  // closed, reset, or shut down by stop()
      }
    }
    // Records the session has read but not handed out yet are read first.
    if (drained && !SSL_has_pending(ssl.get())) return Got::later;
    // T6 of Note [TLS]: the thread's error queue is empty before and after.
    ERR_clear_error();
    int r = SSL_read(ssl.get(), p, int(std::min(n, size_t(1) << 30)));
    if (r > 0) return got = size_t(r), turn += got, Got::bytes;
    int why = SSL_get_error(ssl.get(), r);
    ERR_clear_error();
    return why == SSL_ERROR_WANT_READ ? Got::later : Got::ended;
  }

  // B9: whether `n` unparsed bytes are in the buffer, reading what the
  // socket holds (up to the buffer's room) when they are not.
  bool fill(size_t n) {
    while (buffered() < n) {
      size_t want = std::max(n, kReadAhead);
      if (begin > 0 && cap - begin < want) {  // move what is left to the front
        std::memmove(buf.get(), buf.get() + begin, buffered());
        end -= begin, begin = 0;
      }
      if (cap < want) grow(want);
      size_t got = 0;
      auto r = read_some(buf.get() + end, cap - end, got);
      if (r != Got::bytes) return ended = r == Got::ended, false;
      end += got;
    }
    return true;
  }

  // A buffer of `want` bytes at least, keeping what is unparsed; one of
  // kReadAhead comes from the receiver's spares.
  void grow(size_t want) {
    std::unique_ptr<char[]> bigger;
    if (want == kReadAhead && !spares->empty()) {
      bigger = std::move(spares->back());
      spares->pop_back();
    } else {
      bigger.reset(new char[want]);
    }
    if (buffered()) std::memcpy(bigger.get(), buf.get() + begin, buffered());
    end -= begin, begin = 0;
    recycle(std::move(buf));
    buf = std::move(bigger), cap = want;
  }

  // An empty buffer goes back after a turn, so that idle links hold none
  // (a worker of a 128-worker world has 127 links).
  void release_if_empty() {
    if (!buf || buffered()) return;
    recycle(std::move(buf));
    cap = 0, begin = end = 0;
  }

  // `old` had `cap` bytes.
  void recycle(std::unique_ptr<char[]> old) {
    if (old && cap == kReadAhead && spares->size() < kSpareBuffers) spares->push_back(std::move(old));
  }

  template <class T>
  T take() {
    auto x = peek<T>(buf.get() + begin);
    begin += sizeof x;
    return x;
  }

  // A one-byte answer: the greeting's (B3) or a copy's (B7). The socket's
  // buffer is empty (this side sends nothing else), so it never waits.
  bool answer(char byte) {
    if (!ssl) {
      for (;;) {
        auto r = ::send(fd, &byte, 1, MSG_NOSIGNAL);
        if (r == 1) return true;
        if (r < 0 && errno == EINTR) continue;
        return false;
      }
    }
    ERR_clear_error();
    bool sent = SSL_write(ssl.get(), &byte, 1) == 1;
    ERR_clear_error();
    return sent;
  }

  void next_frame() {
    phase = Phase::head;
    message = LaneMessage{};
    slots.clear(), lengths.clear(), received.clear();
    tensor = 0, offset = 0;
  }
};

Receiver::Receiver(Runtime& rt, const std::atomic<bool>& stopping) : rt_(rt), stopping_(stopping) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    int err = errno;
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    throw std::system_error(err, std::generic_category(), "the bulk links' epoll");
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    ::close(epoll_fd_), ::close(wake_fd_);
    throw;
  }
}

Receiver::~Receiver() {
  stop();
  ::close(epoll_fd_);
  ::close(wake_fd_);
}

void Receiver::add(Admitted admitted) {
  int fd = admitted.fd;
  net::set_nonblocking(fd, true);
  net::set_bulk_buffers(fd);
  auto in = std::make_unique<Incoming>();
  in->fd = fd;
  in->ssl = std::move(admitted.ssl);
  if (in->ssl) {
    SSL_set_read_ahead(in->ssl.get(), 1);  // B9: a record's header and body in one recv
    BIO* socket = SSL_get_rbio(in->ssl.get());
    BIO_set_callback_arg(socket, reinterpret_cast<char*>(&in->drained));  // freed with the link, as the session is
    BIO_set_callback_ex(socket, note_short_read);
  }
  // B3: the greeting, and this worker's answer to it, come at once or not
  // at all (the sender waits kGreetingLimitSeconds for the answer).
  in->deadline = Clock::now() + std::chrono::seconds(kGreetingLimitSeconds - 1);
  std::lock_guard<std::mutex> lock(mtx_);
  // A peer opens one link to us; a cluster without a secret lets strangers
  // greet, so they may not take more than the world's links.
  auto limit = 2 * size_t(rt_.opts.world_size) + 8;
  if (quit_ || stopping_ || open_ >= limit) {
    if (!quit_ && !stopping_)
      std::fprintf(stderr, "castor[%s]: closed a bulk link from %s: %zu links are open already\n",
                   rt_.name().c_str(), net::peer_address(fd).c_str(), open_.load());
    ::close(fd);
    return;
  }
  open_.fetch_add(1);
  added_.push_back(std::move(in));
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void Receiver::stop() {
  if (quit_.exchange(true)) return;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

void Receiver::run() {
  on_receiver_thread = true;
  ::pthread_setname_np(::pthread_self(), "castor-bulk-in");  // B11: one per worker, for `top -H` and the tests
  std::unordered_map<int, std::unique_ptr<Incoming>> links;  // by fd
  std::vector<int> ready, todo;  // B11: links whose turn ended with bytes left
  std::vector<std::unique_ptr<char[]>> spares;
  epoll_event events[64];
  auto close_link = [&](int fd) {
    auto it = links.find(fd);
    if (it != links.end() && it->second->pid > 0) forget_kept_segments_of(it->second->pid);  // SH4
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
    links.erase(fd);
    open_.fetch_sub(1);
  };
  while (!quit_) {
    {
      std::lock_guard<std::mutex> lock(mtx_);
      for (auto& in : added_) {
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLRDHUP;
        ev.data.fd = in->fd;
        int fd = in->fd;
        in->spares = &spares;
        links.emplace(fd, std::move(in));
        if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) close_link(fd);
      }
      added_.clear();
    }
    bool greeting = std::any_of(links.begin(), links.end(), [](auto& l) {
      return l.second->phase == Phase::greeting || l.second->phase == Phase::waiting_for_init;
    });
    int n = ::epoll_wait(epoll_fd_, events, 64, !ready.empty() ? 0 : greeting ? kGreetingTickMs : -1);
    if (quit_) break;
    todo.swap(ready);
    ready.clear();
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t count;
        (void)!::read(wake_fd_, &count, sizeof count);
        continue;
      }
      // epoll reports a hang-up even to a muted link. The event's bits first:
      // the common event (bytes to read) costs no lookup here.
      if (events[i].events & (EPOLLHUP | EPOLLERR)) {
        auto it = links.find(fd);
        if (it != links.end() && it->second->muted) {
          drop(*it->second, "closed during the greeting");
          close_link(fd);
          continue;
        }
      }
      todo.push_back(fd);
    }
    // Links still greeting: their deadline, or this worker's init, may have come.
    if (greeting)
      for (auto& l : links)
        if (l.second->phase == Phase::greeting || l.second->phase == Phase::waiting_for_init) todo.push_back(l.first);
    std::sort(todo.begin(), todo.end());
    todo.erase(std::unique(todo.begin(), todo.end()), todo.end());
    for (int fd : todo) {
      auto it = links.find(fd);
      if (it == links.end()) continue;
      auto& in = *it->second;
      if (!serve(in)) {
        close_link(fd);
        continue;
      }
      if (in.turn >= kTurnBytes) ready.push_back(fd);
      in.release_if_empty();
      // A link that waits for this worker's init reads nothing meanwhile: it
      // is off epoll until then (the tick looks at it), so that bytes a peer
      // sent early do not wake this thread again and again.
      bool waiting = in.phase == Phase::waiting_for_init;
      if (waiting != in.muted) {
        epoll_event ev{};
        ev.events = waiting ? 0 : EPOLLIN | EPOLLRDHUP;
        ev.data.fd = fd;
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
        in.muted = waiting;
      }
    }
    caf::logger::set_current_actor_system(nullptr);
  }
  for (auto& l : links) {
    if (l.second->pid > 0) forget_kept_segments_of(l.second->pid);  // SH4: this worker reads no more
    ::shutdown(l.first, SHUT_RDWR), ::close(l.first);
  }
  std::lock_guard<std::mutex> lock(mtx_);
  for (auto& in : added_) ::close(in->fd);
  added_.clear();
}

bool Receiver::serve(Incoming& in) {
  in.turn = 0;
  in.drained = false;
  if ((in.phase == Phase::greeting || in.phase == Phase::waiting_for_init) && Clock::now() >= in.deadline) {
    if (in.phase == Phase::greeting) return drop(in, "no greeting");
    return refuse(in, "this worker's init has not finished");
  }
  while (!in.ended && in.turn < kTurnBytes && step(in)) {
  }
  if (!in.ended) return true;
  if (in.phase == Phase::head && in.buffered() == 0) return false;  // closed between frames: the peer is done
  if (!in.greeted) return false;  // dropped, or refused, during the greeting: said so already
  return drop(in, in.phase == Phase::tensors ? "truncated tensor" : "truncated frame");
}

bool Receiver::drop(Incoming& in, const std::string& why) {
  if (!stopping_ && !quit_)
    std::fprintf(stderr, "castor[%s]: closed the bulk link from %s: %s\n", rt_.name().c_str(), in.from_name.c_str(),
                 why.c_str());
  in.ended = true;
  in.greeted = false;  // said: serve() adds nothing
  return false;
}

// Answer only after checking, so that a refused sender falls back to CAF
// instead of writing frames that would be lost (B4).
bool Receiver::refuse(Incoming& in, const std::string& why) {
  (void)in.answer(kRefused);
  return drop(in, why);
}

bool Receiver::step(Incoming& in) {
  switch (in.phase) {
    case Phase::greeting: return greet(in);
    case Phase::waiting_for_init: return answer_greeting(in);
    case Phase::head: return read_head(in);
    case Phase::tensors: return read_tensors(in);
  }
  return false;
}

// B3: which rank the link comes from, in which life, and from which process.
bool Receiver::greet(Incoming& in) {
  if (!in.fill(kGreetingBytes)) return in.ended ? drop(in, "no greeting") : false;
  if (peek<uint32_t>(in.buf.get() + in.begin) != kMagic) return drop(in, "not a castor bulk link");
  auto id_len = peek<uint32_t>(in.buf.get() + in.begin + 16);
  if (id_len > 4096) return drop(in, "no greeting");
  if (!in.fill(kGreetingBytes + id_len + 4)) return in.ended ? drop(in, "no greeting") : false;
  in.take<uint32_t>();
  in.from = in.take<int32_t>();
  in.version = in.take<uint32_t>();
  in.pid = in.take<int32_t>();
  in.take<uint32_t>();
  std::string identity(in.buf.get() + in.begin, id_len);
  in.begin += id_len;
  in.life = in.take<uint32_t>();
  in.same_host = rt_.opts.bulk_same_host && !identity.empty() && identity == host_identity() && in.pid > 0 &&
                 in.pid != ::getpid();
  in.phase = Phase::waiting_for_init;
  return true;
}

// The world is known once init is done; a peer may connect a moment
// earlier: the link waits (without a thread) until then or its deadline.
bool Receiver::answer_greeting(Incoming& in) {
  if (rt_.state.load() == RunState::starting) return false;
  const auto& world = rt_.world();
  auto peer = world.peer(in.from);
  if (!peer) return refuse(in, "rank " + std::to_string(in.from) + " is not a live peer of this world");
  in.from_name = "worker " + rt_.name_of(in.from);
  // B7 reads only from the process that joined as that rank (its pid came
  // with the join, not with this unauthenticated greeting).
  in.same_host = in.same_host && in.pid == world.member(in.from).pid;
  // Note [Rejoin] RJ5: this link belongs to the peer's current life only.
  const uint32_t incarnation = world.member(in.from).incarnation;
  if (in.life != incarnation) {  // B3, RJ6: a dead life (or one we have not taken back yet)
    if (in.life < incarnation) rt_.stats.stale_refused.fetch_add(1);
    return refuse(in, "it is incarnation " + std::to_string(in.life) + " of worker " + rt_.name_of(in.from) +
                          "; this world knows incarnation " + std::to_string(incarnation));
  }
  if (in.version != kWireProtocolVersion)
    return refuse(in, "wire protocol " + std::to_string(in.version) + ", expected " +
                          std::to_string(kWireProtocolVersion));
  if (!in.answer(in.same_host ? kSameHost : kOtherHost)) return drop(in, "closed during the greeting");
  in.sender = *peer;
  in.greeted = true;
  in.next_frame();
  return true;
}

// B1: a frame's head, tensor lengths and envelope (and B7's addresses) come
// into the buffer whole; its tensors are allocated before their bytes come.
bool Receiver::read_head(Incoming& in) {
  if (!in.fill(kHeadBytes)) return false;
  const char* p = in.buf.get() + in.begin;
  auto type = peek<uint8_t>(p);
  auto mode = peek<uint8_t>(p + 1);
  auto env_len = peek<uint64_t>(p + 2);
  auto count = peek<uint32_t>(p + 10);
  const bool views = mode == kViews;  // SH7 of Note [Shared tensors]
  if (type < kRequest || type > kLastFrameType || (mode != kBytesFollow && mode != kAddresses && !views) ||
      (mode != kBytesFollow && !in.same_host) || env_len > kMaxEnvelope || count > kMaxTensors)
    return drop(in, "malformed frame header");
  const size_t addresses = mode != kBytesFollow ? count : 0;
  const size_t tail = mode != kBytesFollow ? kAddressRecordBytes * addresses + kRevocationBytes : 0;
  if (!in.fill(kHeadBytes + 8 * size_t(count) + env_len + tail)) return false;
  in.begin += kHeadBytes;
  in.lengths.resize(count);
  if (count) std::memcpy(in.lengths.data(), in.buf.get() + in.begin, 8 * size_t(count));
  in.begin += 8 * size_t(count);
  in.message = empty_message(type);
  caf::binary_deserializer source{nullptr, in.buf.get() + in.begin, size_t(env_len)};
  in.begin += env_len;
  caf::error err;
  std::visit(
      [&](auto& m) {
        err = source(m);
        for (auto* v : values_in(m)) placeholders(*v, in.slots);
      },
      in.message);
  if (err || in.slots.size() != count) return drop(in, "malformed envelope");
  std::vector<uint64_t> from_addresses(addresses);
  std::vector<SharedRef> segments(addresses);  // SH3 of Note [Shared tensors]
  for (size_t i = 0; i < addresses; ++i) {
    const char* record = in.buf.get() + in.begin + kAddressRecordBytes * i;
    from_addresses[i] = peek<uint64_t>(record);
    segments[i].fd = peek<int64_t>(record + 8);
    segments[i].id = peek<uint64_t>(record + 16);
    segments[i].offset = peek<uint64_t>(record + 24);
  }
  uint64_t word_address = 0, word_seen = 0;  // B15
  if (addresses > 0) {
    word_address = peek<uint64_t>(in.buf.get() + in.begin + kAddressRecordBytes * addresses);
    word_seen = peek<uint64_t>(in.buf.get() + in.begin + kAddressRecordBytes * addresses + 8);
  }
  in.begin += tail;
  in.received.resize(count);
  std::vector<char> mapped(count, 0);
  std::string unmapped;  // SH7: why a frame of views cannot be delivered
  for (size_t i = 0; i < count; ++i) {
    auto ext = in.slots[i]->to_external();
    auto dtype = wire::from_wire_dtype(ext.dtype);
    if (!dtype) return drop(in, "unknown dtype");
    // Check the claimed length against the shape before allocating anything.
    uint64_t expected = c10::elementSize(*dtype);
    bool overflow = false;
    for (auto d : ext.sizes) {
      if (d < 0) return drop(in, "negative tensor size");
      overflow |= d != 0 && expected > UINT64_MAX / uint64_t(d);
      expected *= uint64_t(d);
    }
    if (overflow || expected != in.lengths[i]) return drop(in, "tensor length does not match its shape");
    if (expected > kMaxTensorBytes) return drop(in, "a tensor of " + std::to_string(expected) + " bytes");
    if (views && segments[i].fd < 0) return drop(in, "a frame of views names a tensor outside any segment");
    if (i < addresses && segments[i].fd >= 0) {  // SH4: a view of the sender's segment
      std::string why;
      in.received[i] = map_shared(in.pid, segments[i], ext.sizes, *dtype, expected, why);
      if ((mapped[i] = in.received[i].defined())) continue;
      if (views) {  // SH7: no bytes can follow; the message fails with why
        if (unmapped.empty())
          unmapped = "worker " + rt_.name() + " cannot map shared tensor " + std::to_string(i + 1) + " of " +
                     in.from_name + ": " + why;
        in.received[i] = at::empty({0}, *dtype);
        continue;
      }
      if (!in.warned_shared)
        std::fprintf(stderr, "castor[%s]: cannot map a shared tensor of %s (%s); it comes as a copy\n",
                     rt_.name().c_str(), in.from_name.c_str(), why.c_str());
      in.warned_shared = true;
    }
    try {
      in.received[i] = ReceiveBlocks::instance().empty(ext.sizes, *dtype, size_t(expected));
    } catch (const std::exception& e) {
      return drop(in, "cannot allocate " + std::to_string(expected) + " bytes: " + e.what());
    }
  }
  if (views) {  // SH7: nothing to copy, nothing revoked (no lease), no answer
    if (!unmapped.empty())
      std::visit([&](auto& m) { mark_malformed(m, unmapped); }, in.message);
    return deliver(in);
  }
  // B7: copy out of the sender's memory; if the kernel refuses, ask for the bytes.
  bool copied = addresses > 0;
  for (size_t i = 0; copied && i < count; ++i)
    if (!mapped[i]) copied = copy_from_process(in.pid, from_addresses[i], in.received[i].data_ptr(), in.lengths[i]);
  int why = errno;
  // B15: a copy that its sender revoked meanwhile may hold freed memory:
  // the bytes come on the socket instead (or never, from a sender that gave
  // up). A frame of views (SH4) is checked too: its sender gave it up, so
  // it must not be delivered.
  bool revoked = copied && !copy_still_valid(in.pid, word_address, word_seen);
  if (revoked) {
    copied = false;
    rt_.stats.copies_revoked.fetch_add(1, std::memory_order_relaxed);
  }
  for (size_t i = 0; !copied && i < count; ++i)  // bytes follow: into this side's memory, not a view
    if (mapped[i]) in.received[i] = at::empty_like(in.received[i]);
  // SH7: kMapped when every tensor that names a segment came as a view of it.
  bool all_named_mapped = false;
  for (size_t i = 0; i < addresses; ++i) {
    if (segments[i].fd < 0) continue;
    all_named_mapped = mapped[i] != 0;
    if (!all_named_mapped) break;
  }
  if (addresses > 0) {
    if (!in.answer(copied ? (all_named_mapped ? kMapped : kCopied) : revoked ? kCopyRevoked : kSendBytes))
      return drop(in, "closed while copying");
    if (!copied && !revoked) {
      in.same_host = false;
      std::fprintf(stderr, "castor[%s]: cannot read tensors from %s's memory (%s); its link sends bytes\n",
                   rt_.name().c_str(), in.from_name.c_str(), std::strerror(why));
    }
  }
  if (copied || count == 0) return deliver(in);
  in.phase = Phase::tensors;
  return true;
}

// B1: tensor bytes go straight into the tensors, after what was read ahead.
bool Receiver::read_tensors(Incoming& in) {
  while (in.tensor < in.received.size()) {
    auto* into = static_cast<char*>(in.received[in.tensor].data_ptr());
    uint64_t left = in.lengths[in.tensor] - in.offset;
    size_t ahead = size_t(std::min<uint64_t>(left, in.buffered()));
    if (ahead) std::memcpy(into + in.offset, in.buf.get() + in.begin, ahead);
    in.begin += ahead, in.offset += ahead, left -= ahead;
    while (left > 0) {
      if (in.turn >= kTurnBytes) return false;  // the other links' turn (B11)
      size_t got = 0;
      auto r = in.read_some(into + in.offset, size_t(std::min<uint64_t>(left, kTurnBytes)), got);
      if (r != Got::bytes) return in.ended = r == Got::ended, false;
      in.offset += got, left -= got;
    }
    ++in.tensor, in.offset = 0;
  }
  return deliver(in);
}

// B2: as if the peer's worker actor had sent it through CAF; B8: a
// well-formed call or reply is delivered from here, without waking the
// actor (malformed ones go to the actor, which reports them).
bool Receiver::deliver(Incoming& in) {
  std::optional<std::string> bad_bytes;
  for (size_t i = 0; i < in.received.size(); ++i) {
    // As on the CAF path (tensor_wire.cpp): the message is marked, and its
    // actor answers the caller with why.
    if (!bad_bytes) bad_bytes = wire::invalid_bool_bytes(in.received[i]);
    auto ext = in.slots[i]->to_external();
    if (ext.requires_grad) in.received[i].set_requires_grad(true);
    *in.slots[i] = Value(std::move(in.received[i]));
  }
  if (bad_bytes)
    std::visit([&](auto& m) { if (malformed_of(m).empty()) mark_malformed(m, *bad_bytes); }, in.message);
  (in.received.empty() ? rt_.stats.lane_received : rt_.stats.bulk_received).fetch_add(1, std::memory_order_relaxed);
  for (auto n : in.lengths) rt_.stats.bulk_bytes_received.fetch_add(n, std::memory_order_relaxed);
  const int32_t from = in.from;
  if (!rt_.world().alive(from) || rt_.world().member(from).incarnation != in.life) {  // B8, RJ5
    if (rt_.world().member(from).incarnation != in.life) rt_.stats.stale_refused.fetch_add(1);  // RJ6
    return drop(in, "worker " + rt_.name_of(from) + " was found dead");
  }
  std::string refused;
  std::visit(
      [&](auto& m) {
        using Message = std::decay_t<decltype(m)>;
        if (!malformed_of(m).empty()) {
          caf::send_as(in.sender, rt_.actor, std::move(m));
        } else if constexpr (std::is_same_v<Message, CallRequest>) {
          if (m.caller != from) {
            refused = "a call from rank " + std::to_string(m.caller) + " on its link";
            return;
          }
          rt_.stats.count(MessageType::call_request);
          deliver_request(rt_, std::move(m), caf::actor_cast<caf::strong_actor_ptr>(in.sender), nullptr);
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
      in.message);
  if (!refused.empty()) return drop(in, refused);
  in.next_frame();
  return true;
}

}  // namespace castor::detail::bulk
