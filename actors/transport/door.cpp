// The door: one epoll thread per worker accepts every connection castor
// listens for and runs its greeting (and TLS handshake) without blocking.
#include "actors/transport/door.hpp"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/transport/refusal_log.hpp"
#include "actors/transport/sockets.hpp"

namespace castor::detail {

// Note [The door]
// ~~~~~~~~~~~~~~~
// CAF 0.17's BASP trusts the bytes it reads: a header announcing a server
// handshake with no payload makes it dereference a null payload (SIGSEGV on
// the I/O thread: 8 zero bytes then 64 bytes of 0xff do it). CAF's OpenSSL
// module reads OpenSSL's per-thread error queue without ever emptying it, so
// one failed session (a refused handshake, an unclean close) fails the next
// read of every other session on that I/O thread. So no byte from outside
// reaches CAF before castor has checked it:
//  D1 castor listens itself (Door::listen) and accepts on the door's thread;
//     CAF's middleman never listens. A connection reaches BASP only when the
//     door hands it over (caf_links.cpp), the bulk path likewise.
//  D2 The greeting (greeting.hpp): the server speaks first with a fresh
//     nonce; the client answers with the purpose, castor's versions and an
//     HMAC-SHA256 over both nonces keyed by the cluster secret; the server
//     checks it and proves the key back the same way. Both sides read exact
//     lengths, so not one byte of what follows (BASP, TLS) is consumed. A
//     recorded greeting cannot be replayed: the server's nonce is new.
//  D3 Bounded: a greeting has greeting_timeout to finish (TLS handshake
//     included); at most max_pending greet at once (the oldest is closed
//     when one more comes), at most max_pending_per_host from one host. A
//     host is its IPv4 address, or its IPv6 /64 (net::network_of): a
//     machine may connect from any address of its /64. A slow or silent
//     stranger costs one socket for a few seconds, no thread.
//  D4 Without a secret the key is public: the greeting still keeps out all
//     that is not castor (scanners, garbage, other protocols, crafted BASP
//     headers), but not a stranger who implements castor's greeting. Only a
//     secret or TLS keeps those out; castor says so once (transport.cpp).
//  D5 Every refusal is logged by the worker that refused it, naming the
//     peer and the cause (refusal_log.cpp: R2 per host, R3 200 lines at
//     once, then one a second in all), and
//     counted (castor inspect shows the counts). The job does not notice.
//  D6 With TLS, the door runs the TLS handshake after the greeting (T1 of
//     Note [TLS]); the established session goes to CAF in castor's TLS
//     scribe (tls_scribe.cpp), whose every OpenSSL call keeps T6.
//  D7 Fair under a flood: each round of events first moves the greetings
//     on, then accepts at most kAcceptsPerRound per listener, so a flood in
//     the kernel's queue neither starves the greetings already accepted
//     nor closes them (D3's oldest) before their hello is read. A listener
//     that cannot accept for want of descriptors or memory rests for
//     kAcceptRest (logged): its queue waits in the kernel, and the door's
//     thread does not spin on an always-ready listener.

const char* to_string(Refusal r) {
  switch (r) {
    case Refusal::not_castor: return "not_castor";
    case Refusal::secret: return "secret";
    case Refusal::version: return "version";
    case Refusal::purpose: return "purpose";
    case Refusal::tls: return "tls";
    case Refusal::timeout: return "timeout";
    case Refusal::closed: return "closed";
    case Refusal::overload: return "overload";
  }
  return "?";
}

uint64_t DoorCounts::refused_total() const {
  uint64_t n = 0;
  for (auto x : refused) n += x;
  return n;
}

namespace {

const char* port_name(door::Purpose p) { return p == door::Purpose::basp ? "castor port" : "bulk port"; }

Refusal refusal_of(door::Verdict v) {
  switch (v) {
    case door::Verdict::secret: return Refusal::secret;
    case door::Verdict::version: return Refusal::version;
    case door::Verdict::purpose: return Refusal::purpose;
    case door::Verdict::tls: return Refusal::tls;
    default: return Refusal::not_castor;
  }
}

// D7.
constexpr int kAcceptsPerRound = 64;
constexpr std::chrono::milliseconds kAcceptRest{100};

// Nonblocking send of a short message into an empty socket buffer: all or nothing.
bool send_now(int fd, const uint8_t* data, size_t n) { return ::send(fd, data, n, MSG_NOSIGNAL) == ssize_t(n); }

}  // namespace

struct Door::Listener {
  int fd = -1;
  uint16_t port = 0;
  door::Purpose purpose = door::Purpose::basp;
  bool tls = false;
  AdmitFn admit;
};

struct Door::Greeting {
  int fd = -1;  // -1 once it ended (admitted or refused); erased after the batch
  Listener* from = nullptr;
  std::string peer;
  std::string network;  // D3's key: the peer's host, an IPv6 peer's /64
  net::Deadline deadline;
  door::Nonce server_nonce{};
  door::ClientHello hello{};
  size_t got = 0;
  SslPtr ssl;  // D6: set once the greeting passed on a TLS listener
  std::list<Greeting>::iterator self;
};

// What the door's thread owns. Listeners are added under `mtx` from other
// threads (init); greetings belong to the thread alone. A greeting that
// ends is only marked (fd -1) and erased after the batch of events, which
// may still name it.
struct Door::Loop {
  int epoll_fd = -1;
  int wake_fd = -1;
  std::mutex mtx;
  std::vector<std::unique_ptr<Listener>> listeners;
  std::list<Greeting> greetings;  // in deadline order, oldest first (D3)
  size_t live = 0;                // greetings not ended
  std::vector<std::list<Greeting>::iterator> ended;
  std::unordered_map<std::string, size_t> greeting_by_host;
  std::vector<std::pair<Listener*, net::Deadline>> resting;  // D7: off epoll until then
};

namespace {

// epoll's user data: a listener, a greeting, or the wake-up fd (0).
enum class Tag : uintptr_t { listener = 1, greeting = 2 };
template <class T>
uint64_t tagged(T* p, Tag t) {
  return uint64_t(reinterpret_cast<uintptr_t>(p)) | uint64_t(t);
}

}  // namespace

Door::Door(DoorOptions opts) : opts_(std::move(opts)), loop_(std::make_unique<Loop>()) {
  loop_->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  loop_->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (loop_->epoll_fd < 0 || loop_->wake_fd < 0) {
    std::string why = std::strerror(errno);
    for (int fd : {loop_->epoll_fd, loop_->wake_fd})
      if (fd >= 0) ::close(fd);
    throw std::runtime_error("the door cannot start: " + why);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  ::epoll_ctl(loop_->epoll_fd, EPOLL_CTL_ADD, loop_->wake_fd, &ev);
  for (auto& r : refused_) r = 0;
  thread_ = std::thread([this] { run(); });
}

void Door::run() {
  ::pthread_setname_np(::pthread_self(), "castor-door");
  auto& L = *loop_;
  // Ends a greeting: off epoll, off the per-host count, erased after the batch.
  auto end = [&](Greeting& g) {
    ::epoll_ctl(L.epoll_fd, EPOLL_CTL_DEL, g.fd, nullptr);
    if (auto it = L.greeting_by_host.find(g.network); it != L.greeting_by_host.end() && --it->second == 0)
      L.greeting_by_host.erase(it);
    g.fd = -1;
    --L.live;
    L.ended.push_back(g.self);
  };
  // Closes a greeting and says why (D5).
  auto refuse = [&](Greeting& g, Refusal r, const std::string& why, const char* kind = nullptr) {
    refused_[size_t(r)].fetch_add(1, std::memory_order_relaxed);
    int fd = g.fd;
    end(g);
    g.ssl.reset();
    ::close(fd);
    std::string line = r == Refusal::tls
                           ? "refused a TLS connection from " + g.peer + ": " + why +
                                 "; only peers with a certificate signed by the cluster CA may connect"
                           : "closed a connection from " + g.peer + " at the door of its " +
                                 port_name(g.from->purpose) + ": " + why;
    log_refusal(opts_.worker, g.peer, std::string(port_name(g.from->purpose)) + " " + (kind ? kind : to_string(r)), line);
  };
  auto admit = [&](Greeting& g) {
    Admitted a{g.fd, std::move(g.ssl), g.peer, g.from->port};
    end(g);
    admitted_.fetch_add(1, std::memory_order_relaxed);
    g.from->admit(std::move(a));
  };
  auto watch = [&](Greeting& g, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tagged(&g, Tag::greeting);
    ::epoll_ctl(L.epoll_fd, EPOLL_CTL_MOD, g.fd, &ev);
  };
  // D6: one step of the server's TLS handshake.
  auto tls_step = [&](Greeting& g) {
    std::string why;
    switch (tls_handshake_step(g.ssl.get(), why)) {
      case TlsProgress::done: return admit(g);
      case TlsProgress::want_read: return watch(g, EPOLLIN);
      case TlsProgress::want_write: return watch(g, EPOLLOUT);
      case TlsProgress::failed: return refuse(g, Refusal::tls, why);
    }
  };
  // D2: reads the client's hello (never a byte more), checks it, answers.
  auto advance = [&](Greeting& g) {
    if (g.fd < 0) return;  // ended earlier in this batch
    if (g.ssl) return tls_step(g);
    for (;;) {
      auto n = ::recv(g.fd, g.hello.data() + g.got, g.hello.size() - g.got, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0)
        return refuse(g, Refusal::closed,
                      g.got == 0 ? std::string("closed without a word (a port scan?)")
                                 : "closed after " + std::to_string(g.got) + " bytes of a greeting" +
                                       (n < 0 ? std::string(" (") + std::strerror(errno) + ")" : std::string()));
      g.got += size_t(n);
      if (!door::may_be_client_hello(g.hello.data(), g.got))
        return refuse(g, Refusal::not_castor,
                      "not castor's greeting (it sent " + door::preview(g.hello.data(), g.got) + ")");
      if (g.got == g.hello.size()) break;
    }
    auto check = door::check_client_hello(opts_.key, g.from->purpose, g.from->tls, opts_.wire_version,
                                          g.server_nonce, g.hello);
    if (check.verdict != door::Verdict::admitted) {
      auto answer = door::make_answer(opts_.key, check.verdict, g.from->purpose, g.from->tls, opts_.wire_version,
                                      g.server_nonce, {});
      (void)send_now(g.fd, answer.data(), answer.size());  // tells an honest peer why
      std::string why = door::describe(check.verdict);
      if (check.verdict == door::Verdict::version)
        why += " (its wire protocol " + std::to_string(check.wire_version) + ", ours " +
               std::to_string(opts_.wire_version) + ")";
      if (check.verdict == door::Verdict::tls) {
        why = g.from->tls ? "it does not speak TLS, and this port requires it" : "it wants TLS, and this port has none";
        return refuse(g, Refusal::tls, why, "tls mismatch");  // said apart from failed handshakes
      }
      return refuse(g, refusal_of(check.verdict), why);
    }
    auto answer = door::make_answer(opts_.key, check.verdict, g.from->purpose, g.from->tls, opts_.wire_version,
                                    g.server_nonce, check.client_nonce);
    if (!send_now(g.fd, answer.data(), answer.size())) return refuse(g, Refusal::closed, "closed before our answer");
    if (!g.from->tls) return admit(g);
    try {
      g.ssl = opts_.tls->session(g.fd, true);
    } catch (const std::exception& e) {
      return refuse(g, Refusal::tls, e.what());
    }
    tls_step(g);
  };
  auto listen_to = [&](Listener& l) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tagged(&l, Tag::listener);
    ::epoll_ctl(L.epoll_fd, EPOLL_CTL_ADD, l.fd, &ev);
  };
  // D7: a listener that cannot accept now rests, and says why.
  auto rest = [&](Listener& l, int error) {
    ::epoll_ctl(L.epoll_fd, EPOLL_CTL_DEL, l.fd, nullptr);
    L.resting.emplace_back(&l, net::Clock::now() + kAcceptRest);
    log_refusal(opts_.worker, "", std::string(port_name(l.purpose)) + " accept",
                "cannot accept a connection on its " + std::string(port_name(l.purpose)) + " " +
                    std::to_string(l.port) + ": " + std::strerror(error) + "; it tries again in " +
                    std::to_string(kAcceptRest.count()) + " ms, the connections waiting meanwhile");
  };
  auto accept_from = [&](Listener& l) {
    for (int taken = 0; taken < kAcceptsPerRound; ++taken) {  // D7: the rest in the next round
      int fd = ::accept4(l.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) rest(l, errno);
        return;  // EAGAIN: again on the next event
      }
      net::set_nodelay(fd);
      L.greetings.emplace_back();
      auto& g = L.greetings.back();
      g.self = std::prev(L.greetings.end());
      g.fd = fd;
      g.from = &l;
      g.peer = net::peer_address(fd);
      g.deadline = net::Clock::now() + opts_.greeting_timeout;
      g.server_nonce = door::random_nonce();
      ++L.live;
      g.network = net::network_of(net::host_part(g.peer));
      if (++L.greeting_by_host[g.network] > opts_.max_pending_per_host) {
        refuse(g, Refusal::overload,
               "more than " + std::to_string(opts_.max_pending_per_host) + " connections from " + g.network +
                   " are greeting at once");
        continue;
      }
      if (L.live > opts_.max_pending)  // D3: the oldest goes
        for (auto& old : L.greetings)
          if (old.fd >= 0) {
            refuse(old, Refusal::overload,
                   "more than " + std::to_string(opts_.max_pending) +
                       " connections are greeting at once; the oldest is closed");
            break;
          }
      auto hello = door::make_server_hello(opts_.wire_version, g.server_nonce);
      if (!send_now(fd, hello.data(), hello.size())) {
        refuse(g, Refusal::closed, "closed before our greeting");
        continue;
      }
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = tagged(&g, Tag::greeting);
      ::epoll_ctl(L.epoll_fd, EPOLL_CTL_ADD, fd, &ev);
    }
  };
  auto erase_ended = [&] {
    for (auto it : L.ended) L.greetings.erase(it);
    L.ended.clear();
  };

  std::array<epoll_event, 64> events;
  while (!stopped_.load()) {
    int timeout = -1;
    if (!L.greetings.empty()) timeout = std::max(1, net::ms_until(L.greetings.front().deadline));
    for (const auto& r : L.resting) {
      int until = std::max(1, net::ms_until(r.second));
      timeout = timeout < 0 ? until : std::min(timeout, until);
    }
    int n = ::epoll_wait(L.epoll_fd, events.data(), int(events.size()), timeout);
    // D7: the greetings of this round first, then the listeners.
    for (auto want : {Tag::greeting, Tag::listener})
      for (int i = 0; i < n && !stopped_.load(); ++i) {
        auto data = events[size_t(i)].data.u64;
        if (data == 0) continue;  // woken to stop
        auto tag = Tag(data & 3);
        if (tag != want) continue;
        auto* ptr = reinterpret_cast<void*>(uintptr_t(data & ~uint64_t(3)));
        if (tag == Tag::listener)
          accept_from(*static_cast<Listener*>(ptr));
        else
          advance(*static_cast<Greeting*>(ptr));
      }
    erase_ended();
    auto rested = net::Clock::now();
    for (auto it = L.resting.begin(); it != L.resting.end();) {
      if (it->second > rested) {
        ++it;
        continue;
      }
      listen_to(*it->first);
      it = L.resting.erase(it);
    }
    // D3: greetings past their deadline (the list is in deadline order).
    auto now = net::Clock::now();
    for (auto it = L.greetings.begin(); it != L.greetings.end() && it->deadline <= now; ++it) {
      auto timeout_ms = std::to_string(opts_.greeting_timeout.count());
      if (it->ssl)
        refuse(*it, Refusal::tls, "the TLS handshake did not finish within " + timeout_ms + " ms");
      else
        refuse(*it, Refusal::timeout,
               "no greeting within " + timeout_ms + " ms (" + std::to_string(it->got) + " bytes)");
    }
    erase_ended();
  }
  for (auto& g : L.greetings)
    if (g.fd >= 0) ::close(g.fd);
  L.greetings.clear();
}

Door::~Door() { stop(); }

uint16_t Door::listen(const std::string& host, uint16_t port, bool reuse_address, door::Purpose purpose, bool tls,
                      AdmitFn admit) {
  if (tls && !opts_.tls) throw std::runtime_error("the door has no TLS context");
  std::string why;
  int fd = net::listen_tcp(host, port, reuse_address, why);
  if (fd < 0) throw std::runtime_error(why);
  auto l = std::make_unique<Listener>();
  l->fd = fd;
  l->port = net::local_port(fd);
  l->purpose = purpose;
  l->tls = tls;
  l->admit = std::move(admit);
  auto* raw = l.get();
  {
    std::lock_guard<std::mutex> lock(loop_->mtx);
    loop_->listeners.push_back(std::move(l));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tagged(raw, Tag::listener);
  if (::epoll_ctl(loop_->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0)
    throw std::runtime_error(std::string("epoll_ctl: ") + std::strerror(errno));
  return raw->port;
}

void Door::stop() {
  if (stopped_.exchange(true)) return;
  uint64_t one = 1;
  (void)!::write(loop_->wake_fd, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(loop_->mtx);
  for (auto& l : loop_->listeners) ::close(l->fd);
  loop_->listeners.clear();
  ::close(loop_->epoll_fd);
  ::close(loop_->wake_fd);
}

DoorCounts Door::counts() const {
  DoorCounts c;
  c.admitted = admitted_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < kNumRefusals; ++i) c.refused[i] = refused_[i].load(std::memory_order_relaxed);
  return c;
}

}  // namespace castor::detail
