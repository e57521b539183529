// The inspector actor, the registry names, the metrics port, and the client
// that `castor inspect` uses.
#include "actors/observe/inspector.hpp"

#include <future>
#include <thread>
#include <unordered_map>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/transport/caf_config.hpp"
#include "actors/api/errors.hpp"
#include "actors/observe/inspection.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/transport/caf_links.hpp"
#include "actors/transport/greeting.hpp"
#include "actors/transport/refusal_log.hpp"
#include "actors/transport/tls.hpp"
#include "actors/transport/transport.hpp"

namespace castor::detail {

namespace {

caf::behavior inspector_behavior(caf::event_based_actor* self, Runtime* rt) {
  return {[rt](inspect_atom) { return inspection_json(*rt); }};
}

// -- the metrics port: a minimal HTTP/1.x responder for Prometheus scrapes ------
// Prometheus cannot speak the door's greeting (Note [The door]), so this port
// keeps its own, as strict: castor's parser, nothing reaches BASP or any
// other actor, at most kMaxConnections at once, a request head of at most
// kMaxRequestBytes within kRequestTimeout, only GET answered; everything
// else is closed with a line (R2 of the door's log) and counted.

constexpr size_t kMaxRequestBytes = 16 * 1024;
constexpr size_t kMaxConnections = 64;
constexpr auto kRequestTimeout = std::chrono::seconds(5);
using metrics_timeout_atom = caf::atom_constant<caf::atom("m_timeout")>;

struct metrics_state {
  static inline const char* name = "castor.metrics";
  std::unordered_map<caf::io::connection_handle, std::string> requests;  // bytes so far
};

using metrics_pointer = caf::stateful_actor<metrics_state, caf::io::broker>*;

std::string peer_of(metrics_pointer self, caf::io::connection_handle hdl) {
  return self->remote_addr(hdl) + ":" + std::to_string(self->remote_port(hdl));
}

void refuse(metrics_pointer self, caf::io::connection_handle hdl, Runtime* rt, const std::string& why) {
  log_refusal(rt->name(), peer_of(self, hdl), "metrics port",
              "closed a connection from " + peer_of(self, hdl) + " at its metrics port: " + why);
  self->state.requests.erase(hdl);
  self->close(hdl);
}

void respond(metrics_pointer self, caf::io::connection_handle hdl, const std::string& request, Runtime* rt) {
  auto line = request.substr(0, request.find_first_of("\r\n"));
  std::string status = "200 OK", body;
  if (line.rfind("GET /metrics ", 0) == 0 || line.rfind("GET / ", 0) == 0) {
    body = prometheus_text(*rt);
  } else if (line.rfind("GET ", 0) == 0) {
    status = "404 Not Found";
    body = "castor serves GET /metrics here\n";
  } else {
    return refuse(self, hdl, rt,
                  "not an HTTP GET (it sent " +
                      door::preview(reinterpret_cast<const uint8_t*>(request.data()), request.size()) + ")");
  }
  auto head = "HTTP/1.1 " + status + "\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " +
              std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  self->write(hdl, head.size(), head.data());
  self->write(hdl, body.size(), body.data());
  self->flush(hdl);
  self->close(hdl);  // CAF closes after the pending bytes are written
}

caf::behavior metrics_broker(metrics_pointer self, Runtime* rt, caf::io::doorman_ptr door) {
  self->add_doorman(std::move(door));
  return {
      [self, rt](const caf::io::new_connection_msg& msg) {
        if (self->state.requests.size() >= kMaxConnections) {
          self->state.requests.emplace(msg.handle, std::string());
          return refuse(self, msg.handle, rt, std::to_string(kMaxConnections) + " connections are open already");
        }
        self->state.requests.emplace(msg.handle, std::string());
        self->configure_read(msg.handle, caf::io::receive_policy::at_most(4096));
        self->delayed_send(self, kRequestTimeout, metrics_timeout_atom::value, msg.handle);
      },
      [self, rt](const caf::io::new_data_msg& msg) {
        auto it = self->state.requests.find(msg.handle);
        if (it == self->state.requests.end()) return;  // answered or refused already
        auto& buf = it->second;
        buf.append(msg.buf.begin(), msg.buf.end());
        if (buf.size() >= 4 && buf.rfind("GET ", 0) != 0)  // fail fast on what is not HTTP
          return respond(self, msg.handle, buf, rt);
        if (buf.size() > kMaxRequestBytes)
          return refuse(self, msg.handle, rt, "a request head above " + std::to_string(kMaxRequestBytes) + " bytes");
        if (buf.find("\r\n\r\n") == std::string::npos && buf.find("\n\n") == std::string::npos)
          return;  // the request's head is not complete yet
        auto request = std::move(buf);
        self->state.requests.erase(it);
        respond(self, msg.handle, request, rt);
      },
      [self, rt](metrics_timeout_atom, caf::io::connection_handle hdl) {
        auto it = self->state.requests.find(hdl);
        if (it == self->state.requests.end()) return;
        refuse(self, hdl, rt, "no complete request within " + std::to_string(kRequestTimeout.count()) + " s (" +
                                  std::to_string(it->second.size()) + " bytes)");
      },
      [self](const caf::io::connection_closed_msg& msg) { self->state.requests.erase(msg.handle); },
      [](const caf::io::acceptor_closed_msg&) {},
  };
}

}  // namespace

void start_inspection(Runtime& rt) {
  auto& sys = *rt.system;
  rt.inspector = sys.spawn(inspector_behavior, &rt);
  sys.registry().put(kWorkerRegistryName, rt.actor);
  sys.registry().put(kInspectorRegistryName, rt.inspector);
  if (rt.opts.metrics_port == 0) return;
  auto& mm = sys.middleman();
  auto host = rt.opts.metrics_host.empty() ? rt.opts.host : rt.opts.metrics_host;
  auto door = mm.backend().new_tcp_doorman(rt.opts.metrics_port, host.c_str(), true);
  if (!door)
    throw UnreachableError(make_error(ErrorKind::Unreachable, rt.name(),
                                      "worker " + rt.name() + ": cannot serve metrics on " + host + ":" +
                                          std::to_string(rt.opts.metrics_port) + ": " + sys.render(door.error())));
  rt.metrics_server = mm.spawn_broker(metrics_broker, &rt, std::move(*door));
}

void stop_inspection(Runtime& rt) {
  if (!rt.system) return;
  rt.system->registry().erase(kWorkerRegistryName);
  rt.system->registry().erase(kInspectorRegistryName);
  if (rt.inspector) caf::anon_send_exit(rt.inspector, caf::exit_reason::user_shutdown);
  if (rt.metrics_server) caf::anon_send_exit(rt.metrics_server, caf::exit_reason::user_shutdown);
  rt.inspector = nullptr;
  rt.metrics_server = nullptr;
}

}  // namespace castor::detail

namespace castor {

struct InspectionClient::Impl {
  std::string where;
  std::chrono::milliseconds timeout;
  std::unique_ptr<detail::Transport> transport;
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> system;
  caf::actor inspector;

  [[noreturn]] void fail(const std::string& why) const {
    throw UnreachableError(make_error(ErrorKind::Unreachable, where, "cannot inspect " + where + ": " + why));
  }
};

InspectionClient::InspectionClient(const std::string& host, uint16_t port, const TlsOptions& tls,
                                   const std::string& secret, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  m.where = host + ":" + std::to_string(port);
  m.timeout = timeout;
  WorkerOptions opts;
  opts.tls = tls;
  detail::check_tls(opts);
  // Note [The door]: the inspector is reached through the worker's door
  // like any peer, with the cluster's secret and TLS files.
  m.transport = std::make_unique<detail::Transport>("inspect", secret, tls, timeout);
  m.cfg = detail::make_caf_config(opts);
  m.system = std::make_unique<caf::actor_system>(*m.cfg);
  auto& mm = m.system->middleman();
  auto link = detail::connect_actor(*m.system, m.transport->dial_options(), host, port,
                                    m.system->message_types<detail::worker_peer>(),
                                    std::chrono::steady_clock::now() + timeout);
  if (!link.actor) m.fail(link.error);
  auto peer = caf::actor_cast<detail::worker_peer>(std::move(link.actor));
  // remote_lookup waits minutes for a silent peer: bound it here. On a
  // timeout the lookup thread still uses the actor system, so the system is
  // left alive (leaked) rather than destroyed under it.
  auto node = peer.node();
  auto task = std::make_shared<std::packaged_task<caf::strong_actor_ptr()>>([&mm, node] {
    auto found = mm.remote_lookup(detail::kInspectorRegistryName, node);
    caf::logger::set_current_actor_system(nullptr);
    return found;
  });
  auto lookup = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  if (lookup.wait_for(timeout) != std::future_status::ready) {
    (void)m.system.release();
    (void)m.cfg.release();
    m.fail("no answer from its registry within " + std::to_string(timeout.count()) + " ms");
  }
  m.inspector = caf::actor_cast<caf::actor>(lookup.get());
  if (!m.inspector) m.fail("no actor named 'inspector' in its registry (not a castor worker, or too old)");
}

InspectionClient::~InspectionClient() {
  if (!impl_) return;
  impl_->inspector = nullptr;
  caf::logger::set_current_actor_system(nullptr);
}

std::string InspectionClient::snapshot() {
  auto& m = *impl_;
  caf::scoped_actor self{*m.system};
  std::string out;
  std::optional<std::string> failure;
  self->request(m.inspector, m.timeout, detail::inspect_atom::value)
      .receive([&](std::string& json) { out = std::move(json); },
               [&](caf::error& e) { failure = m.system->render(e); });
  caf::logger::set_current_actor_system(nullptr);
  if (failure) m.fail(*failure);
  return out;
}

}  // namespace castor
