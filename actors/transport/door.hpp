// The door: every connection to a port castor listens on (the worker's CAF
// port, the bulk port) is accepted here, on the door's own thread, and
// handed on only after castor's greeting (and the TLS handshake, with TLS)
// passed. See Note [The door] in door.cpp.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/transport/greeting.hpp"
#include "actors/transport/tls_session.hpp"

namespace castor::detail {

/// Why the door closed a connection (counted for castor inspect).
enum class Refusal : uint8_t { not_castor, secret, version, purpose, tls, timeout, closed, overload };
inline constexpr size_t kNumRefusals = 8;
const char* to_string(Refusal r);

struct DoorCounts {
  uint64_t admitted = 0;
  std::array<uint64_t, kNumRefusals> refused{};
  uint64_t refused_total() const;
};

struct DoorOptions {
  std::string worker;                       // names the worker in log lines
  door::Key key;                            // the cluster secret (or none)
  std::shared_ptr<const TlsContext> tls;    // null: no TLS
  uint16_t wire_version = 0;                // castor's message format; both sides must agree
  std::chrono::milliseconds greeting_timeout{10000};  // D3
  size_t max_pending = 256;                 // D3: greetings in progress at once (raised for large worlds)
  size_t max_pending_per_host = 32;         // D3: ... from one host (ditto)
};

/// A connection that passed the door: its socket (non-blocking) and, with
/// TLS, its established session. Owned by whoever receives it.
struct Admitted {
  int fd = -1;
  SslPtr ssl;
  std::string peer;   // "host:port"
  uint16_t port = 0;  // ours: the listener's port
};
using AdmitFn = std::function<void(Admitted)>;

class Door {
 public:
  explicit Door(DoorOptions opts);
  ~Door();
  Door(const Door&) = delete;
  Door& operator=(const Door&) = delete;

  /// Listens on host:port (0: any free port) for connections of `purpose`;
  /// `admit` runs on the door's thread for each one admitted (with a TLS
  /// session when `tls`). Returns the port. Throws std::runtime_error.
  uint16_t listen(const std::string& host, uint16_t port, bool reuse_address, door::Purpose purpose, bool tls,
                  AdmitFn admit);

  /// Closes the listeners and every connection still greeting; joins the
  /// thread. Idempotent.
  void stop();

  DoorCounts counts() const;
  const DoorOptions& options() const { return opts_; }

 private:
  struct Listener;
  struct Greeting;
  struct Loop;
  void run();
  DoorOptions opts_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> admitted_{0};
  std::array<std::atomic<uint64_t>, kNumRefusals> refused_{};
};

}  // namespace castor::detail
