// A worker's transport: the door, the dial options, the TLS context.
#include "actors/transport/transport.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "actors/api/errors.hpp"
#include "messages/rendezvous.hpp"

namespace castor::detail {

Transport::Transport(const std::string& worker, const std::string& secret, const TlsOptions& tls,
                     std::chrono::milliseconds greeting_timeout, size_t world_size)
    : worker_(worker), greeting_timeout_(greeting_timeout), world_size_(world_size) {
  if (tls.enabled()) {
    try {
      tls_ = std::make_shared<const TlsContext>(tls);
    } catch (const std::exception& e) {
      throw RpcError(ErrorInfo{ErrorKind::Lookup, worker, "init_rpc(" + worker + "): " + e.what()});
    }
  }
  dial_.key.secret = secret;
  dial_.tls = tls_.get();
  dial_.wire_version = uint16_t(kWireProtocolVersion);
}

Transport::~Transport() { stop(); }

Door& Transport::door() {
  std::lock_guard<std::mutex> lock(mtx_);
  if (!door_) {
    DoorOptions o;
    o.worker = worker_;
    o.key = dial_.key;
    o.tls = tls_;
    o.wire_version = dial_.wire_version;
    o.greeting_timeout = greeting_timeout_;
    // D3: room for every peer greeting at once (they may share one host),
    // twice over for their bulk links and retries.
    o.max_pending_per_host = std::max<size_t>(o.max_pending_per_host, 2 * world_size_ + 8);
    o.max_pending = std::max<size_t>(o.max_pending, 4 * world_size_ + 16);
    door_ = std::make_unique<Door>(std::move(o));
  }
  return *door_;
}

void Transport::stop() {
  std::lock_guard<std::mutex> lock(mtx_);
  if (door_) door_->stop();
}

DoorCounts Transport::counts() const {
  std::lock_guard<std::mutex> lock(mtx_);
  return door_ ? door_->counts() : DoorCounts{};
}

void note_link_security(const std::string& worker, bool authenticated, bool tls) {
  static std::atomic<bool> said{false};
  if (tls || said.exchange(true)) return;
  if (authenticated)
    std::fprintf(stderr,
                 "castor[%s]: links are authenticated by the cluster secret but not encrypted (no TLS configured; "
                 "see WorkerOptions::tls)\n",
                 worker.c_str());
  else
    std::fprintf(stderr,
                 "castor[%s]: links are plain TCP, unauthenticated and unencrypted: the door keeps out what is not "
                 "castor, not a stranger who speaks castor's greeting (set CASTOR_SECRET, a cluster file's "
                 "\"secret\", or TLS)\n",
                 worker.c_str());
}

}  // namespace castor::detail
