// One worker's transport: its door (accepting), its dial options
// (connecting), its TLS context, and what the door counted.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "actors/transport/dialer.hpp"
#include "actors/transport/door.hpp"
#include "actors/api/worker_options.hpp"

namespace castor::detail {

class Transport {
 public:
  /// Throws RpcError naming the worker when the TLS files cannot be loaded.
  /// `world_size` bounds the greetings the door lets run at once (D3): a
  /// worker's peers may all greet at the same moment, from one host.
  Transport(const std::string& worker, const std::string& secret, const TlsOptions& tls,
            std::chrono::milliseconds greeting_timeout, size_t world_size = 1);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  const DialOptions& dial_options() const { return dial_; }
  bool tls() const { return tls_ != nullptr; }
  bool authenticated() const { return dial_.key.authenticated(); }

  /// The door, started on first use (a client such as castor inspect never
  /// starts one).
  Door& door();
  /// Stops the door: nothing is admitted from here on. Idempotent.
  void stop();
  DoorCounts counts() const;

 private:
  std::string worker_;
  std::shared_ptr<const TlsContext> tls_;
  DialOptions dial_;
  std::chrono::milliseconds greeting_timeout_;
  size_t world_size_;
  mutable std::mutex mtx_;
  std::unique_ptr<Door> door_;
};

/// Says once per process how this worker's links are protected (D4).
void note_link_security(const std::string& worker, bool authenticated, bool tls);

}  // namespace castor::detail
