#include "apps/inspect.hpp"

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "actors/api/errors.hpp"
#include "apps/common/flags.hpp"
#include "actors/observe/inspector.hpp"
#include "actors/transport/cluster_secret.hpp"
#include "config/cluster_file.hpp"

namespace castor::apps {

namespace {

using nlohmann::json;

constexpr const char* kUsage =
    "usage: castor inspect <host:port | worker name> [flags]\n"
    "  Shows a running worker: the workers it knows and whether they are alive, the RRefs it\n"
    "  owns, forks awaiting confirmation, autograd contexts, calls in flight, messages by type,\n"
    "  call latencies and its executor. --config takes TLS files, the cluster secret (and worker\n"
    "  names) from a cluster file; otherwise the secret comes from --secret-file or CASTOR_SECRET.\n";

// Note [Flags], F1.
po::options_description inspect_flags() {
  auto flags = command_flags();
  flags.add_options()
      ("config", po::value<std::string>()->value_name("FILE"), "the cluster file: TLS files, secret, worker names")
      ("secret-file", po::value<std::string>()->value_name("FILE"), "the cluster secret, from a file")
      ("json", po::bool_switch(), "print the snapshot as JSON")
      ("watch", po::bool_switch(), "redraw every --interval seconds until interrupted or --count snapshots")
      ("interval", po::value<double>()->default_value(1.0, shown(1.0))->value_name("S"), "seconds between snapshots with --watch")
      ("count", po::value<long>()->default_value(0)->value_name("N"), "stop after N snapshots (0: never)")
      ("timeout-ms", po::value<long>()->default_value(5000)->value_name("MS"), "limit of the connection and each snapshot");
  return flags;
}

constexpr size_t kMaxRows = 20;

std::string age(int64_t ms) {
  char buf[32];
  if (ms < 10000) std::snprintf(buf, sizeof buf, "%.1fs", double(ms) / 1000);
  else if (ms < 600000) std::snprintf(buf, sizeof buf, "%llds", (long long)(ms / 1000));
  else std::snprintf(buf, sizeof buf, "%lldm", (long long)(ms / 60000));
  return buf;
}

std::string bytes(int64_t b) {
  char buf[32];
  if (b < 1024) std::snprintf(buf, sizeof buf, "%lld B", (long long)b);
  else if (b < (1 << 20)) std::snprintf(buf, sizeof buf, "%.1f KiB", double(b) / 1024);
  else std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / (1 << 20));
  return buf;
}

std::string row(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string row(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return std::string(buf) + "\n";
}

struct Target {
  std::string host;
  uint16_t port = 0;
  TlsOptions tls;
  std::string secret;  // Note [The door]
};

// "host:port", or a worker's name in the cluster file.
Target resolve(const std::string& what, const std::string& config_path) {
  Target t;
  std::optional<config::ClusterFile> file;
  if (!config_path.empty()) {
    file = config::load_cluster_file(config_path);
    t.tls = file->workers.front().tls;
    t.secret = file->shared.secret;
  }
  auto colon = what.rfind(':');
  if (colon != std::string::npos && colon + 1 < what.size() &&
      what.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
    t.host = what.substr(0, colon);
    auto digits = what.substr(colon + 1);
    auto port = digits.size() > 5 ? 0L : std::stol(digits);  // more digits than 65535 has would overflow stol
    if (port < 1 || port > 65535) throw std::invalid_argument("port " + digits + " is not in 1..65535");
    t.port = uint16_t(port);
    return t;
  }
  if (!file) throw std::invalid_argument("'" + what + "' is not host:port (a worker name needs --config)");
  const auto& w = file->worker(what);
  t.host = w.host, t.port = w.port, t.tls = w.tls;
  return t;
}

}  // namespace

std::string render_inspection(const std::string& snapshot_json) {
  auto s = json::parse(snapshot_json);
  std::string out;
  auto& me = s["worker"];
  out += row("%s (rank %d) at %s  %s  up %s", me["name"].get<std::string>().c_str(), me["rank"].get<int>(),
             me["address"].get<std::string>().c_str(), me["state"].get<std::string>().c_str(),
             age(me["uptime_ms"].get<int64_t>()).c_str());

  out += "\nWORKERS\n";
  out += row("  %-5s %-16s %-24s %s", "rank", "name", "address", "alive");
  for (auto& w : s["workers"]) {
    std::string alive = w["alive"].get<bool>() ? "yes" : "NO";
    if (w.contains("dead_for_ms")) alive += ", dead for " + age(w["dead_for_ms"].get<int64_t>());
    if (w.contains("released")) {  // what it left behind, released here
      std::string what;
      for (auto& [kind, count] : w["released"].items())
        what += (what.empty() ? "" : ", ") + kind + " " + std::to_string(count.get<int64_t>());
      alive += "; released: " + what;
    }
    out += row("  %-5d %-16s %-24s %s", w["rank"].get<int>(), w["name"].get<std::string>().c_str(),
               w["address"].get<std::string>().c_str(), alive.c_str());
  }

  auto& owned = s["rrefs"]["owned"];
  out += row("\nOWNED RREFS (%zu)", owned.size());
  if (!owned.empty()) out += row("  %-14s %-32s %10s %6s %7s", "id", "type", "size", "forks", "age");
  size_t n = 0;
  for (auto& o : owned) {
    if (n++ == kMaxRows) {
      out += row("  ... %zu more", owned.size() - kMaxRows);
      break;
    }
    out += row("  %-14s %-32s %10s %6lld %7s", o["id"].get<std::string>().c_str(), o["type"].get<std::string>().c_str(),
               bytes(o["bytes"].get<int64_t>()).c_str(), (long long)o["forks"].get<int64_t>(),
               age(o["age_ms"].get<int64_t>()).c_str());
  }
  auto& pending = s["rrefs"]["pending_users"];
  out += row("\nUSER RREFS AWAITING CONFIRMATION (%zu)", pending.size());
  n = 0;
  for (auto& u : pending) {
    if (n++ == kMaxRows) break;
    out += row("  %-14s fork %-14s owner %-16s %7s", u["id"].get<std::string>().c_str(),
               u["fork"].get<std::string>().c_str(), u["owner"].get<std::string>().c_str(),
               age(u["age_ms"].get<int64_t>()).c_str());
  }

  auto& ag = s["autograd"];
  out += row("\nAUTOGRAD  contexts %zu, running graph tasks %lld", ag["contexts"].size(),
             (long long)ag.value("running_graph_tasks", int64_t(0)));
  n = 0;
  for (auto& c : ag["contexts"]) {
    if (n++ == kMaxRows) break;
    out += row("  context %-14s %7s", c["id"].get<std::string>().c_str(), age(c["age_ms"].get<int64_t>()).c_str());
  }

  auto& calls = s["calls"];
  std::string per_peer;
  for (auto& [peer, count] : calls["outgoing_in_flight"].items())
    per_peer += " " + peer + "=" + std::to_string(count.get<int64_t>());
  out += row("\nCALLS IN FLIGHT  ours:%s  theirs here: %lld", per_peer.empty() ? " none" : per_peer.c_str(),
             (long long)calls["incoming_in_flight"].get<int64_t>());
  if (calls.contains("running")) {
    n = 0;
    for (auto& c : calls["running"]) {
      if (n++ == kMaxRows) break;
      out += row("  running %-20s from %-12s %7s", ("'" + c["function"].get<std::string>() + "'").c_str(),
                 c["caller"].get<std::string>().c_str(), age(c["age_ms"].get<int64_t>()).c_str());
    }
  }

  out += "\nMESSAGES HANDLED\n";
  std::string line = " ";
  for (auto& [type, count] : s["messages"].items()) {
    auto item = " " + type + " " + std::to_string(count.get<uint64_t>());
    if (line.size() + item.size() > 100) out += line + "\n", line = " ";
    line += item;
  }
  out += line + "\n";

  out += "\nCALL LATENCY (round trip, µs)\n";
  out += row("  %-8s %10s %10s %10s %10s %10s", "kind", "count", "mean", "p50", "p90", "p99");
  for (auto& [kind, h] : s["latency_us"].items())
    out += row("  %-8s %10llu %10.0f %10.0f %10.0f %10.0f", kind.c_str(), (unsigned long long)h["count"].get<uint64_t>(),
               h["mean"].get<double>(), h["p50"].get<double>(), h["p90"].get<double>(), h["p99"].get<double>());

  if (s.contains("door")) {
    auto& d = s["door"];
    std::string refused;
    uint64_t total = 0;
    for (auto& [cause, n] : d["refused"].items())
      if (n.get<uint64_t>() > 0) {
        refused += (refused.empty() ? "" : ", ") + cause + " " + std::to_string(n.get<uint64_t>());
        total += n.get<uint64_t>();
      }
    out += row("\nDOOR  admitted %llu  refused %llu%s  secret %s  tls %s", (unsigned long long)d["admitted"].get<uint64_t>(),
               (unsigned long long)total, refused.empty() ? "" : (" (" + refused + ")").c_str(),
               d["authenticated"].get<bool>() ? "yes" : "no", d["tls"].get<bool>() ? "yes" : "no");
  }

  if (s.contains("executor")) {
    auto& e = s["executor"];
    out += row("\nEXECUTOR  queued %llu  running %llu  threads %llu (idle %llu, blocked in nested calls %llu)",
               (unsigned long long)e["queued"].get<uint64_t>(), (unsigned long long)e["running"].get<uint64_t>(),
               (unsigned long long)e["threads"].get<uint64_t>(), (unsigned long long)e["idle"].get<uint64_t>(),
               (unsigned long long)e["blocked"].get<uint64_t>());
  }
  return out;
}

int inspect_command(const std::vector<std::string>& args) {
  std::string what, config_path, secret_file;
  bool guessed_secret = false;
  bool as_json = false, watch = false;
  double interval_s = 1;
  long count = 0;  // 0: until interrupted
  long timeout_ms = 5000;
  Target target;
  auto flags = inspect_flags();
  auto usage = kUsage + flags_help(flags);
  try {
    auto given = parse_flags(flags, args, {"worker"});
    if (given.given("help")) {
      std::printf("%s", usage.c_str());
      return 0;
    }
    what = given.find<std::string>("worker").value_or("");
    config_path = given.find<std::string>("config").value_or("");
    secret_file = given.find<std::string>("secret-file").value_or("");
    as_json = given.get<bool>("json");
    watch = given.get<bool>("watch");
    interval_s = given.get<double>("interval");
    count = given.get<long>("count");
    timeout_ms = given.get<long>("timeout-ms");
    if (what.empty()) throw std::invalid_argument("which worker? give host:port");
    if (interval_s <= 0 || timeout_ms <= 0 || count < 0) throw std::invalid_argument("--interval, --timeout-ms and --count must be positive");
    target = resolve(what, config_path);
    // Note [The door]: the cluster file's secret, a secret file, the
    // environment's, or a guess: the user's own (what castor run and castor
    // launch give jobs that have none).
    if (!secret_file.empty())
      target.secret = detail::read_secret_file(secret_file);
    else if (const char* env = std::getenv("CASTOR_SECRET"); target.secret.empty() && env && *env)
      target.secret = env;
    else if (auto mine = detail::user_secret(false); target.secret.empty() && mine)
      target.secret = *mine, guessed_secret = true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor inspect: %s\n%s", e.what(), usage.c_str());
    return 2;
  }
  try {
    auto connect = [&]() -> std::unique_ptr<InspectionClient> {
      try {
        return std::make_unique<InspectionClient>(target.host, target.port, target.tls, target.secret,
                                                  std::chrono::milliseconds(timeout_ms));
      } catch (const RpcError& e) {
        // The user's secret was a guess: the worker may have none.
        if (!guessed_secret || std::string(e.what()).find("the cluster secret differs") == std::string::npos) throw;
        return std::make_unique<InspectionClient>(target.host, target.port, target.tls, "",
                                                  std::chrono::milliseconds(timeout_ms));
      }
    };
    auto client_ptr = connect();
    auto& client = *client_ptr;
    for (long shown = 0;; ) {
      auto snap = client.snapshot();
      if (watch && !as_json) std::printf("\033[H\033[2J");  // redraw in place, like top
      std::printf("%s\n", as_json ? snap.c_str() : render_inspection(snap).c_str());
      std::fflush(stdout);
      if (!watch || (count > 0 && ++shown >= count)) break;
      std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor inspect: %s\n", e.what());
    return 1;
  }
}

}  // namespace castor::apps
