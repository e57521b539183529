// Small POSIX socket helpers for castor's own connections (the door, the
// bulk links): every wait bounded by a deadline, no SIGPIPE.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

struct pollfd;

namespace castor::detail::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

/// Milliseconds until `d` (at least 0), for poll().
int ms_until(Deadline d);

/// poll() of one descriptor until `deadline`, resumed after a signal with
/// the time left (a signal is not a timeout): 1 ready, 0 past the deadline,
/// -1 an error (errno).
int poll_until(pollfd& p, Deadline deadline);

/// Told of each socket that a dial opens (its fd) and, just before the dial
/// closes one, of its end (-1), so that another thread may shut it down to
/// end the dial at once (BulkPath::stop_dialing). Empty: nobody watches.
using SocketWatch = std::function<void(int)>;

/// A TCP connection to host:port within the deadline; the socket is
/// non-blocking and TCP_NODELAY. -1 and `why` on failure.
int connect_tcp(const std::string& host, uint16_t port, Deadline deadline, std::string& why,
                const SocketWatch& watch = {});

/// A listening socket on host:port (0: any free port). -1 and `why` on failure.
int listen_tcp(const std::string& host, uint16_t port, bool reuse_address, std::string& why);

/// Writes / reads exactly `n` bytes on a blocking or non-blocking socket,
/// waiting at most until `deadline`. `why` says what went wrong.
bool send_exact(int fd, const void* data, size_t n, Deadline deadline, std::string& why);
bool recv_exact(int fd, void* data, size_t n, Deadline deadline, std::string& why);

/// The same on a blocking socket, without a deadline (the bulk links'
/// writers and readers: a socket timeout or shutdown() ends their wait).
bool write_all(int fd, const void* data, size_t n);
bool read_all(int fd, void* data, size_t n);

void set_nonblocking(int fd, bool on);
void set_nodelay(int fd);
/// TCP_NODELAY and 4 MiB socket buffers, for links that carry megabytes.
void set_bulk_buffers(int fd);
/// Whether `fd`'s send buffer takes `bytes` more now (the memory its queued,
/// unacknowledged data takes, plus `bytes`, within the buffer's limit): a
/// blocking write of that much would not wait for the peer. False on any error.
bool has_send_room(int fd, size_t bytes);

/// "10.0.0.9:51234" of the peer (or "?"); the host part alone.
std::string peer_address(int fd);
std::string host_part(const std::string& address);
/// The network a host (host_part's form) is counted under by the door's
/// bound per host (D3 of Note [The door]): an IPv4 address as it is, an
/// IPv6 address that carries an IPv4 one (IPv4-mapped, NAT64's 64:ff9b::/96)
/// as that IPv4 address, any other IPv6 address as its /64
/// ("2001:db8:1:2::/64"), and what is neither as it is.
std::string network_of(const std::string& host);
uint16_t local_port(int fd);

/// A TCP port on 127.0.0.1 that is free now, for a local job's or a test's
/// workers to listen on. Picked at random below the kernel's ephemeral
/// range: a port from bind(0) lies inside it, where any outgoing connection
/// of a process beside us may take it before our worker listens (a fresh
/// suite run once failed with "Address already in use"). Falls back to
/// bind(0) when there is no room below the range.
uint16_t free_local_port();

}  // namespace castor::detail::net
