// The bulk path for messages with large tensors: the Note, the sender's
// entry points and the readers' threads.
#include "actors/transport/bulk/bulk_path.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <optional>

#include <caf/make_message.hpp>

#include "actors/api/errors.hpp"
#include "actors/calls/thread_context.hpp"
#include "actors/hooks/arrival_runner.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/transport/bulk/bulk_link.hpp"
#include "actors/transport/bulk/bulk_receiver.hpp"
#include "actors/transport/bulk/bulk_stream.hpp"
#include "actors/transport/door.hpp"
#include "actors/transport/sockets.hpp"
#include "actors/transport/transport.hpp"
#include "messages/autograd_proto.hpp"
#include "messages/rref_proto.hpp"

namespace castor::detail {

// Note [Bulk path]
// ~~~~~~~~~~~~~~~~
// BASP copies a message into its buffers, frames it, and copies it out again
// on the other side; for tensors of megabytes that costs more than the
// network. So a call or reply to another worker that carries a tensor of at
// least WorkerOptions::bulk_threshold bytes goes on the bulk link instead
// (and, B8, so does every other call and reply: the link is their direct lane):
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
//      it comes from and in which life (Note [Rejoin]), checked against the
//      world: a link from a dead life of the rank (a frozen host that woke
//      up) is refused and counted (RJ6), and its sender falls back to CAF,
//      where the worker actor refuses it too. A link keeps its messages in
//      order; no protocol assumes order between the bulk link and CAF's
//      link (see Note [RRef protocol]).
//  B4. A link that cannot be opened sends nothing: the message goes through
//      CAF as before (chunked above max_message_bytes), so the bulk path
//      never makes a message undeliverable. A link that breaks while sending
//      fails the call at once, naming the peer; a broken link is not reused.
//  B5. Malformed frames close the link with a line naming the peer; the
//      worker keeps serving (see Note [Hostile input]).
//  B6. In a TLS cluster every bulk link is TLS: the door runs the handshake
//      (both sides verified against the cluster CA, T1 of Note [TLS]) before
//      the link's greeting (the door's own greeting is plain, as on every
//      port: D6), so no message or tensor byte travels in plain. A
//      link's session is used by one thread only, its writer on one side and
//      its reader on the other (an OpenSSL session cannot take reads and
//      writes from two threads). The sending session's records go to a
//      buffer of its stream, which sends up to 256 KiB of them in one call
//      with MSG_NOSIGNAL (bulk_stream.cpp; no SIGPIPE, T7): one send per
//      16 KiB record made a 64 MiB echo across TCP 1.3x slower (alternating
//      pairs) and 16x the send calls. So B1's "straight from and into
//      tensor memory" gains two copies on the sending side (OpenSSL
//      encrypts into its buffer, the records go into the stream's) and one
//      on the receiving side (OpenSSL decrypts in its record buffer).
//      B7 stays on: addresses travel inside the session, and the bytes move
//      kernel to kernel, never over a network.
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
//  B8. Direct lane: a CAF send from a thread other than the middleman's wakes
//      its multiplexer (a pipe write, epoll_ctl, epoll_wait, the write), and
//      the reply wakes the receiving worker actor before the caller. So every
//      successful call and reply to a peer takes the link (error replies stay
//      on CAF), and a frame without large tensors is written by the sending
//      thread itself when the link is idle (no frame queued, none being
//      written); otherwise it is queued behind the others and the link's
//      writer thread (started with the first queued frame) sends it. One
//      frame is written at a time by whichever thread, so B3's order holds.
//      A well-formed reply completes its call on the receiver's thread
//      (deliver_reply: the pending table, counters and the autograd and RRef
//      hand-offs are thread-safe), and so does a well-formed call whose
//      caller is the link's rank (deliver_request: what the worker actor
//      does with one from CAF); malformed ones go to the actor, which
//      reports them (B5). Nothing is delivered from a rank the world has
//      found dead, and a peer's death shuts its links (peer_down), so no
//      thread waits on a host that vanished. A sending thread writes only
//      when the socket's buffer has room for the frame and a margin, so it
//      never waits for the peer; stop() waits for a write in progress. The
//      receiver's thread writes a small frame itself too (a small builtin's
//      reply is sent from there), under the same rule: with room for it, a
//      write cannot block, so two receivers never wait on each other. It
//      never takes others' frames (B12), and a frame with large tensors
//      goes to the writer (B7's answer is read by the writer; B14 lets the
//      sender write the head first). Handing those replies to the writer
//      cost a thread wake per small builtin call. Nor does it wait for a
//      link to open: a large message from a thread that must not wait (a
//      reader, one of CAF's, one running woken actors) goes through CAF
//      while the writer dials, as a small one does before kOpenAfter
//      (may_wait_for_dial). And no wait
//      for a dial outlives the worker: teardown first cuts every dial in
//      flight (shuts its socket: stop_dialing), so a peer that took the
//      connection and froze holds neither a waiting replier (nor the reply
//      gate it holds) nor stop()'s join of the dialing writer for the
//      dial's seconds; from then on messages without an open link go
//      through CAF. A dial to a peer found dead is cut the same way.
//  B9. Few syscalls per small frame. The receiver reads what a link's
//      socket holds (up to 64 KiB) and takes a frame's fields from there, so
//      a small frame costs one recv or less, not one per field (and no
//      recv that says EAGAIN: a plain read that came back short ends the
//      link's turn, epoll being level-triggered); a read of
//      tensor bytes takes what was read ahead and then goes straight into
//      the tensor (B1 stays copy-free). A TLS link also reads ahead in OpenSSL,
//      and skips the read that would say EAGAIN the same way: a callback on
//      its session's socket BIO sees whether OpenSSL's read came back short
//      (without it, each small TLS frame cost one more recv: 2 per call).
//      Small frames that queued up behind a busy link (a large frame being
//      written, a full socket) leave together in one write (up to 64 frames
//      or 256 KiB; one SSL_write with TLS), in their queue's order (B3). Measured
//      with castor-bench rpc, the build before against the build after in
//      the same hour: a small call 0.77-0.93 of its time before, rpc_async
//      calls/s 1.01-1.19x (bench/README.md).
//  B10. Protocol messages on the lane. A message for a peer's worker actor
//      (an RRef control message or its ack, a gradient, its answer, a
//      context's cleanup or abort) goes on the link when it is open
//      (WorkerServices::send_to_peer), as its own frame type: the CAF
//      encoding of the typed message, a gradient's large tensors apart as in
//      B1. Its sender is a protocol actor, on CAF's multiplexer (Note [Where
//      actors run]) or on a thread that must not stall behind a dial (a
//      link's reader: Note [Actors run where their messages arrive]), so it
//      never waits for a dial: an unopened link sends through CAF, and the
//      link's writer opens it meanwhile. The receiver
//      checks it as the worker actor would (a malformed one goes to the
//      actor, which reports it: B5; a gradient must name the link's rank as
//      its sender, as a call must in B8) and hands it to the RRef or autograd
//      layer with the same counts (deliver_protocol), which posts it to its
//      actor's mailbox (an autograd actor it wakes runs on this thread): the typed message is handled by the same actor,
//      whatever carried its bytes. A frame that a broken link did not send
//      goes through CAF after all (a copy taken before B1 took its tensors
//      out), so a break loses nothing that CAF would have delivered; a
//      message for a dead peer is dropped, as CAF drops it. Order: the
//      link keeps these in order among themselves and with the calls;
//      across the switch from CAF to the link (and back after a break) two
//      messages may cross, which the protocols allow (B3, Note [RRef
//      protocol], Note [Released contexts]).
//  B11. Threads do not grow with the world. An all-to-all round among 128
//      workers on one host opens 127 links from each, 16,000 in all; with a
//      reader and a writer thread per link it ran the host out of threads and
//      stalled the doors. So:
//      - One receiver per worker (bulk::Receiver): a single epoll thread
//        reads every link into the worker. Each link is a non-blocking
//        socket with its own state (greeting, head, tensor bytes) and, while
//        a frame is partly read, its own buffer (an idle link holds none).
//        A slow or silent peer holds its own link, never the thread. A link
//        reads at most 4 MiB in a turn, then the others get theirs, so a
//        64 MiB tensor does not hold up a gradient on another link. A link
//        whose greeting came before this worker's init waits without a
//        thread (looked at again every 5 ms, until its deadline). What B7
//        copies out of a sender's memory is copied on this thread: other
//        links wait for it.
//      - A link's writer runs only while it has work (the dial, queued
//        frames) and ends after a second idle; a queued frame starts it
//        again. At most kMaxWriters run at once in a worker; a link that
//        finds none free sends through CAF meanwhile (B4), its message whole
//        (restore() puts back what B1 took out).
//      - A link opens for a large message at once, and for small ones once
//        kOpenAfter of them went through CAF to that peer: a pair that
//        exchanges a few messages is not worth a dial, two greetings and a
//        writer. Measured with castor-bench scale: opening every link on
//        first contact made the first all-to-all round among 128 workers
//        3.1x slower than with no lane at all (all the dials at once, on 2
//        cores); with kOpenAfter it is 0.87x of that.
//      So a worker has one receiver and at most kMaxWriters writers, in a
//      world of any size, and the lane serves every world size.
//  B12. The writer wakes only for what it must send. A frame that finds
//      another thread writing queues behind it, and that thread, once its
//      own write is done, takes what queued meanwhile (B9's batches, at
//      most kMaxCallerBatches of them, while the frames are small, the
//      socket has room for a whole batch and it is not the receiver's
//      thread); what it leaves it hands to the writer. The writer is woken
//      only then, or for a frame queued with no one writing: large
//      tensors, a full socket. Before, every queued
//      frame and every direct write woke the writer, which mostly found the
//      link busy and slept again: in a flood of rpc_async calls it was a
//      third of all context switches of both workers.
//  B13. Streams of calls leave in batches. A call whose thread's two
//      previous calls on the same link both still wait for their replies
//      is part of a stream (rpc_async in a loop): it goes to the writer,
//      which sends what queued while it woke in one write (B9), instead of
//      one send each. A thread that waits for each reply (rpc_sync) always
//      finds its previous call answered and keeps the direct write, so a
//      single call's latency is unchanged. Two, not one: a call made while
//      one other of its thread is out (`remote()` then its `to_here()`, an
//      rpc_async then an rpc_sync) is not a stream and keeps the direct
//      write; a stream is found from its third call. Measured with castor-bench rpc on this
//      2-core machine, the same hour: rpc_async 1.5x the calls/s (27-29x
//      PyTorch, from 18x), rpc_sync within its range.
//  B14. A same-host frame's head leaves from its sender. With B7 the
//      frame itself is small (the head and the tensors' addresses); only
//      the wait for the receiver's answer needs the writer. So when the
//      link is idle (no frame queued or being written, not part of a B13
//      stream) and the socket has room for the head and a margin, the
//      sending thread writes the head itself, keeps `writing` set, and hands
//      the frame to the writer (Link::answer_due), which reads the answer
//      (and on a refusal sends the bytes after all, as in B7) and then
//      clears `writing`. The receiver starts its copy without waiting for
//      the writer's wake, and a reply to two callers (a parameter server's
//      round) leaves for both before either has answered. B3's order holds:
//      nothing else is written on the link until the answer is read. A head
//      that fails to write fails the frame through the writer, as its own
//      write would (B4); a stop or a peer's death shuts the socket, and the
//      writer's read of the answer ends with the same failure. Under TLS
//      the session passes from the sender to the writer under the link's
//      lock, one thread at a time (B6). Measured with castor-bench sweep,
//      seven alternating pairs of the builds without and with it: a 256 KiB
//      echo 0.88 of its time, 1 MiB 0.92, 4 MiB 0.91 (median ratios), where
//      sizes it does not touch read 0.95-0.96.
//  B15. A same-host copy never delivers memory its sender let go of. The
//      sender keeps a frame's tensors until the receiver's answer (B7); but
//      a link that breaks or stops under a frame ends the sender's wait
//      while the receiver may still copy: it may not even have read the
//      head yet, which lies in its socket before the end of the stream. The
//      tensors were then freed (and the caller, told the call failed, may
//      write into its own), and the receiver copied whatever the memory held
//      by then and delivered it. So each process has one revocation word in
//      static storage (never freed), and a head of addresses ends with the
//      word's address and its value when the head was made. A frame holds a
//      CopyLease from then until an answer comes; a frame let go of without
//      one revokes copies (the word changes) before its tensors can go and
//      before its caller hears of the failure. The receiver reads the word
//      after its copy: changed, the copy may be torn, and it answers
//      kCopyRevoked: a sender that is still there sends the bytes as in B1
//      (the link stays same-host), one that gave up never does, and nothing
//      is delivered. A revocation is rare (a broken or stopping link), and
//      one word for all links costs an unrelated frame in flight at that
//      moment one send of its bytes, not its delivery. `castor inspect`
//      counts the receiver's `copies_revoked`.

using namespace bulk;

BulkPath::BulkPath(Runtime& rt) : rt_(rt) {
  // B3: the bulk port is behind the door like every port castor listens on
  // (Note [The door]); a connection reaches the receiver only once it greeted.
  try {
    receiver_ = std::make_unique<Receiver>(rt, stopping_);
    port_ = rt.transport->door().listen(rt.opts.host, 0, false, door::Purpose::bulk, rt.opts.tls.enabled(),
                                        [this](Admitted a) { receiver_->add(std::move(a)); });
  } catch (const std::exception& e) {
    throw UnreachableError(make_error(ErrorKind::Unreachable, rt.opts.name,
                                      "worker " + rt.opts.name + ": cannot open the bulk port on " + rt.opts.host +
                                          ": " + e.what()));
  }
}

BulkPath::~BulkPath() { stop(); }

namespace {
// B13: whether the calling thread's two previous calls on `link` both still
// wait for their replies, so that call `id` continues a stream; remembers
// `id` as this thread's latest.
bool continues_stream(const PendingCalls& pending, const BulkPath::Link* link, CallId id) {
  thread_local const BulkPath::Link* last_link = nullptr;
  thread_local CallId last_calls[2];
  if (last_link != link) last_calls[0] = last_calls[1] = CallId{};
  bool stream = last_link == link && last_calls[0].valid() && last_calls[1].valid() &&
                pending.contains(last_calls[1]) && pending.contains(last_calls[0]);
  last_link = link;
  last_calls[0] = last_calls[1];
  last_calls[1] = id;
  return stream;
}

// B8: which threads may wait for a link's dial. Not a link's reader: it
// answers the greetings of its peers' dials, so readers waiting on dials
// into each other's workers would each wait out the greeting's limit (and
// then send through CAF for good: the links broke), and a waiting reader
// holds every link into its worker. Nor one of CAF's threads, nor one
// running the actors a message woke (D3 of Note [Actors run where their
// messages arrive]). Their large messages go through CAF while the writer
// opens the link for the next ones.
bool may_wait_for_dial() { return !on_receiver_thread && !on_caf_thread() && !running_arrivals(); }
}  // namespace

// Under the link's lock from the check to the hand-off: a link that breaks
// meanwhile leaves the message untouched for CAF (B4). B8: an idle link
// takes a frame without large tensors from this thread at once.
bool BulkPath::push(WorkerId to, uint8_t type, CallId id, const std::vector<Value*>& values,
                    const std::function<std::vector<char>()>& encode, const std::function<caf::message()>& fallback) {
  // B8: a call or reply with a large tensor waits for the link to open (it
  // is what the link is for) when its thread may wait; any other message
  // goes through CAF until it is open, and so does every protocol message
  // (B10: their senders are actors, which never wait for a dial).
  bool large = false;
  for (auto* v : values) large = large || has_large(*v, rt_.opts.bulk_threshold);
  auto how = !large || fallback ? Open::after_some : may_wait_for_dial() ? Open::and_wait : Open::now;
  auto* link = link_to(to, how);
  if (!link) return false;
  bool pipelined = type == kRequest && continues_stream(rt_.pending, link, id);
  std::optional<Frame> frame;  // built in place: a Frame is never assigned over (B15)
  bool head_first = false;
  {
    std::lock_guard<std::mutex> lock(link->mtx);
    if (link->broken || stopping_) return false;
    auto copy = fallback ? fallback() : caf::message{};  // before extract() changes the message
    std::vector<at::Tensor> tensors;
    for (auto* v : values) extract(*v, rt_.opts.bulk_threshold, rt_.transfer_ids, tensors);
    frame.emplace(make_frame(type, encode(), std::move(tensors), id));
    frame->fallback = std::move(copy);
    frame->number = ++link->frames_pushed;
    // SH7 of Note [Shared tensors]: views of segments the peer mapped before
    // need no answer; the frame then goes as a small one.
    if (link->same_host && !frame->tensors.empty() && link->all_mapped_by_peer(*frame)) {
      add_views(*frame);
      frame->views_only = true;
    }
    const bool waits_for_answer = !frame->tensors.empty() && !frame->views_only;
    bool behind = link->writing || !link->queue.empty() || pipelined;
    // B14: a same-host frame's head (the tensors' addresses) leaves from this
    // thread when the link is idle; the writer reads the answer.
    if (!behind && waits_for_answer && link->same_host &&
        net::has_send_room(link->stream.fd(),
                           frame->head.size() + kAddressRecordBytes * frame->tensors.size() + kRevocationBytes +
                                                     kSendRoomMargin) &&
        start_writer(*link)) {
      head_first = true;
    } else if (behind || waits_for_answer ||
               !net::has_send_room(link->stream.fd(), frame->head.size() + kSendRoomMargin)) {
      if (!start_writer(*link)) {  // B11: no writer free now: CAF takes the message, whole again
        restore(values, frame->tensors);
        return false;
      }
      link->queue.push_back(std::move(*frame));
      // B12: a thread writing now takes it when done (or hands it to the
      // writer); with none, the writer has it.
      if (!link->writing) link->writer_cv.notify_one();
      return true;
    }
    link->writing = true;
  }
  if (head_first)
    write_head_then_hand_over(*link, std::move(*frame));
  else
    write_frames(*link, &*frame, 1, true);  // a break fails the message as the writer would (B4)
  return true;
}

bool BulkPath::try_send(WorkerId to, CallRequest& msg) {
  return push(to, kRequest, msg.id, values_in(msg), [&msg] { return envelope_of(msg); });
}

bool BulkPath::try_send(WorkerId to, CallReply& msg) {
  return push(to, kReply, msg.id, values_in(msg), [&msg] { return envelope_of(msg); });
}

template <class Message>
bool BulkPath::push_protocol(WorkerId to, uint8_t type, Message& msg) {
  return push(to, type, CallId{}, values_in(msg), [&msg] { return envelope_of(msg); },
              [&msg] { return caf::make_message(msg); });
}

bool BulkPath::try_send(WorkerId to, BackwardGrad& msg) { return push_protocol(to, kBackwardGrad, msg); }
bool BulkPath::try_send(WorkerId to, BackwardDone& msg) { return push_protocol(to, kBackwardDone, msg); }
bool BulkPath::try_send(WorkerId to, ContextControl& msg) { return push_protocol(to, kContextControl, msg); }
bool BulkPath::try_send(WorkerId to, RRefControl& msg) { return push_protocol(to, kRRefControl, msg); }
bool BulkPath::try_send(WorkerId to, RRefControlAck& msg) { return push_protocol(to, kRRefAck, msg); }

void BulkPath::peer_down(WorkerId rank) {
  std::lock_guard<std::mutex> lock(mtx_);
  // After stop() the links' fds are closed, their numbers maybe reused by
  // another socket of this process: never touch them again.
  if (stopping_ || rank < 0 || size_t(rank) >= links_.size() || !links_[size_t(rank)]) return;
  auto& link = *links_[size_t(rank)];
  std::lock_guard<std::mutex> link_lock(link.mtx);
  link.break_off();  // a dial to the dead ends now
}

void BulkPath::stop_dialing() {
  std::lock_guard<std::mutex> lock(mtx_);
  dials_over_ = true;
  for (auto* links : {&links_, &retired_})
    for (auto& l : *links) {
      if (!l) continue;
      std::lock_guard<std::mutex> link_lock(l->mtx);
      if (l->dialing >= 0) ::shutdown(l->dialing, SHUT_RDWR);
      l->cv.notify_all();  // a sender waiting for the link sends through CAF
    }
}

void BulkPath::stop() {
  stop_dialing();  // before the writers are joined: one may be in a dial
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mtx_);
    if (stopping_.exchange(true)) return;
    for (auto& l : retired_) links_.push_back(std::move(l));  // RJ5: joined and closed like the others
    retired_.clear();
    for (auto& l : links_) {
      if (!l) continue;
      std::lock_guard<std::mutex> link_lock(l->mtx);
      if (l->stream.fd() >= 0) ::shutdown(l->stream.fd(), SHUT_RDWR);
      l->cv.notify_all();
      l->writer_cv.notify_all();
    }
  }
  if (receiver_) receiver_->stop();
  for (auto& l : links_)
    if (l && l->writer.joinable()) l->writer.join();
  for (auto& l : links_) {
    if (!l) continue;
    // B8: a caller may still be in a write (failing now: the socket is shut).
    std::unique_lock<std::mutex> link_lock(l->mtx);
    l->cv.wait(link_lock, [&] { return !l->writing; });
    l->forget_mapped();  // SH7: this side's segments go with their tensors now
    if (l->stream.fd() >= 0) ::close(l->stream.fd());
  }
}

}  // namespace castor::detail
