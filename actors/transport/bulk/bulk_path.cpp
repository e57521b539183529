// The bulk path for messages with large tensors: the Note, the sender's
// entry points and the readers' threads.
#include "actors/transport/bulk/bulk_path.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

#include "actors/api/errors.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/transport/bulk/bulk_link.hpp"
#include "actors/transport/bulk/bulk_stream.hpp"
#include "actors/transport/door.hpp"
#include "actors/transport/sockets.hpp"
#include "actors/transport/transport.hpp"

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
//  B6. In a TLS cluster every bulk link is TLS: the door runs the handshake
//      (both sides verified against the cluster CA, T1 of Note [TLS]) before
//      the link's greeting (the door's own greeting is plain, as on every
//      port: D6), so no message or tensor byte travels in plain. A
//      link's session is used by one thread only, its writer on one side and
//      its reader on the other (an OpenSSL session cannot take reads and
//      writes from two threads), and writes through castor's BIO (no
//      SIGPIPE, T7). OpenSSL encrypts into its own buffer and decrypts in
//      its record buffer, so B1's "straight from and into tensor memory"
//      gains a copy each way. B7 stays on: addresses travel inside the
//      session, and the bytes move kernel to kernel, never over a network.
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

using namespace bulk;

BulkPath::BulkPath(Runtime& rt) : rt_(rt) {
  // B3: the bulk port is behind the door like every port castor listens on
  // (Note [The door]); a connection reaches a reader only once it greeted.
  try {
    port_ = rt.transport->door().listen(rt.opts.host, 0, false, door::Purpose::bulk, rt.opts.tls.enabled(),
                                        [this](Admitted a) { start_reader(std::move(a)); });
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
    link->queue.push_back(make_frame(type, encode(), std::move(tensors), id));
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

// On the door's thread, for each admitted bulk connection (B6: with its TLS
// session in a TLS cluster).
void BulkPath::start_reader(Admitted admitted) {
  int fd = admitted.fd;
  net::set_nonblocking(fd, false);
  net::set_bulk_buffers(fd);
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
                   rt_.name().c_str(), net::peer_address(fd).c_str(), readers_.size());
    ::close(fd);
    return;
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  auto stream = std::make_shared<Stream>(fd, std::move(admitted.ssl));
  readers_.push_back(Reader{std::thread([this, stream, done] {
                              read_loop(*stream);
                              done->store(true);
                            }),
                            fd, done});
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
      if (l->stream.fd() >= 0) ::shutdown(l->stream.fd(), SHUT_RDWR);
      l->cv.notify_all();
    }
  }
  for (auto& l : links_)
    if (l && l->writer.joinable()) l->writer.join();
  for (auto& r : readers_) r.thread.join();
  for (auto& l : links_)
    if (l && l->stream.fd() >= 0) ::close(l->stream.fd());
  for (auto& r : readers_) ::close(r.fd);
}

}  // namespace castor::detail
