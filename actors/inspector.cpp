// The inspector actor, the registry names, the metrics port, and the client
// that `castor inspect` uses.
#include "actors/inspector.hpp"

#include <future>
#include <thread>
#include <unordered_map>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/remote_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/caf_config.hpp"
#include "actors/errors.hpp"
#include "actors/inspection.hpp"
#include "actors/runtime.hpp"

namespace castor::detail {

namespace {

caf::behavior inspector_behavior(caf::event_based_actor* self, Runtime* rt) {
  return {[rt](inspect_atom) { return inspection_json(*rt); }};
}

// -- the metrics port: a minimal HTTP/1.x responder for Prometheus scrapes ------

constexpr size_t kMaxRequestBytes = 16 * 1024;

struct metrics_state {
  static inline const char* name = "castor.metrics";
  std::unordered_map<caf::io::connection_handle, std::string> requests;  // bytes so far
};

using metrics_pointer = caf::stateful_actor<metrics_state, caf::io::broker>*;

void respond(metrics_pointer self, caf::io::connection_handle hdl, const std::string& request, Runtime* rt) {
  auto line = request.substr(0, request.find("\r\n"));
  std::string status = "200 OK", body;
  if (line.rfind("GET /metrics ", 0) == 0 || line.rfind("GET / ", 0) == 0) {
    body = prometheus_text(*rt);
  } else {
    status = "404 Not Found";
    body = "castor serves GET /metrics here\n";
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
      [self](const caf::io::new_connection_msg& msg) {
        self->configure_read(msg.handle, caf::io::receive_policy::at_most(4096));
      },
      [self, rt](const caf::io::new_data_msg& msg) {
        auto& buf = self->state.requests[msg.handle];
        buf.append(msg.buf.begin(), msg.buf.end());
        if (buf.find("\r\n\r\n") == std::string::npos && buf.find("\n\n") == std::string::npos &&
            buf.size() < kMaxRequestBytes)
          return;  // the request's head is not complete yet
        auto request = std::move(buf);
        self->state.requests.erase(msg.handle);
        respond(self, msg.handle, request, rt);
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
    throw UnreachableError(make_error(ErrorKind::Unreachable, rt.name,
                                      "worker " + rt.name + ": cannot serve metrics on " + host + ":" +
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
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> system;
  caf::actor inspector;

  [[noreturn]] void fail(const std::string& why) const {
    throw UnreachableError(make_error(ErrorKind::Unreachable, where, "cannot inspect " + where + ": " + why));
  }
};

InspectionClient::InspectionClient(const std::string& host, uint16_t port, const TlsOptions& tls,
                                   std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  m.where = host + ":" + std::to_string(port);
  m.timeout = timeout;
  WorkerOptions opts;
  opts.tls = tls;
  m.cfg = detail::make_caf_config(opts);
  m.system = std::make_unique<caf::actor_system>(*m.cfg);
  auto& mm = m.system->middleman();
  auto peer = tls.enabled() ? caf::openssl::remote_actor<detail::worker_peer>(*m.system, host, port)
                            : mm.remote_actor<detail::worker_peer>(host, port);
  if (!peer) m.fail(m.system->render(peer.error()));
  // remote_lookup waits minutes for a silent peer: bound it here. On a
  // timeout the lookup thread still uses the actor system, so the system is
  // left alive (leaked) rather than destroyed under it.
  auto node = peer->node();
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
