// One outgoing bulk link (B3, B4, B7, B8, B11 of Note [Bulk path]): its
// socket, its queue of frames and the writer thread that drains it.
#pragma once

#include <sys/socket.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <c10/core/Storage.h>

#include "actors/transport/bulk/bulk_frame.hpp"
#include "actors/transport/bulk/bulk_path.hpp"
#include "actors/transport/bulk/bulk_stream.hpp"

namespace castor::detail {

namespace bulk {
// B8: what a direct write leaves free in the socket's buffer (TLS records
// add a little to each frame), so that it never waits for the peer.
inline constexpr size_t kSendRoomMargin = 64 * 1024;
// SH7: the peer's mapped segments a link keeps, at most (as the receiver's
// own bound on the segments it keeps mapped: SH4).
inline constexpr size_t kMaxPeerMapped = 64;
inline constexpr size_t kMaxPeerMappedBytes = size_t(1) << 30;

// SH7 of Note [Shared tensors]: a segment of this process that the peer
// said it mapped, kept open here so that the peer can map it again.
struct PeerMapped {
  c10::Storage storage;  // keeps the segment (and its descriptor) alive
  size_t bytes = 0;
  uint64_t last_frame = 0;  // the last frame of views that named it
};
}  // namespace bulk

struct BulkPath::Link {
  WorkerId to = -1;
  uint32_t incarnation = 1;  // RJ5 of Note [Rejoin]: the peer's life this link reaches
  bulk::Stream stream;     // fd -1 until opened
  bool broken = false;     // B4: never reused
  bool same_host = false;  // B7: send addresses, not bytes
  bool writing = false;    // B8: a thread is writing a frame (the writer or a caller)
  uint32_t sent_unopened = 0;  // B11: small messages that asked for the link before it opened
  bool writer_running = false;  // B11: `writer` runs (it ends when idle; a queued frame starts it again)
  int dialing = -1;        // B8: the socket of the writer's dial, for stop_dialing() and peer_down() to shut
  std::mutex mtx;          // guards all of the above and the queue
  std::condition_variable cv;  // opened or broken, or `writing` cleared while stopping
  std::condition_variable writer_cv;  // B12: frames only the writer takes, a break, or stopping
  std::deque<bulk::Frame> queue;
  // B14: a frame whose head a sender wrote; `writing` stays set for it
  // until the writer has read the receiver's answer.
  std::optional<bulk::Frame> answer_due;
  std::thread writer;
  // SH7 of Note [Shared tensors]: by segment id; frames pushed so far.
  std::unordered_map<uint64_t, bulk::PeerMapped> peer_mapped;
  size_t peer_mapped_bytes = 0;
  uint64_t frames_pushed = 0;

  /// SH7: whether every tensor of `frame` lies in a segment the peer
  /// mapped; if so, they are marked as named by it. Holds `mtx`.
  bool all_mapped_by_peer(const bulk::Frame& frame);
  /// SH7: the peer answered kMapped for `frame`: its segments are kept, and
  /// the least used beyond the bounds let go of (only those no frame of
  /// views after `frame` names). Holds `mtx`.
  void keep_mapped(const bulk::Frame& frame);
  /// SH7: the link ends; what the peer may still map goes. Holds `mtx`.
  void forget_mapped() {
    peer_mapped.clear();
    peer_mapped_bytes = 0;
  }

  /// B4, B8: never used again. Its socket and its dial's socket are shut, so
  /// that no thread waits on a write or a dial to it, and its waiters wake
  /// (what is queued fails with the writer's next wake). Holds `mtx`.
  void break_off() {
    broken = true;
    forget_mapped();
    if (stream.fd() >= 0) ::shutdown(stream.fd(), SHUT_RDWR);
    if (dialing >= 0) ::shutdown(dialing, SHUT_RDWR);
    cv.notify_all();
    writer_cv.notify_all();
  }
};

}  // namespace castor::detail
