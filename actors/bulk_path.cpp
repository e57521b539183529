// The bulk path for messages with large tensors.
#include "actors/bulk_path.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include <ATen/ATen.h>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/logger.hpp>
#include <caf/send.hpp>

#include "actors/errors.hpp"
#include "actors/runtime.hpp"
#include "actors/transport/dialer.hpp"
#include "actors/transport/door.hpp"
#include "actors/transport/sockets.hpp"
#include "actors/transport/transport.hpp"
#include "messages/rendezvous.hpp"
#include "messages/tensor_wire.hpp"

namespace castor::detail {

// Note [Bulk path]
// ~~~~~~~~~~~~~~~~
// BASP copies a message into its buffers, frames it, and copies it out again
// on the other side; for tensors of megabytes that costs more than the
// network. So a call or reply to another worker that carries a tensor of at
// least WorkerOptions::bulk_threshold bytes goes on the bulk link instead:
//
//  B1. Frame: the message's CAF encoding (its envelope), in which each large
//      tensor is an ExternalTensor placeholder (dtype, sizes), then the raw
//      bytes of those tensors in placeholder order (depth-first). The sender
//      writes from the tensors' own memory; the receiver reads straight into
//      the tensors it allocates. Small tensors stay inside the envelope.
//  B2. The receiver hands the rebuilt message to its worker actor as sent by
//      the peer's worker actor, so every handler, reply path and counter
//      (Note [Graceful shutdown]) sees what it would see through CAF.
//  B3. One TCP connection per ordered pair, opened by the sender on first
//      use through the receiver's door (Note [The door]: the greeting with
//      the cluster secret comes first); then its first bytes say which rank
//      it comes from, checked against the world. A link keeps its messages in order; no protocol assumes
//      order between the bulk link and CAF's link (see Note [RRef protocol]).
//  B4. A link that cannot be opened sends nothing: the message goes through
//      CAF as before (chunked above max_message_bytes), so the bulk path
//      never makes a message undeliverable. A link that breaks while sending
//      fails the call at once, naming the peer; a broken link is not reused.
//  B5. Malformed frames close the link with a line naming the peer; the
//      worker keeps serving (see Note [Hostile input]).
//  B6. With TLS there is no bulk link (yet): castor never sends plain bytes
//      in a TLS cluster, and the bulk links do not speak TLS.
//  B7. Same host: when the receiver finds in the greeting that the sender
//      runs on its machine and in its pid namespace (same boot id, same
//      namespace), the frame carries the tensors' addresses instead of their
//      bytes and the receiver copies them straight out of the sender's memory
//      (process_vm_readv: one copy, kernel to kernel, no shared segment that
//      a crash could leave behind). The sender keeps the tensors alive until
//      the receiver's one-byte answer: 'A' copied, or 'N' (not permitted,
//      e.g. ptrace restrictions): then the bytes follow on the socket as in
//      B1 and the link stays on TCP. Values stay copies either way. The
//      receiver copies only from the pid the sender's rank joined with.
//      From 8 MiB the copy is split across two threads (copy_from_process).

namespace {

constexpr uint32_t kMagic = 0x31425343;  // "CSB1"
constexpr uint8_t kRequest = 1, kReply = 2;
constexpr uint8_t kBytesFollow = 0, kAddresses = 1;  // B1 or B7
constexpr char kCopied = 'A', kSendBytes = 'N', kSameHost = 'C', kOtherHost = 'T', kRefused = 'R';
constexpr int kGreetingLimitSeconds = 5;
constexpr uint64_t kMaxTensorBytes = uint64_t(1) << 46;  // 64 TiB: beyond any machine, far from overflow

// This machine and pid namespace (B7): the kernel's boot id and the namespace's inode.
const std::string& host_identity() {
  static const std::string id = [] {
    std::string boot;
    if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
      char buf[64] = {0};
      if (std::fgets(buf, sizeof buf, f)) boot = buf;
      std::fclose(f);
    }
    char ns[128] = {0};
    auto n = ::readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    if (boot.empty() || n <= 0) return std::string();
    return boot + "/" + std::string(ns, size_t(n));
  }();
  return id;
}
constexpr uint64_t kMaxEnvelope = uint64_t(1) << 30;
constexpr uint32_t kMaxTensors = 1 << 20;

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

template <class T>
void put(std::vector<char>& buf, T x) {
  auto at = buf.size();
  buf.resize(at + sizeof x);
  std::memcpy(buf.data() + at, &x, sizeof x);
}

void tune(int fd) {
  int one = 1, big = 4 << 20;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
}

// Depth-first, the order of B1 on both sides.
void extract(Value& v, size_t threshold, IdGenerator<TransferId>& ids, std::vector<at::Tensor>& out) {
  if (v.is_list()) {
    for (auto& x : v.to_list()) extract(x, threshold, ids, out);
    return;
  }
  if (!v.is_tensor() || wire::wire_bytes(v.to_tensor()) < threshold) return;
  const auto& t = v.to_tensor();
  ExternalTensor ext;
  ext.transfer = ids.next();
  ext.dtype = int8_t(*wire::to_wire_dtype(t.scalar_type()));
  ext.sizes = t.sizes().vec();
  ext.requires_grad = t.requires_grad();
  out.push_back(t.detach().contiguous());
  v = Value(std::move(ext));
}

void placeholders(Value& v, std::vector<Value*>& out) {
  if (v.is_list()) {
    for (auto& x : v.to_list()) placeholders(x, out);
  } else if (v.is_external()) {
    out.push_back(&v);
  }
}

// Received tensors' memory, kept for reuse when they die. A fresh block of
// megabytes costs a page fault (and the kernel zeroing the page) every 4 KiB
// while recv() fills it: about a third of a 64 MiB echo on loopback. glibc
// returns such blocks to the kernel at once (they are above its largest mmap
// threshold), so castor keeps a few itself. Process-wide, because tensors
// outlive workers; bounded, so a burst of large messages does not pin memory.
class ReceiveBlocks {
 public:
  static constexpr size_t kMaxCached = size_t(512) << 20;

  static ReceiveBlocks& instance() {
    static auto* blocks = new ReceiveBlocks;  // never destroyed: tensors may die at exit
    return *blocks;
  }

  at::Tensor empty(const std::vector<int64_t>& sizes, at::ScalarType dtype, size_t bytes) {
    auto rounded = (bytes + 4095) / 4096 * 4096;
    void* p = take(rounded);
    if (!p) p = std::aligned_alloc(4096, rounded);
    if (!p) throw std::bad_alloc();
    return at::from_blob(p, sizes, [this, rounded](void* q) { give(q, rounded); }, at::TensorOptions().dtype(dtype));
  }

 private:
  void* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mtx_);
    auto it = free_.find(bytes);
    if (it == free_.end()) return nullptr;
    void* p = it->second;
    free_.erase(it);
    cached_ -= bytes;
    return p;
  }
  void give(void* p, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mtx_);
      if (cached_ + bytes <= kMaxCached) {
        free_.emplace(bytes, p);
        cached_ += bytes;
        return;
      }
    }
    std::free(p);
  }
  std::mutex mtx_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0;
};

// process_vm_readv in a loop (it may copy less than asked).
bool copy_span(int pid, uint64_t address, void* into, uint64_t n) {
  auto* dst = static_cast<char*>(into);
  while (n > 0) {
    iovec local{dst, n}, remote{reinterpret_cast<void*>(address), n};
    auto r = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    dst += r, address += uint64_t(r), n -= uint64_t(r);
  }
  return true;
}

// B7's copy. A large one runs on two threads: one core's copy does not use
// up the memory bandwidth (castor-bench rpc: echo_64MiB_vs_memcpy_floor_x).
bool copy_from_process(int pid, uint64_t address, void* into, uint64_t n) {
  constexpr uint64_t kSplitFrom = uint64_t(8) << 20;
  if (n < kSplitFrom || std::thread::hardware_concurrency() < 2) return copy_span(pid, address, into, n);
  uint64_t half = (n / 2) & ~uint64_t(4095);
  bool second_ok = false;
  std::thread second([&] { second_ok = copy_span(pid, address + half, static_cast<char*>(into) + half, n - half); });
  bool first_ok = copy_span(pid, address, into, half);
  second.join();
  return first_ok && second_ok;
}

bool has_large(const Value& v, size_t threshold) {
  if (v.is_list()) {
    for (auto& x : v.to_list())
      if (has_large(x, threshold)) return true;
    return false;
  }
  return v.is_tensor() && wire::wire_bytes(v.to_tensor()) >= threshold;
}

}  // namespace

struct BulkPath::Outgoing {
  uint8_t type = 0;
  std::vector<char> head;  // type, envelope length, tensor count, tensor lengths, envelope
  std::vector<at::Tensor> tensors;
  CallId call;  // requests: failed at once if the link breaks (B4)
};

struct BulkPath::Link {
  WorkerId to = -1;
  int fd = -1;
  bool broken = false;  // B4: never reused
  bool same_host = false;  // B7: send addresses, not bytes
  std::mutex mtx;
  std::condition_variable cv;
  std::deque<Outgoing> queue;
  std::thread writer;
};

BulkPath::BulkPath(Runtime& rt) : rt_(rt) {
  // B3: the bulk port is behind the door like every port castor listens on
  // (Note [The door]); a connection reaches a reader only once it greeted.
  try {
    port_ = rt.transport->door().listen(rt.opts.host, 0, false, door::Purpose::bulk, false,
                                        [this](Admitted a) { start_reader(a.fd); });
  } catch (const std::exception& e) {
    throw UnreachableError(make_error(ErrorKind::Unreachable, rt.opts.name,
                                      "worker " + rt.opts.name + ": cannot open the bulk port on " + rt.opts.host +
                                          ": " + e.what()));
  }
}

BulkPath::~BulkPath() { stop(); }

bool BulkPath::wants(const Value& value) const {
  return rt_.opts.bulk_threshold > 0 && has_large(value, rt_.opts.bulk_threshold);
}

bool BulkPath::wants(const std::vector<Value>& values) const {
  for (auto& v : values)
    if (wants(v)) return true;
  return false;
}

BulkPath::Link* BulkPath::link_to(WorkerId to) {
  // Until init is done the peers' bulk ports may still be filled in (Note
  // [Masterless join]); a call served that early goes through CAF.
  if (rt_.state.load() == RunState::starting) return nullptr;
  Link* link;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    if (stopping_ || to < 0 || size_t(to) >= rt_.world.size() || rt_.world[size_t(to)].bulk_port == 0) return nullptr;
    if (links_.size() < rt_.world.size()) links_.resize(rt_.world.size());
    if (!links_[size_t(to)]) {
      links_[size_t(to)] = std::make_unique<Link>();
      links_[size_t(to)]->to = to;
    }
    link = links_[size_t(to)].get();
  }
  std::lock_guard<std::mutex> lock(link->mtx);
  if (link->broken) return nullptr;
  if (link->fd >= 0) return link;
  const auto& peer = rt_.world[size_t(to)];
  std::string why;
  auto dial_opts = rt_.transport->dial_options();
  dial_opts.tls = nullptr;  // B6: there is no bulk link with TLS
  auto dialed = dial(dial_opts, peer.host, peer.bulk_port, door::Purpose::bulk,
                     net::Clock::now() + std::chrono::milliseconds(3000));
  int fd = dialed.fd;
  if (fd < 0) why = dialed.error;
  if (fd >= 0) {
    net::set_nonblocking(fd, false);
    tune(fd);
    std::vector<char> hello;
    put(hello, kMagic);
    put(hello, int32_t(rt_.rank));
    put(hello, uint32_t(kWireProtocolVersion));
    put(hello, int32_t(::getpid()));
    put(hello, uint32_t(host_identity().size()));
    hello.insert(hello.end(), host_identity().begin(), host_identity().end());
    // The receiver answers once its own init is done (at most kGreetingLimit);
    // a link cut now must not hold this thread (and the link) for longer.
    timeval limit{kGreetingLimitSeconds, 0}, none{0, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    char answer = 0;
    if (!write_all(fd, hello.data(), hello.size()) || !read_all(fd, &answer, 1))
      ::close(fd), fd = -1, why = "no answer to the greeting";
    else if (answer != kSameHost && answer != kOtherHost)
      ::close(fd), fd = -1, why = "refused by the receiver";
    if (fd >= 0) {
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
    }
    link->same_host = answer == kSameHost && rt_.opts.bulk_same_host;
  }
  if (fd < 0) {
    link->broken = true;
    std::fprintf(stderr, "castor[%s]: no bulk link to worker %s (%s:%u: %s); its large messages go through CAF\n",
                 rt_.name.c_str(), peer.name.c_str(), peer.host.c_str(), unsigned(peer.bulk_port), why.c_str());
    return nullptr;
  }
  link->fd = fd;
  link->writer = std::thread([this, link] {
    for (;;) {
      Outgoing out;
      {
        std::unique_lock<std::mutex> lock(link->mtx);
        link->cv.wait(lock, [&] { return !link->queue.empty() || stopping_; });
        if (link->queue.empty()) return;
        out = std::move(link->queue.front());
        link->queue.pop_front();
      }
      uint64_t bytes = 0;
      for (auto& t : out.tensors) bytes += wire::wire_bytes(t);
      errno = 0;
      bool ok = true, send_bytes = true;
      if (link->same_host) {  // B7: addresses, then wait for the receiver's copy
        out.head[1] = char(kAddresses);
        for (auto& t : out.tensors) put(out.head, uint64_t(reinterpret_cast<uintptr_t>(t.data_ptr())));
        char answer = 0;
        ok = write_all(link->fd, out.head.data(), out.head.size()) && read_all(link->fd, &answer, 1) &&
             (answer == kCopied || answer == kSendBytes);
        send_bytes = answer == kSendBytes;
        if (send_bytes) link->same_host = false;
      } else {
        ok = write_all(link->fd, out.head.data(), out.head.size());
      }
      for (size_t i = 0; ok && send_bytes && i < out.tensors.size(); ++i)
        ok = write_all(link->fd, out.tensors[i].data_ptr(), wire::wire_bytes(out.tensors[i]));
      if (ok) {
        rt_.stats.bulk_sent.fetch_add(1, std::memory_order_relaxed);
        rt_.stats.bulk_bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
        continue;
      }
      // B4: this message and everything queued behind it fail now: our
      // requests here, our replies at the caller (through CAF). A request
      // failed here was counted as sent and will never be received: uncount
      // it, or termination detection would wait for it forever.
      auto why = "the bulk link to worker " + rt_.name_of(link->to) + " broke" +
                 (errno ? std::string(": ") + std::strerror(errno) : std::string());
      std::deque<Outgoing> lost;
      {
        std::lock_guard<std::mutex> lock(link->mtx);
        link->broken = true;
        lost.swap(link->queue);
      }
      lost.push_front(std::move(out));
      if (!stopping_) std::fprintf(stderr, "castor[%s]: %s\n", rt_.name.c_str(), why.c_str());
      for (auto& m : lost) {
        if (m.type == kRequest) {
          rt_.counters.sent.fetch_sub(1, std::memory_order_relaxed);
          if (auto call = rt_.pending.take(m.call))
            call->done(Outcome::failure(make_error(ErrorKind::Unreachable, rt_.name_of(link->to), why)));
        } else if (size_t(link->to) < rt_.peer_handles.size() && rt_.peer_handles[size_t(link->to)]) {
          CallReply failed;
          failed.id = m.call;
          failed.error = make_error(ErrorKind::Unreachable, rt_.name, "worker " + rt_.name + " could not send the result: " + why);
          caf::anon_send(rt_.peer_handles[size_t(link->to)], std::move(failed));
          caf::logger::set_current_actor_system(nullptr);
        }
      }
      return;
    }
  });
  return link;
}

BulkPath::Outgoing BulkPath::frame(uint8_t type, std::vector<char> envelope, std::vector<at::Tensor> tensors,
                                   CallId call) {
  Outgoing out;
  out.type = type;
  put(out.head, type);
  put(out.head, kBytesFollow);  // the writer may switch it to kAddresses (B7)
  put(out.head, uint64_t(envelope.size()));
  put(out.head, uint32_t(tensors.size()));
  for (auto& t : tensors) put(out.head, uint64_t(wire::wire_bytes(t)));
  out.head.insert(out.head.end(), envelope.begin(), envelope.end());
  out.tensors = std::move(tensors);
  out.call = call;
  return out;
}

namespace {

// The CAF encoding of `msg`, its large tensors already replaced (B1).
template <class Message>
std::vector<char> envelope_of(Message& msg) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  if (auto err = sink(msg)) throw std::runtime_error("cannot encode a message for the bulk link");
  return buf;
}

}  // namespace

// Under the link's lock from the check to the push: a link that breaks
// meanwhile leaves the message untouched for CAF (B4).
bool BulkPath::push(WorkerId to, uint8_t type, CallId id, const std::vector<Value*>& values,
                    const std::function<std::vector<char>()>& encode) {
  auto* link = link_to(to);
  if (!link) return false;
  {
    std::lock_guard<std::mutex> lock(link->mtx);
    if (link->broken) return false;
    std::vector<at::Tensor> tensors;
    for (auto* v : values) extract(*v, rt_.opts.bulk_threshold, rt_.transfer_ids, tensors);
    link->queue.push_back(frame(type, encode(), std::move(tensors), id));
  }
  link->cv.notify_one();
  return true;
}

bool BulkPath::try_send(WorkerId to, CallRequest& msg) {
  std::vector<Value*> values;
  for (auto& a : msg.args) values.push_back(&a);
  return push(to, kRequest, msg.id, values, [&msg] { return envelope_of(msg); });
}

bool BulkPath::try_send(WorkerId to, CallReply& msg) {
  return push(to, kReply, msg.id, {&msg.result}, [&msg] { return envelope_of(msg); });
}

// On the door's thread, for each admitted bulk connection.
void BulkPath::start_reader(int fd) {
  net::set_nonblocking(fd, false);
  tune(fd);
  std::lock_guard<std::mutex> lock(mtx_);
  // Readers whose connection ended: join them and close their sockets, so
  // that reconnecting peers do not pile up threads and fds.
  for (auto it = readers_.begin(); it != readers_.end();) {
    if (!it->done->load()) {
      ++it;
      continue;
    }
    it->thread.join();
    ::close(it->fd);
    it = readers_.erase(it);
  }
  // A peer opens one link to us; a cluster without a secret lets strangers
  // greet, so they may not take more threads than the world's links.
  if (stopping_ || readers_.size() >= 2 * size_t(rt_.opts.world_size) + 8) {
    if (!stopping_)
      std::fprintf(stderr, "castor[%s]: closed a bulk link from %s: %zu links are open already\n",
                   rt_.name.c_str(), net::peer_address(fd).c_str(), readers_.size());
    ::close(fd);
    return;
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  readers_.push_back(Reader{std::thread([this, fd, done] {
                              read_loop(fd);
                              done->store(true);
                            }),
                            fd, done});
}

void BulkPath::read_loop(int fd) {
  std::string from_name = "an unknown peer";
  auto drop = [&](const std::string& why) {
    if (!stopping_)
      std::fprintf(stderr, "castor[%s]: closed the bulk link from %s: %s\n", rt_.name.c_str(), from_name.c_str(),
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
  if (!read_all(fd, &magic, 4) || !read_all(fd, &from, 4) || !read_all(fd, &version, 4)) return drop("no greeting");
  if (magic != kMagic) return drop("not a castor bulk link");
  if (!read_all(fd, &pid, 4) || !read_all(fd, &id_len, 4) || id_len > 4096) return drop("no greeting");
  std::string identity(id_len, '\0');
  if (!read_all(fd, identity.data(), id_len)) return drop("no greeting");
  bool same_host = rt_.opts.bulk_same_host && !identity.empty() && identity == host_identity() && pid > 0 &&
                   pid != ::getpid();
  // The world is known once init is done; a peer may connect a moment
  // earlier. Answer only after checking, so that a refused sender falls back
  // to CAF instead of writing frames that would be lost (B4).
  auto refuse = [&](const std::string& why) {
    char no = kRefused;
    (void)write_all(fd, &no, 1);
    drop(why);
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kGreetingLimitSeconds - 1);
  while (rt_.state.load() == RunState::starting && !stopping_ && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (rt_.state.load() == RunState::starting) return refuse("this worker's init has not finished");
  if (from < 0 || size_t(from) >= rt_.peer_handles.size() || from == rt_.rank || !rt_.peer_handles[size_t(from)])
    return refuse("rank " + std::to_string(from) + " is not a peer of this world");
  from_name = "worker " + rt_.name_of(from);
  // B7 reads only from the process that joined as that rank (its pid came
  // with the join, not with this unauthenticated greeting).
  same_host = same_host && pid == rt_.world[size_t(from)].pid;
  if (version != kWireProtocolVersion)
    return refuse("wire protocol " + std::to_string(version) + ", expected " + std::to_string(kWireProtocolVersion));
  char answer = same_host ? kSameHost : kOtherHost;
  if (!write_all(fd, &answer, 1)) return drop("closed during the greeting");
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
  auto sender = rt_.peer_handles[size_t(from)];
  for (;;) {
    uint8_t type = 0, mode = 0;
    uint64_t env_len = 0;
    uint32_t count = 0;
    if (!read_all(fd, &type, 1)) return (void)::shutdown(fd, SHUT_RDWR);  // closed between frames: the peer is done
    if (!read_all(fd, &mode, 1) || !read_all(fd, &env_len, 8) || !read_all(fd, &count, 4))
      return drop("truncated frame");
    if ((type != kRequest && type != kReply) || (mode != kBytesFollow && mode != kAddresses) ||
        (mode == kAddresses && !same_host) || env_len > kMaxEnvelope || count > kMaxTensors)
      return drop("malformed frame header");
    std::vector<uint64_t> lengths(count);
    std::vector<char> env(env_len);
    if (!read_all(fd, lengths.data(), 8 * size_t(count)) || !read_all(fd, env.data(), env.size()))
      return drop("truncated frame");
    CallRequest req;
    CallReply reply;
    std::vector<Value*> slots;
    caf::binary_deserializer source{nullptr, env};
    caf::error err;
    if (type == kRequest) {
      err = source(req);
      for (auto& a : req.args) placeholders(a, slots);
    } else {
      err = source(reply);
      placeholders(reply.result, slots);
    }
    if (err || slots.size() != count) return drop("malformed envelope");
    std::vector<uint64_t> addresses(mode == kAddresses ? count : 0);
    if (!addresses.empty() && !read_all(fd, addresses.data(), 8 * size_t(count))) return drop("truncated frame");
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
      if (!write_all(fd, &reply_byte, 1)) return drop("closed while copying");
      if (!copied) {
        same_host = false;
        std::fprintf(stderr, "castor[%s]: cannot read tensors from %s's memory (%s); its link sends bytes\n",
                     rt_.name.c_str(), from_name.c_str(), std::strerror(errno));
      }
    }
    for (size_t i = 0; i < count; ++i) {
      if (!copied && !read_all(fd, received[i].data_ptr(), lengths[i])) return drop("truncated tensor");
      auto ext = slots[i]->to_external();
      if (ext.requires_grad) received[i].set_requires_grad(true);
      *slots[i] = Value(std::move(received[i]));
    }
    rt_.stats.bulk_received.fetch_add(1, std::memory_order_relaxed);
    for (auto n : lengths) rt_.stats.bulk_bytes_received.fetch_add(n, std::memory_order_relaxed);
    // B2: as if the peer's worker actor had sent it through CAF.
    if (type == kRequest)
      caf::send_as(sender, rt_.actor, std::move(req));
    else
      caf::send_as(sender, rt_.actor, std::move(reply));
    caf::logger::set_current_actor_system(nullptr);
  }
}

void BulkPath::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    if (stopping_.exchange(true)) return;
    for (auto& r : readers_) ::shutdown(r.fd, SHUT_RDWR);
    for (auto& l : links_) {
      if (!l) continue;
      std::lock_guard<std::mutex> link_lock(l->mtx);
      if (l->fd >= 0) ::shutdown(l->fd, SHUT_RDWR);
      l->cv.notify_all();
    }
  }
  for (auto& l : links_)
    if (l && l->writer.joinable()) l->writer.join();
  for (auto& r : readers_) r.thread.join();
  for (auto& l : links_)
    if (l && l->fd >= 0) ::close(l->fd);
  for (auto& r : readers_) ::close(r.fd);
}

}  // namespace castor::detail
