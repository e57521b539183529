// One worker's snapshot for `castor inspect` (JSON) and the metrics port
// (Prometheus text). Everything read here is thread-safe (atomics, or a
// layer's own mutex held briefly), so neither reader waits on an actor.
#include "actors/observe/inspection.hpp"

#include <chrono>
#include <sstream>

#include <nlohmann/json.hpp>

#include "actors/transport/bulk/bulk_path.hpp"
#include "actors/runtime/runtime.hpp"
#include "actors/transport/transport.hpp"

namespace castor::detail {

namespace {

using nlohmann::json;

const char* to_string(RunState s) {
  switch (s) {
    case RunState::starting: return "starting";
    case RunState::running: return "running";
    case RunState::shutting_down: return "shutting_down";
    case RunState::stopped: return "stopped";
  }
  return "?";
}

bool alive(const Runtime& rt, const World& world, WorkerId r) {
  if (r == rt.rank()) return rt.state.load() != RunState::stopped;
  return world.alive(r);
}

std::string address_of(const Member& m) { return m.host + ":" + std::to_string(m.port); }

json snapshot(Runtime& rt) {
  json out;
  auto uptime = std::chrono::steady_clock::now() - rt.started_at;
  const auto& world = rt.world();  // one snapshot for the whole answer
  out["worker"] = {{"name", rt.name()},
                   {"rank", rt.rank()},
                   {"address", world.has(rt.rank()) ? address_of(world.member(rt.rank())) : rt.opts.host},
                   {"world_epoch", world.epoch()},
                   {"state", to_string(rt.state.load())},
                   {"uptime_ms", std::chrono::duration_cast<std::chrono::milliseconds>(uptime).count()}};

  auto& workers = out["workers"] = json::array();
  auto released = rt.released.snapshot();
  for (auto& w : world.members()) {
    json member = {{"name", w.name}, {"rank", w.rank}, {"address", address_of(w)}, {"alive", alive(rt, world, w.rank)},
                   {"incarnation", w.incarnation}};
    if (!w.alive)  // since when, as castor inspect shows it
      member["dead_for_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now() - w.died_at).count();
    if (auto it = released.find(w.rank); it != released.end())  // what it left behind, released here
      member["released"] = it->second;
    workers.push_back(std::move(member));
  }

  auto& rrefs = out["rrefs"] = json::object();
  auto& owned = rrefs["owned"] = json::array();
  auto& pending = rrefs["pending_users"] = json::array();
  if (rt.rrefs) {
    auto in = rt.rrefs->inspect();
    for (auto& o : in.owned)
      owned.push_back({{"id", o.id}, {"type", o.type}, {"bytes", o.bytes}, {"forks", o.forks}, {"age_ms", o.age_ms}});
    for (auto& u : in.pending_users)
      pending.push_back({{"id", u.id}, {"fork", u.fork}, {"owner", u.owner}, {"age_ms", u.age_ms}});
    rrefs["debug_info"] = rt.rrefs->debug_info();
  }

  auto& autograd = out["autograd"] = json::object();
  auto& contexts = autograd["contexts"] = json::array();
  if (rt.autograd) {
    for (auto& c : rt.autograd->inspect().contexts) contexts.push_back({{"id", c.id}, {"age_ms", c.age_ms}});
    auto info = rt.autograd->debug_info();
    autograd["running_graph_tasks"] = info["num_running_graph_tasks"];
    autograd["debug_info"] = info;
  }

  auto& calls = out["calls"] = json::object();
  auto& by_peer = calls["outgoing_in_flight"] = json::object();
  for (auto& [to, n] : rt.pending.count_by_peer()) by_peer[rt.name_of(to)] = n;
  calls["incoming_in_flight"] = rt.counters.in_flight.load();
  auto& running = calls["running"] = json::array();  // oldest first
  auto now = std::chrono::steady_clock::now();
  for (const auto& c : rt.running.snapshot())
    running.push_back({{"function", c.function},
                       {"caller", rt.name_of(c.caller)},
                       {"age_ms", std::chrono::duration_cast<std::chrono::milliseconds>(now - c.since).count()}});
  calls["messages_sent"] = rt.counters.sent.load();
  calls["messages_received"] = rt.counters.received.load();

  // Note [The door]: what came to this worker's ports and was turned away.
  if (rt.transport) {
    auto d = rt.transport->counts();
    auto& door = out["door"] = json::object();
    door["authenticated"] = rt.transport->authenticated();
    door["tls"] = rt.transport->tls();
    door["admitted"] = d.admitted;
    auto& refused = door["refused"] = json::object();
    for (size_t i = 0; i < kNumRefusals; ++i) refused[to_string(Refusal(i))] = d.refused[i];
  }

  out["bulk"] = {{"enabled", rt.bulk != nullptr},
                 {"tls", rt.bulk != nullptr && rt.opts.tls.enabled()},
                 {"port", rt.bulk ? rt.bulk->port() : 0},
                 {"messages_sent", rt.stats.bulk_sent.load()},
                 {"tensor_bytes_sent", rt.stats.bulk_bytes_sent.load()},
                 {"messages_received", rt.stats.bulk_received.load()},
                 {"tensor_bytes_received", rt.stats.bulk_bytes_received.load()},
                 {"lane_messages_sent", rt.stats.lane_sent.load()},
                 {"lane_writes", rt.stats.lane_writes.load()},
                 {"heads_written_by_sender", rt.stats.heads_by_sender.load()},
                 {"copies_revoked", rt.stats.copies_revoked.load()},
                 {"views_sent_without_answer", rt.stats.views_unanswered.load()},
                 {"lane_messages_received", rt.stats.lane_received.load()}};

  auto& messages = out["messages"] = json::object();
  messages["stale_refused"] = rt.stats.stale_refused.load();  // RJ6 of Note [Rejoin]
  for (size_t i = 0; i < kNumMessageTypes; ++i)
    messages[to_string(MessageType(i))] = rt.stats.received[i].load(std::memory_order_relaxed);

  auto& latency = out["latency_us"] = json::object();
  for (size_t i = 0; i < kNumCallLatencyKinds; ++i) {
    auto& h = rt.stats.latency[i];
    auto n = h.count();
    latency[to_string(CallLatencyKind(i))] = {{"count", n},
                                              {"mean", n ? h.sum_us() / double(n) : 0.0},
                                              {"p50", h.quantile_us(0.5)},
                                              {"p90", h.quantile_us(0.9)},
                                              {"p99", h.quantile_us(0.99)}};
  }

  if (rt.executor) {
    auto s = rt.executor->stats();
    out["executor"] = {{"queued", s.queued}, {"running", s.running}, {"threads", s.threads},
                       {"idle", s.idle},     {"blocked", s.blocked}};
  }
  return out;
}

// Prometheus label values: backslash, quote and newline escaped.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string inspection_json(Runtime& rt) { return snapshot(rt).dump(); }

std::string prometheus_text(Runtime& rt) {
  auto s = snapshot(rt);
  std::ostringstream out;
  auto w = "worker=\"" + label(rt.name()) + "\"";
  auto metric = [&](const char* name, const char* type, const char* help) {
    out << "# HELP castor_" << name << ' ' << help << "\n# TYPE castor_" << name << ' ' << type << '\n';
  };
  metric("up", "gauge", "1 while the worker runs.");
  out << "castor_up{" << w << "} " << (s["worker"]["state"] == "running" ? 1 : 0) << '\n';
  metric("uptime_seconds", "gauge", "Seconds since the worker started.");
  out << "castor_uptime_seconds{" << w << "} " << s["worker"]["uptime_ms"].get<int64_t>() / 1000.0 << '\n';
  metric("peer_alive", "gauge", "1 for each worker this worker considers alive.");
  for (auto& p : s["workers"])
    out << "castor_peer_alive{" << w << ",peer=\"" << label(p["name"]) << "\"} " << (p["alive"].get<bool>() ? 1 : 0)
        << '\n';
  if (s["rrefs"].contains("debug_info")) {
    metric("rref", "gauge", "RRef counters (rref_debug_info keys).");
    for (auto& [k, v] : s["rrefs"]["debug_info"].items())
      out << "castor_rref{" << w << ",key=\"" << k << "\"} " << v.get<int64_t>() << '\n';
  }
  if (s["autograd"].contains("debug_info")) {
    metric("autograd", "gauge", "Distributed autograd counters (autograd_debug_info keys).");
    for (auto& [k, v] : s["autograd"]["debug_info"].items())
      out << "castor_autograd{" << w << ",key=\"" << k << "\"} " << v.get<int64_t>() << '\n';
  }
  metric("calls_in_flight", "gauge", "Our calls awaiting a reply, by the worker called.");
  for (auto& [peer, n] : s["calls"]["outgoing_in_flight"].items())
    out << "castor_calls_in_flight{" << w << ",peer=\"" << label(peer) << "\"} " << n.get<int64_t>() << '\n';
  metric("requests_in_flight", "gauge", "Requests from others being served here.");
  out << "castor_requests_in_flight{" << w << "} " << s["calls"]["incoming_in_flight"].get<int64_t>() << '\n';
  metric("messages_received_total", "counter", "Messages handled by the worker actor, by type.");
  for (auto& [type, n] : s["messages"].items())
    out << "castor_messages_received_total{" << w << ",type=\"" << type << "\"} " << n.get<uint64_t>() << '\n';
  metric("bulk_tensor_bytes_total", "counter", "Tensor bytes on the bulk links (Note [Bulk path]).");
  out << "castor_bulk_tensor_bytes_total{" << w << ",direction=\"sent\"} " << s["bulk"]["tensor_bytes_sent"].get<uint64_t>()
      << '\n';
  out << "castor_bulk_tensor_bytes_total{" << w << ",direction=\"received\"} "
      << s["bulk"]["tensor_bytes_received"].get<uint64_t>() << '\n';
  if (s.contains("door")) {
    metric("door_admitted_total", "counter", "Connections that passed the door (Note [The door]).");
    out << "castor_door_admitted_total{" << w << "} " << s["door"]["admitted"].get<uint64_t>() << '\n';
    metric("door_refused_total", "counter", "Connections the door closed, by cause.");
    for (auto& [cause, n] : s["door"]["refused"].items())
      out << "castor_door_refused_total{" << w << ",cause=\"" << cause << "\"} " << n.get<uint64_t>() << '\n';
  }
  metric("call_latency_microseconds", "summary", "Round trips of this worker's calls, by kind.");
  for (auto& [kind, h] : s["latency_us"].items()) {
    auto lk = w + ",kind=\"" + kind + "\"";
    for (auto [quantile, key] : {std::pair{"0.5", "p50"}, {"0.9", "p90"}, {"0.99", "p99"}})
      out << "castor_call_latency_microseconds{" << lk << ",quantile=\"" << quantile << "\"} " << h[key].get<double>()
          << '\n';
    out << "castor_call_latency_microseconds_sum{" << lk << "} " << h["mean"].get<double>() * h["count"].get<double>()
        << '\n';
    out << "castor_call_latency_microseconds_count{" << lk << "} " << h["count"].get<uint64_t>() << '\n';
  }
  if (s.contains("executor")) {
    metric("executor_queue_depth", "gauge", "Tasks waiting for an executor thread.");
    out << "castor_executor_queue_depth{" << w << "} " << s["executor"]["queued"].get<uint64_t>() << '\n';
    metric("executor_threads", "gauge", "Executor threads, by state.");
    for (auto key : {"running", "threads", "idle", "blocked"})
      out << "castor_executor_threads{" << w << ",state=\"" << key << "\"} " << s["executor"][key].get<uint64_t>()
          << '\n';
  }
  return out.str();
}

}  // namespace castor::detail
