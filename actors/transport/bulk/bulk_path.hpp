// The bulk path: messages carrying large tensors travel on a TCP connection
// (TLS in a TLS cluster) per ordered worker pair, beside CAF's BASP links, so
// that tensor bytes are written from and read into tensor memory with no
// BASP framing (and, without TLS, no copy in user space). See Note [Bulk
// path] in bulk_path.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <caf/fwd.hpp>

#include "messages/call.hpp"
#include "messages/protocol_fwd.hpp"

namespace castor::detail {

class Runtime;
struct Admitted;
namespace bulk {
class Stream;
struct Frame;
class Receiver;
}

class BulkPath {
 public:
  /// Listens on the worker's host (any free port) behind its door. Throws RpcError.
  explicit BulkPath(Runtime& rt);
  ~BulkPath();
  BulkPath(const BulkPath&) = delete;
  BulkPath& operator=(const BulkPath&) = delete;

  uint16_t port() const { return port_; }

  /// Sends `msg` to `to` on the link (B8: from this thread when the link is
  /// idle and `msg` has no large tensor, else through the link's writer, and
  /// B13 a request of a stream of calls through the writer too; B14: a
  /// same-host frame's head from this thread, its answer read by the writer);
  /// false (and `msg` untouched) when the link to `to` cannot be opened or
  /// is broken, or is not open yet and this message does not wait for it
  /// (a small one, or one from a thread that must not wait: B8, B11): the
  /// caller sends through CAF instead.
  bool try_send(WorkerId to, CallRequest& msg);
  bool try_send(WorkerId to, CallReply& msg);
  /// B10: a protocol message for the peer's worker actor, only when the
  /// link is open already (a protocol actor never waits for a dial); false
  /// (and `msg` untouched) when it is not: the caller sends through CAF.
  bool try_send(WorkerId to, BackwardGrad& msg);
  bool try_send(WorkerId to, BackwardDone& msg);
  bool try_send(WorkerId to, ContextControl& msg);
  bool try_send(WorkerId to, RRefControl& msg);
  bool try_send(WorkerId to, RRefControlAck& msg);

  /// B8: `rank` was found dead: its outgoing link is shut, so that no
  /// thread waits on a write to a host that vanished. Its readers deliver
  /// nothing more.
  void peer_down(WorkerId rank);

  /// B8: no link opens from now on: a dial in flight ends at once (its
  /// socket is shut), a sender waiting for one stops waiting, and messages
  /// to a peer without an open link go through CAF. Open links stay open.
  /// Teardown calls it first: a replier waiting for a dial on an executor
  /// thread holds Runtime::teardown_gate, and stop() joins the writer in
  /// its dial; either waited for the dial's seconds with a peer that took
  /// the connection and never answered (one that froze). Idempotent.
  void stop_dialing();

  /// Closes every link and joins every thread. Idempotent.
  void stop();

  struct Link;  // bulk_link.hpp

 private:
  /// How link_to opens a link that is not open yet (B8, B11).
  enum class Open {
    after_some,  // once kOpenAfter messages went through CAF; never waits
    now,         // dial now, do not wait: this message goes through CAF
    and_wait,    // dial now and wait for the link
  };
  Link* link_to(WorkerId to, Open how);            // bulk_link.cpp
  bool start_writer(Link& link);                    // bulk_link.cpp
  bool open(Link& link);                            // bulk_link.cpp
  void write_loop(Link& link);                      // bulk_link.cpp
  bool write_frames(Link& link, bulk::Frame* out, size_t n, bool caller);  // bulk_link.cpp
  void write_head_then_hand_over(Link& link, bulk::Frame&& frame);       // bulk_link.cpp, B14
  void take_batch(Link& link, std::vector<bulk::Frame>& out);            // bulk_link.cpp
  template <class Message>
  bool push_protocol(WorkerId to, uint8_t type, Message& msg);  // B10
  bool push(WorkerId to, uint8_t type, CallId id, const std::vector<Value*>& values,
            const std::function<std::vector<char>()>& encode, const std::function<caf::message()>& fallback = {});

  Runtime& rt_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> dials_over_{false};  // stop_dialing() was called
  std::mutex mtx_;
  std::vector<std::unique_ptr<Link>> links_;  // by rank, opened on first use
  std::vector<std::unique_ptr<Link>> retired_;  // links to earlier lives of rejoined peers (RJ5)
  std::unique_ptr<bulk::Receiver> receiver_;  // B11: reads every link into this worker
  std::atomic<int> writers_{0};  // B11: writer threads running now
};

}  // namespace castor::detail
