// The receiving side of every bulk link into one worker (B11 of Note [Bulk
// path]): one epoll thread reads them all, frame by frame, without blocking
// on any of them.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace castor::detail {

class Runtime;
struct Admitted;

namespace bulk {

struct Incoming;  // one link's state (bulk_receiver.cpp)

/// B8: set on the receiver's thread, which never writes a frame itself (a
/// small builtin's reply is sent from there: it queues for the link's writer).
inline thread_local bool on_receiver_thread = false;

class Receiver {
 public:
  /// Starts the thread. Throws std::system_error when it cannot.
  Receiver(Runtime& rt, const std::atomic<bool>& stopping);
  ~Receiver();
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;

  /// Takes a link the door admitted (on the door's thread): from now on the
  /// thread reads it. Closes it instead when stopping or when too many are
  /// open (a cluster without a secret lets strangers greet).
  void add(Admitted admitted);

  /// Ends the thread and closes every link. Idempotent.
  void stop();

 private:
  void run();
  /// Reads and handles what `in` has, up to one turn's bytes (B11); false
  /// when the link ended (closed by the peer or dropped).
  bool serve(Incoming& in);
  /// One step of `in`'s greeting or frame; false when it must wait for
  /// bytes (or for this worker's init), or the link ended.
  bool step(Incoming& in);
  bool greet(Incoming& in);
  bool answer_greeting(Incoming& in);
  bool read_head(Incoming& in);
  bool read_tensors(Incoming& in);
  bool deliver(Incoming& in);
  /// Ends the link with a line naming the peer (B5); false, for `return drop(...)`.
  bool drop(Incoming& in, const std::string& why);
  bool refuse(Incoming& in, const std::string& why);

  Runtime& rt_;
  const std::atomic<bool>& stopping_;  // the bulk path's
  std::atomic<bool> quit_{false};
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: links added, or stop()
  std::mutex mtx_;
  std::vector<std::unique_ptr<Incoming>> added_;  // by add(), not yet taken by the thread
  std::atomic<size_t> open_{0};
  std::thread thread_;
};

}  // namespace bulk
}  // namespace castor::detail
