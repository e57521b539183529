// The sending side of the bulk path: opening a link (B3, B7), its writer
// thread (B1), and what a broken link does to the messages it held (B4).
#include "actors/transport/bulk/bulk_link.hpp"

#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <system_error>
#include <vector>

#include <caf/logger.hpp>
#include <caf/send.hpp>

#include "actors/runtime/runtime.hpp"
#include "actors/transport/bulk/bulk_receiver.hpp"
#include "actors/transport/bulk/same_host.hpp"
#include "actors/transport/bulk/shared_segments.hpp"
#include "actors/transport/dialer.hpp"
#include "actors/transport/sockets.hpp"
#include "actors/transport/transport.hpp"
#include "messages/rendezvous.hpp"
#include "messages/tensor_wire.hpp"

namespace castor::detail {

using namespace bulk;

namespace {

// B11: writer threads of one worker, and how long one waits idle before it ends.
constexpr int kMaxWriters = 32;
constexpr auto kWriterIdle = std::chrono::seconds(1);
// B11: small messages to a peer before they open the pair's link.
constexpr uint32_t kOpenAfter = 8;
// B9: what the writer sends in one write when small frames wait together.
constexpr size_t kMaxBatchFrames = 64;
constexpr size_t kMaxBatchBytes = 256 * 1024;
// B12: batches a sending thread takes from the queue after its own frame
// before it leaves the rest to the writer (so one caller's wait stays short).
constexpr int kMaxCallerBatches = 4;

// B4: a message a broken link did not send fails now: our request here, our
// reply at the caller (through CAF). A request failed here was counted as
// sent and will never be received: it is uncounted, or termination detection
// would wait for it forever.
void fail_unsent(Runtime& rt, WorkerId to, Frame& m, const std::string& why) {
  if (m.type != kRequest && m.type != kReply) {  // B10: a protocol message goes through CAF after all
    if (auto peer = rt.world().peer(to))
      caf::actor_cast<caf::actor>(*peer)->enqueue(nullptr, caf::make_message_id(), std::move(m.fallback), nullptr);
    return;  // a dead peer: as CAF would, it is dropped (its counts go with the peer)
  }
  if (m.type == kRequest) {
    rt.counters.sent.fetch_sub(1, std::memory_order_relaxed);
    if (auto call = rt.pending.take(m.call))
      call->done(Outcome::failure(make_error(ErrorKind::Unreachable, rt.name_of(to), why)));
    return;
  }
  auto peer = rt.world().peer(to);
  if (!peer) return;  // dead: its caller learns it from its own liveness
  CallReply failed;
  failed.id = m.call;
  failed.error = make_error(ErrorKind::Unreachable, rt.name(), "worker " + rt.name() + " could not send the result: " + why);
  caf::anon_send(*peer, std::move(failed));
  caf::logger::set_current_actor_system(nullptr);
}

// Sends one frame: its head, then (B7) the tensors' addresses and the
// receiver's answer, or (B1) their bytes (also after a B7 copy that was
// revoked meanwhile: B15). B14: a head that the sending thread wrote
// already is not written again.
bool send_frame(Runtime& rt, BulkPath::Link& link, Frame& out) {
  if (out.head_error) {
    errno = out.head_error;
    return false;
  }
  if (out.views_only) {  // SH7: the head of addresses, made at the push; nothing to wait for
    if (!link.stream.write_all(out.head.data(), out.head.size())) return false;
    rt.stats.views_unanswered.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  bool send_bytes = true;
  if (link.same_host && !out.tensors.empty()) {  // B7: addresses, then wait for the receiver's copy
    if (!out.head_written) {
      add_addresses(out);
      if (!link.stream.write_all(out.head.data(), out.head.size())) return false;
    }
    char answer = 0;
    if (!link.stream.read_all(&answer, 1) ||
        (answer != kCopied && answer != kMapped && answer != kSendBytes && answer != kCopyRevoked)) {
      out.lease.give_up();  // B15: now, before the caller hears of the failure and may reuse its tensors
      return false;
    }
    out.lease.answered();
    send_bytes = answer != kCopied && answer != kMapped;
    out.mapped_answer = answer == kMapped;
    if (answer == kSendBytes) link.same_host = false;
  } else if (!link.stream.write_all(out.head.data(), out.head.size())) {
    return false;
  }
  for (size_t i = 0; send_bytes && i < out.tensors.size(); ++i)
    if (!link.stream.write_all(out.tensors[i].data_ptr(), wire::wire_bytes(out.tensors[i]))) return false;
  return true;
}

}  // namespace

bool BulkPath::Link::all_mapped_by_peer(const Frame& frame) {
  if (peer_mapped.empty()) return false;
  std::vector<PeerMapped*> named;
  for (const auto& t : frame.tensors) {
    auto ref = shared_ref_of(t);
    auto it = ref.fd >= 0 ? peer_mapped.find(ref.id) : peer_mapped.end();
    if (it == peer_mapped.end()) return false;
    named.push_back(&it->second);
  }
  for (auto* p : named) p->last_frame = frame.number;
  return true;
}

void BulkPath::Link::keep_mapped(const Frame& frame) {
  for (const auto& t : frame.tensors) {
    auto ref = shared_ref_of(t);
    if (ref.fd < 0) continue;
    auto& kept = peer_mapped[ref.id];
    if (!kept.storage) {
      kept.storage = t.storage();
      kept.bytes = kept.storage.nbytes();
      peer_mapped_bytes += kept.bytes;
    }
    kept.last_frame = std::max(kept.last_frame, frame.number);
  }
  // The peer has read every frame before this one (one link, read in
  // order): a segment that no later frame of views names may go. The
  // least recently named go first.
  while (peer_mapped.size() > kMaxPeerMapped || peer_mapped_bytes > kMaxPeerMappedBytes) {
    auto oldest = peer_mapped.end();
    for (auto it = peer_mapped.begin(); it != peer_mapped.end(); ++it)
      if (it->second.last_frame <= frame.number &&
          (oldest == peer_mapped.end() || it->second.last_frame < oldest->second.last_frame))
        oldest = it;
    if (oldest == peer_mapped.end()) break;  // all named since: they go with later answers
    peer_mapped_bytes -= oldest->second.bytes;
    peer_mapped.erase(oldest);
  }
}

BulkPath::Link* BulkPath::link_to(WorkerId to, Open how) {
  // Until init is done the peers' bulk ports may still be filled in (Note
  // [Masterless join]); a call served that early goes through CAF.
  if (rt_.state.load() == RunState::starting) return nullptr;
  Link* link;
  const auto& world = rt_.world();
  {
    std::lock_guard<std::mutex> lock(mtx_);
    if (stopping_ || !world.has(to) || world.member(to).bulk_port == 0) return nullptr;
    if (links_.size() < world.size()) links_.resize(world.size());
    auto& slot = links_[size_t(to)];
    // RJ5 of Note [Rejoin]: a link to an earlier life of the peer is never
    // reused; it is shut and kept until stop() joins its writer.
    if (slot && slot->incarnation < world.member(to).incarnation) {
      {
        std::lock_guard<std::mutex> old_lock(slot->mtx);
        slot->break_off();  // a dial to the earlier life ends now
      }
      retired_.push_back(std::move(slot));
    }
    if (!slot) {
      slot = std::make_unique<Link>();
      slot->to = to;
      slot->incarnation = world.member(to).incarnation;
    }
    link = links_[size_t(to)].get();
  }
  std::unique_lock<std::mutex> lock(link->mtx);
  // Again under the link's lock: a stop() since the check above has passed
  // this link already, and would never join a writer started now.
  if (link->broken || stopping_) return nullptr;
  if (link->stream.fd() >= 0) return link;
  if (dials_over_) return nullptr;  // stop_dialing(): CAF takes it
  // B11: small messages (and protocol messages) open the link only once
  // kOpenAfter of them went through CAF to this peer; a large call or reply
  // opens it at once.
  if (how == Open::after_some && ++link->sent_unopened < kOpenAfter) return nullptr;
  // B8: the link's writer dials, so that only a sender that chose to wait
  // (Open::and_wait: never a reader, a CAF thread or a runner) waits for it.
  if (!start_writer(*link)) return nullptr;
  if (how != Open::and_wait) return nullptr;
  link->cv.wait(lock, [&] { return link->stream.fd() >= 0 || link->broken || stopping_ || dials_over_; });
  return link->stream.fd() >= 0 && !link->broken && !stopping_ ? link : nullptr;
}

// B11: under the link's lock. A link's writer runs while it has work (the
// dial, queued frames) and ends when idle, and at most kMaxWriters run at
// once in a worker: an all-to-all round among 128 workers opens 127 links
// from each, and a thread for each ran the host out of threads. A link that
// finds no writer free sends through CAF meanwhile (B4).
bool BulkPath::start_writer(Link& link) {
  if (link.writer_running) return true;
  if (writers_.load() >= kMaxWriters) return false;
  // One that ended idle: it no longer takes the link's lock, so this is short.
  if (link.writer.joinable()) link.writer.join();
  writers_.fetch_add(1);
  try {
    link.writer = std::thread([this, &link] {
      ::pthread_setname_np(::pthread_self(), "castor-bulk-out");
      if (link.stream.fd() >= 0 || open(link)) write_loop(link);
      writers_.fetch_sub(1);
    });
  } catch (const std::system_error& e) {
    writers_.fetch_sub(1);  // out of threads (a big world on a small host): CAF carries on (B4)
    link.broken = true;
    std::fprintf(stderr, "castor[%s]: no bulk link to worker %s: cannot start its thread (%s); its messages go through CAF\n",
                 rt_.name().c_str(), rt_.name_of(link.to).c_str(), e.what());
    return false;
  }
  link.writer_running = true;
  return true;
}

// On the link's writer thread, before it writes: the door's greeting (and
// the TLS handshake in a TLS cluster: B6), then the bulk link's own greeting
// (B3); the link's lock only to install the result.
bool BulkPath::open(Link& link) {
  auto peer = rt_.world().member(link.to);  // a copy: the world may move on meanwhile
  // B8: the dial's socket is known to stop_dialing() and peer_down(), which
  // shut it to end the dial (and the greeting below) at once.
  auto watch = [this, &link](int socket) {
    std::lock_guard<std::mutex> lock(link.mtx);
    link.dialing = socket;
    // stop_dialing(), peer_down() or a rejoin (RJ5) came first.
    if (socket >= 0 && (dials_over_ || link.broken)) ::shutdown(socket, SHUT_RDWR);
  };
  auto options = rt_.transport->dial_options();
  options.watch = watch;
  auto dialed = dial(options, peer.host, peer.bulk_port, door::Purpose::bulk,
                     net::Clock::now() + std::chrono::milliseconds(3000));
  int fd = dialed.fd;
  std::string why = dialed.error;
  Stream stream;  // empty (no socket) until the dial's session has its record buffer
  try {
    stream = Stream(fd, std::move(dialed.ssl));
  } catch (const std::exception& e) {  // no memory or no BIO for the session's records: the dial fails
    why = std::string("cannot set up the link's TLS session: ") + e.what();
    if (fd >= 0) watch(-1), ::close(fd), fd = -1;
  }
  bool same_host = false;
  if (fd >= 0) {
    net::set_nonblocking(fd, false);
    net::set_bulk_buffers(fd);
    std::vector<char> hello;
    put(hello, kMagic);
    put(hello, int32_t(rt_.rank()));
    put(hello, uint32_t(kWireProtocolVersion));
    put(hello, int32_t(::getpid()));
    put(hello, uint32_t(host_identity().size()));
    hello.insert(hello.end(), host_identity().begin(), host_identity().end());
    put(hello, uint32_t(rt_.opts.incarnation));  // B3: which life of our rank sends
    // The receiver answers once its own init is done (at most kGreetingLimit);
    // a link cut now must not hold this thread (and the link) for longer.
    timeval limit{kGreetingLimitSeconds, 0}, none{0, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    char answer = 0;
    if (!stream.write_all(hello.data(), hello.size()) || !stream.read_all(&answer, 1))
      why = "no answer to the greeting";
    else if (answer != kSameHost && answer != kOtherHost)
      why = "refused by the receiver";
    if (answer != kSameHost && answer != kOtherHost) watch(-1), ::close(fd), fd = -1;
    if (fd >= 0) {
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
    }
    same_host = answer == kSameHost && rt_.opts.bulk_same_host;
  }
  std::lock_guard<std::mutex> lock(link.mtx);
  link.dialing = -1;  // the socket is the link's now, or closed below
  if (fd >= 0 && (stopping_ || dials_over_)) ::close(fd), fd = -1, why = "this worker is stopping";
  // RJ5 of Note [Rejoin]: retired while it dialed (its peer rejoined), or
  // dialed a later life than its own.
  if (fd >= 0 && (link.broken || peer.incarnation != link.incarnation))
    ::close(fd), fd = -1, why = "the peer restarted";
  if (fd < 0) {
    link.broken = true;
    link.cv.notify_all();
    if (!stopping_ && !dials_over_)
      std::fprintf(stderr, "castor[%s]: no bulk link to worker %s (%s:%u: %s); its messages go through CAF\n",
                   rt_.name().c_str(), peer.name.c_str(), peer.host.c_str(), unsigned(peer.bulk_port), why.c_str());
    return false;
  }
  link.stream = std::move(stream);
  link.same_host = same_host;
  link.cv.notify_all();
  return true;
}

// B8: the writer sends only what a caller could not send itself (a frame
// with large tensors, one queued on the receiver's thread, one that found
// the socket full), one write at a time whoever writes. B9: small frames
// queued together leave in one write.
void BulkPath::write_loop(Link& link) {
  for (;;) {
    std::vector<Frame> out;
    std::deque<Frame> unsent;
    bool ending = false;
    {
      // Never beside a caller's write (one thread per session: B6, B8).
      std::unique_lock<std::mutex> lock(link.mtx);
      bool work = link.writer_cv.wait_for(lock, kWriterIdle, [&] {
        return link.answer_due || (!link.writing && (!link.queue.empty() || link.broken || stopping_));
      });
      if (!work && !link.writing) {  // B11: idle; the next queued frame starts a writer again
        link.writer_running = false;
        return;
      }
      if (!work) continue;
      if (link.answer_due) {  // B14: `writing` is set for it already; a break fails it below
        out.push_back(std::move(*link.answer_due));
        link.answer_due.reset();
      } else if (link.broken || stopping_) {
        ending = true;
        link.broken = true;
        link.forget_mapped();
        unsent.swap(link.queue);
      } else {
        take_batch(link, out);
        link.writing = true;
      }
    }
    if (ending) {  // B4: what is still queued (at a stop) fails now
      auto why = stopping_ ? "worker " + rt_.name() + " is stopping" : "worker " + rt_.name_of(link.to) + " was found dead";
      for (auto& m : unsent) fail_unsent(rt_, link.to, m, why);
      return;
    }
    if (!write_frames(link, out.data(), out.size(), false)) return;
  }
}

// B14: on the sending thread, which set `writing` for `frame` (the link was
// idle, the socket has room for the head, the writer runs): writes the
// head, then hands the frame to the writer, which reads the receiver's
// answer (and sends the bytes after all on a refusal, B7). A head that
// could not be written fails there, as the writer's own write would (B4).
void BulkPath::write_head_then_hand_over(Link& link, Frame&& frame) {
  add_addresses(frame);
  errno = 0;
  if (link.stream.write_all(frame.head.data(), frame.head.size()))
    rt_.stats.heads_by_sender.fetch_add(1, std::memory_order_relaxed);
  else
    frame.head_error = errno ? errno : EPIPE;
  frame.head_written = true;
  std::lock_guard<std::mutex> lock(link.mtx);
  link.answer_due.emplace(std::move(frame));
  link.writer_cv.notify_one();
}

namespace {
// Under the link's lock, with frames queued: how many frames the next batch
// takes (the first, and B9 the small ones behind it while the batch is
// small), and their bytes.
size_t next_batch(const std::deque<Frame>& queue, size_t& bytes) {
  size_t n = 0;
  bytes = 0;
  do {
    bytes += queue[n].head.size();
    ++n;
  } while (queue[n - 1].tensors.empty() && n < queue.size() && queue[n].tensors.empty() && n < kMaxBatchFrames &&
           bytes < kMaxBatchBytes);
  return n;
}
}  // namespace

void BulkPath::take_batch(Link& link, std::vector<Frame>& out) {
  size_t bytes = 0;
  for (size_t n = next_batch(link.queue, bytes); n > 0; --n) {
    out.push_back(std::move(link.queue.front()));
    link.queue.pop_front();
  }
}

namespace {
// B12: a caller takes the next batch only when it has no large tensors and
// the socket has room for all of it (a frame of many small tensors may be
// large itself: it queued because it did not fit), so that it never waits
// for the peer (B8).
bool sendable_by_caller(const std::deque<Frame>& queue, int fd) {
  if (!queue.front().tensors.empty() || on_receiver_thread) return false;
  size_t bytes = 0;
  next_batch(queue, bytes);
  return net::has_send_room(fd, bytes + kSendRoomMargin);
}
}  // namespace

// Writes the `n` frames at `out`, which the caller took with `writing` set
// (more than one only when none has large tensors: B9); clears `writing`.
// B12: a `caller` (not the writer) then takes what queued behind it
// meanwhile, as the writer would, while the frames are small and the
// socket has room, at most kMaxCallerBatches times; what it leaves, it
// hands to the writer. On a break, fails them and everything queued (B4).
// Returns whether they were sent.
bool BulkPath::write_frames(Link& link, Frame* out, size_t n, bool caller) {
  std::vector<Frame> more;
  for (int round = 0;; ++round) {
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; ++i)
      for (auto& t : out[i].tensors) bytes += wire::wire_bytes(t);
    errno = 0;
    bool sent;
    if (n == 1) {
      sent = send_frame(rt_, link, out[0]);
    } else {  // B9: one write (one SSL_write) for all; the copy is of small heads only
      std::vector<char> joined;
      for (size_t i = 0; i < n; ++i) joined.insert(joined.end(), out[i].head.begin(), out[i].head.end());
      sent = link.stream.write_all(joined.data(), joined.size());
    }
    int err = errno;
    std::deque<Frame> lost;
    std::vector<Frame> next;
    {
      std::lock_guard<std::mutex> lock(link.mtx);
      link.writing = false;
      for (size_t i = 0; sent && i < n; ++i)
        if (out[i].mapped_answer) link.keep_mapped(out[i]);
      if (!sent) {
        link.broken = true;
        link.forget_mapped();
        lost.swap(link.queue);
      } else if (!link.queue.empty()) {
        if (caller && round < kMaxCallerBatches && !link.broken && !stopping_ &&
            sendable_by_caller(link.queue, link.stream.fd())) {
          take_batch(link, next);
          link.writing = true;
        } else if (caller) {
          link.writer_cv.notify_one();  // B12: the writer takes the rest
        }  // the writer loops to the queue itself
      }
      if (stopping_) link.cv.notify_all();  // stop() waits for `writing`
      // A writer that woke for a break or a stop while this thread wrote
      // went back to sleep (and this break is its own): it ends now rather
      // than after kWriterIdle.
      if (link.broken || stopping_) link.writer_cv.notify_all();
    }
    if (sent) {
      size_t small = 0;
      for (size_t i = 0; i < n; ++i) small += out[i].tensors.empty() ? 1 : 0;
      if (small > 0) {
        rt_.stats.lane_sent.fetch_add(small, std::memory_order_relaxed);
        rt_.stats.lane_writes.fetch_add(1, std::memory_order_relaxed);
      }
      rt_.stats.bulk_sent.fetch_add(n - small, std::memory_order_relaxed);
      rt_.stats.bulk_bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
      if (next.empty()) return true;
      more = std::move(next);
      out = more.data();
      n = more.size();
      continue;
    }
    // B4: these frames and everything queued behind them fail now.
    auto why = "the bulk link to worker " + rt_.name_of(link.to) + " broke" +
               (err ? std::string(": ") + std::strerror(err) : std::string());
    for (size_t i = n; i-- > 0;) lost.push_front(std::move(out[i]));
    if (!stopping_) std::fprintf(stderr, "castor[%s]: %s\n", rt_.name().c_str(), why.c_str());
    for (auto& m : lost) fail_unsent(rt_, link.to, m, why);
    return false;
  }
}

}  // namespace castor::detail
