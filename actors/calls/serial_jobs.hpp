// Jobs an actor hands to the executor one at a time, in arrival order: the
// owner RRef actor's method calls on one object (Note [Remote objects]), the
// local optimizer's steps on one worker's parameters. The actor is the lock;
// this is its queue. Runs inside the actor: no mutex.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <utility>

namespace castor::detail {

template <class Job>
class SerialJobs {
 public:
  /// Queues a job behind the others.
  void push(Job job) { queue_.push_back(std::move(job)); }

  /// The next job, if one may start now: none is running, or fewer than
  /// `limit` (0: no limit, for work that may overlap). It counts as running
  /// until finished().
  std::optional<Job> next(size_t limit = 1) {
    if (queue_.empty() || (limit != 0 && running_ >= limit)) return std::nullopt;
    auto job = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    return job;
  }

  /// A job handed out by next() ended (or could not be started).
  void finished() {
    if (running_ > 0) --running_;
  }

  bool idle() const { return queue_.empty() && running_ == 0; }
  size_t queued() const { return queue_.size(); }
  size_t running() const { return running_; }
  /// Every queued job, in order (to fail them when the actor ends).
  std::deque<Job> take_queued() { return std::exchange(queue_, {}); }

 private:
  std::deque<Job> queue_;  // waiting, in arrival order
  size_t running_ = 0;     // handed out, not finished
};

}  // namespace castor::detail
