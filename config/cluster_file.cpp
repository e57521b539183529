// The cluster-file loader: every field checked, every error naming the file
// and the field's path (workers[2].port), unknown keys reported as warnings.
#include "config/cluster_file.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "actors/transport/cluster_secret.hpp"

namespace castor::config {
namespace {

using nlohmann::json;

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    throw ConfigError(path_ + ": " + (field.empty() ? "" : field + ": ") + why);
  }

  void warn_unknown(const json& object, const std::string& field, const std::set<std::string>& known) {
    for (auto it = object.begin(); it != object.end(); ++it)
      if (!known.count(it.key()))
        warnings.push_back(path_ + ": unknown key " + (field.empty() ? "" : field + ".") + it.key() + " (ignored)");
  }

  std::string string(const json& v, const std::string& field) const {
    if (!v.is_string()) fail(field, "expected a string, got " + describe(v));
    return v.get<std::string>();
  }

  int64_t integer(const json& v, const std::string& field, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) fail(field, "expected an integer, got " + describe(v));
    // Past int64_t's range JSON holds it unsigned: said as written, never wrapped.
    bool huge = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max());
    auto x = huge ? std::numeric_limits<int64_t>::max() : v.get<int64_t>();
    if (x < lo || x > hi)
      fail(field, "expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + v.dump());
    return x;
  }

  std::vector<std::string> strings(const json& v, const std::string& field) const {
    if (!v.is_array()) fail(field, "expected a list of strings, got " + describe(v));
    std::vector<std::string> out;
    for (size_t i = 0; i < v.size(); ++i) out.push_back(string(v[i], field + "[" + std::to_string(i) + "]"));
    return out;
  }

  // A relative path is relative to the cluster file's folder.
  std::string file_path(const json& v, const std::string& field) const {
    std::filesystem::path p(string(v, field));
    if (p.is_relative()) p = std::filesystem::path(path_).parent_path() / p;
    return p.lexically_normal().string();
  }

  static std::string describe(const json& v) {
    auto text = v.dump();
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return std::string(v.type_name()) + " " + text;
  }

  std::vector<std::string> warnings;

 private:
  std::string path_;
};

constexpr int64_t kMaxMs = int64_t(7) * 24 * 3600 * 1000;

void read_options(Reader& r, const json& o, WorkerOptions& opts) {
  if (!o.is_object()) r.fail("options", "expected an object, got " + Reader::describe(o));
  r.warn_unknown(o, "options",
                 {"rpc_timeout_ms", "init_timeout_ms", "shutdown_timeout_ms", "num_worker_threads", "eager_worker_threads", "max_worker_threads", "intra_op_threads",
                  "autograd_mode", "max_message_bytes", "bulk_threshold_bytes", "bulk_same_host", "heartbeat_ms", "connection_timeout_ms", "caf_config_file",
                  "greeting_timeout_ms", "caf"});
  if (o.contains("rpc_timeout_ms"))
    opts.rpc_timeout = std::chrono::milliseconds(r.integer(o["rpc_timeout_ms"], "options.rpc_timeout_ms", 1, kMaxMs));
  if (o.contains("init_timeout_ms"))
    opts.init_timeout =
        std::chrono::milliseconds(r.integer(o["init_timeout_ms"], "options.init_timeout_ms", 1, kMaxMs));
  if (o.contains("shutdown_timeout_ms"))
    opts.shutdown_timeout =
        std::chrono::milliseconds(r.integer(o["shutdown_timeout_ms"], "options.shutdown_timeout_ms", 1, kMaxMs));
  if (o.contains("num_worker_threads"))
    opts.num_worker_threads = size_t(r.integer(o["num_worker_threads"], "options.num_worker_threads", 1, 4096));
  if (o.contains("eager_worker_threads"))
    opts.eager_worker_threads =
        size_t(r.integer(o["eager_worker_threads"], "options.eager_worker_threads", 0, 4096));
  if (o.contains("max_worker_threads"))
    opts.max_worker_threads = size_t(r.integer(o["max_worker_threads"], "options.max_worker_threads", 1, 65536));
  if (opts.max_worker_threads < opts.num_worker_threads)
    r.fail("options.max_worker_threads", "must be at least num_worker_threads (" +
                                             std::to_string(opts.num_worker_threads) + ")");
  if (o.contains("intra_op_threads"))
    opts.intra_op_threads = int(r.integer(o["intra_op_threads"], "options.intra_op_threads", 0, 1024));
  if (o.contains("autograd_mode")) {
    auto mode = r.string(o["autograd_mode"], "options.autograd_mode");
    if (mode == "fast")
      opts.autograd_mode = AutogradMode::fast;
    else if (mode == "smart")
      opts.autograd_mode = AutogradMode::smart;
    else
      r.fail("options.autograd_mode", "expected \"fast\" or \"smart\", got \"" + mode + "\"");
  }
  if (o.contains("bulk_threshold_bytes"))
    opts.bulk_threshold =
        size_t(r.integer(o["bulk_threshold_bytes"], "options.bulk_threshold_bytes", 0, int64_t(1) << 40));
  if (o.contains("bulk_same_host")) {
    if (!o["bulk_same_host"].is_boolean())
      r.fail("options.bulk_same_host", "expected true or false, got " + Reader::describe(o["bulk_same_host"]));
    opts.bulk_same_host = o["bulk_same_host"].get<bool>();
  }
  if (o.contains("greeting_timeout_ms"))
    opts.greeting_timeout =
        std::chrono::milliseconds(r.integer(o["greeting_timeout_ms"], "options.greeting_timeout_ms", 1, kMaxMs));
  if (o.contains("max_message_bytes"))
    opts.max_message_bytes =
        size_t(r.integer(o["max_message_bytes"], "options.max_message_bytes", 4096, int64_t(1) << 31));
  // CAF's middleman keeps links alive with heartbeats and drops a silent one
  // after the connection timeout (on by default: Note [Silent peers]); 0: off.
  if (o.contains("heartbeat_ms"))
    opts.caf_settings["middleman.heartbeat-interval"] =
        std::to_string(r.integer(o["heartbeat_ms"], "options.heartbeat_ms", 0, kMaxMs)) + "ms";
  if (o.contains("connection_timeout_ms"))
    opts.caf_settings["middleman.connection-timeout"] =
        std::to_string(r.integer(o["connection_timeout_ms"], "options.connection_timeout_ms", 0, kMaxMs)) + "ms";
  if (o.contains("caf_config_file")) {
    opts.caf_config_file = r.file_path(o["caf_config_file"], "options.caf_config_file");
    if (!std::ifstream(opts.caf_config_file))
      r.fail("options.caf_config_file", "cannot read " + opts.caf_config_file);
  }
  if (o.contains("caf")) {
    const auto& caf = o["caf"];
    if (!caf.is_object()) r.fail("options.caf", "expected an object of CAF settings, got " + Reader::describe(caf));
    for (auto it = caf.begin(); it != caf.end(); ++it) {
      auto field = "options.caf." + it.key();
      const auto& v = it.value();
      if (v.is_string())
        opts.caf_settings[it.key()] = v.get<std::string>();  // CAF's syntax: "500ms", "'sharing'"
      else if (v.is_boolean() || v.is_number())
        opts.caf_settings[it.key()] = v.dump();
      else
        r.fail(field, "expected a string, number or boolean, got " + Reader::describe(v));
    }
  }
}

// A "tls" object: certificate, key, ca, passphrase; what it leaves out
// stays as `tls` has it (a worker's own section over the file's).
TlsOptions read_tls(Reader& r, const json& t, const std::string& field, TlsOptions tls) {
  if (!t.is_object()) r.fail(field, "expected an object, got " + Reader::describe(t));
  r.warn_unknown(t, field, {"certificate", "key", "ca", "passphrase"});
  if (t.contains("certificate")) tls.certificate = r.file_path(t["certificate"], field + ".certificate");
  if (t.contains("key")) tls.key = r.file_path(t["key"], field + ".key");
  if (t.contains("ca")) tls.ca = r.file_path(t["ca"], field + ".ca");
  if (t.contains("passphrase")) tls.passphrase = r.string(t["passphrase"], field + ".passphrase");
  return tls;
}

// What a worker runs: an in-tree "app" or a "program" of the user's (a path
// relative to the file's folder, or a name looked up on PATH), never both
// in one object; a worker's own choice replaces the file's default.
struct Runs {
  std::string app;
  std::string program;
};

Runs read_runs(Reader& r, const json& o, const std::string& prefix, const Runs& fallback) {
  if (o.contains("app") && o.contains("program"))
    r.fail(prefix.empty() ? "program" : prefix + ".program",
           "give \"app\" (an app compiled into castor) or \"program\" (your own), not both");
  if (o.contains("app")) return Runs{r.string(o["app"], prefix.empty() ? "app" : prefix + ".app"), ""};
  if (o.contains("program")) {
    auto field = prefix.empty() ? "program" : prefix + ".program";
    auto name = r.string(o["program"], field);
    if (name.empty()) r.fail(field, "must not be empty");
    return Runs{"", name.find('/') == std::string::npos ? name : r.file_path(o["program"], field)};
  }
  return fallback;
}

ClusterWorker read_worker(Reader& r, const json& w, size_t index, const Runs& default_runs,
                          const std::vector<std::string>& default_args, const TlsOptions& default_tls) {
  auto field = "workers[" + std::to_string(index) + "]";
  if (!w.is_object()) r.fail(field, "expected an object, got " + Reader::describe(w));
  r.warn_unknown(w, field, {"name", "rank", "host", "port", "app", "program", "args", "tls", "metrics_port"});
  for (const char* required : {"name", "host", "port"})
    if (!w.contains(required)) r.fail(field, std::string("missing \"") + required + "\"");
  ClusterWorker out;
  out.name = r.string(w["name"], field + ".name");
  if (out.name.empty()) r.fail(field + ".name", "must not be empty");
  out.rank = w.contains("rank") ? int(r.integer(w["rank"], field + ".rank", 0, 1 << 20)) : int(index);
  out.host = r.string(w["host"], field + ".host");
  if (out.host.empty()) r.fail(field + ".host", "must not be empty");
  out.port = uint16_t(r.integer(w["port"], field + ".port", 1, 65535));
  auto runs = read_runs(r, w, field, default_runs);
  out.app = runs.app;
  out.program = runs.program;
  out.args = w.contains("args") ? r.strings(w["args"], field + ".args") : default_args;
  out.tls = w.contains("tls") ? read_tls(r, w["tls"], field + ".tls", default_tls) : default_tls;
  if (w.contains("metrics_port")) out.metrics_port = uint16_t(r.integer(w["metrics_port"], field + ".metrics_port", 1, 65535));
  return out;
}

// The cluster secret (Note [The door]): inline, or the contents of a file
// (whitespace at the ends dropped), never both.
std::string read_secret(Reader& r, const json& root) {
  if (root.contains("secret") && root.contains("secret_file"))
    r.fail("secret", "give \"secret\" or \"secret_file\", not both");
  std::string secret, field = root.contains("secret_file") ? "secret_file" : "secret";
  if (root.contains("secret")) {
    secret = r.string(root["secret"], "secret");
  } else if (root.contains("secret_file")) {
    auto path = r.file_path(root["secret_file"], "secret_file");
    try {
      secret = detail::read_secret_file(path);
    } catch (const std::exception&) {
      r.fail("secret_file", "cannot read " + path);
    }
    auto perms = std::filesystem::status(path).permissions();
    if ((perms & (std::filesystem::perms::group_read | std::filesystem::perms::others_read)) !=
        std::filesystem::perms::none)
      r.warnings.push_back(path + ": the cluster secret is readable by other users (chmod 600 it)");
  } else {
    return "";
  }
  if (secret.size() < 16)
    r.fail(field, "a cluster secret needs at least 16 characters (`castor secret` prints a fresh one), got " +
                      std::to_string(secret.size()));
  return secret;
}

}  // namespace

const ClusterWorker& ClusterFile::worker(const std::string& name) const {
  for (const auto& w : workers)
    if (w.name == name) return w;
  std::string known;
  for (const auto& w : workers) known += (known.empty() ? "" : ", ") + w.name;
  throw ConfigError(path + ": no worker named '" + name + "' (the file has: " + known + ")");
}

WorkerOptions ClusterFile::options_for(const std::string& name, WorkerOptions base) const {
  const auto& me = worker(name);
  WorkerOptions o = std::move(base);
  if (!options_json.empty()) {
    Reader r(path);  // read once already: its warnings were given then
    read_options(r, json::parse(options_json), o);
  }
  o.secret = shared.secret;  // every worker of the job must hold the same one
  o.name = me.name;
  o.rank = me.rank;
  o.world_size = int(workers.size());
  o.host = me.host;
  o.port = me.port;
  o.master = Address{workers.front().host, workers.front().port};  // unused by the masterless join below
  o.tls = me.tls;
  if (me.metrics_port) o.metrics_port = me.metrics_port;  // the worker's own; else the program's
  o.cluster.clear();  // the file's world only
  for (const auto& w : workers) o.cluster.push_back(WorkerOptions::Member{w.name, w.host, w.port});  // no master
  return o;
}

ClusterFile parse_cluster_file(const std::string& text, const std::string& path) {
  Reader r(path);
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    r.fail("", std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) r.fail("", "expected a JSON object at the top, got " + Reader::describe(root));
  r.warn_unknown(root, "",
                 {"app", "program", "args", "workers", "options", "tls", "secret", "secret_file", "checkpoint_dir"});
  ClusterFile out;
  out.path = path;
  if (root.contains("checkpoint_dir")) out.checkpoint_dir = r.file_path(root["checkpoint_dir"], "checkpoint_dir");
  auto runs = read_runs(r, root, "", Runs{});
  std::vector<std::string> args = root.contains("args") ? r.strings(root["args"], "args") : std::vector<std::string>{};
  if (!root.contains("workers")) r.fail("workers", "missing: a cluster file lists its workers");
  const auto& workers = root["workers"];
  if (!workers.is_array() || workers.empty())
    r.fail("workers", "expected a non-empty list of workers, got " + Reader::describe(workers));
  TlsOptions tls = root.contains("tls") ? read_tls(r, root["tls"], "tls", TlsOptions{}) : TlsOptions{};
  for (size_t i = 0; i < workers.size(); ++i) out.workers.push_back(read_worker(r, workers[i], i, runs, args, tls));
  if (root.contains("options")) {
    read_options(r, root["options"], out.shared);
    out.options_json = root["options"].dump();
  }
  out.shared.secret = read_secret(r, root);

  // Names, ranks and addresses are unique; ranks are 0..n-1.
  std::set<std::string> names, addresses;
  std::vector<int> by_rank(out.workers.size(), -1);
  for (size_t i = 0; i < out.workers.size(); ++i) {
    const auto& w = out.workers[i];
    auto field = "workers[" + std::to_string(i) + "]";
    if (!names.insert(w.name).second) r.fail(field + ".name", "duplicate worker name '" + w.name + "'");
    auto address = w.host + ":" + std::to_string(w.port);
    if (!addresses.insert(address).second) r.fail(field + ".port", "duplicate address " + address);
    if (w.rank >= int(out.workers.size()))
      r.fail(field + ".rank", "rank " + std::to_string(w.rank) + " is outside 0.." +
                                  std::to_string(out.workers.size() - 1) + " (one rank per worker)");
    if (by_rank[size_t(w.rank)] >= 0) r.fail(field + ".rank", "duplicate rank " + std::to_string(w.rank));
    by_rank[size_t(w.rank)] = int(i);
  }
  std::vector<ClusterWorker> sorted;
  for (int i : by_rank) sorted.push_back(out.workers[size_t(i)]);
  out.workers = std::move(sorted);
  out.warnings = std::move(r.warnings);
  return out;
}

ClusterFile load_cluster_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot read the cluster file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_cluster_file(text.str(), path);
}

void move_to_this_host(WorkerOptions& opts) {
  const std::string here = "127.0.0.1";
  opts.host = here;
  opts.master.host = here;
  for (auto& m : opts.cluster) m.host = here;
}

std::string one_host_conflict(const ClusterFile& file) {
  std::map<uint16_t, std::string> taken;  // port -> "worker1's port"
  for (const auto& w : file.workers)
    for (auto [port, what] : {std::pair<uint16_t, const char*>{w.port, "port"}, {w.metrics_port, "metrics_port"}}) {
      if (port == 0) continue;  // none, or any free one
      auto use = w.name + "'s " + what;
      auto [it, added] = taken.emplace(port, use);
      if (!added)
        return it->second + " and " + use + " are both " + std::to_string(port) +
               ": on one host each needs its own port";
    }
  return "";
}

bool is_local_host(const std::string& host) {
  if (host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1") return true;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0 && host == name) return true;
  // Resolve the name and compare with every address of this host's interfaces.
  std::set<std::string> mine;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (auto* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
      char buf[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
      mine.insert(buf);
    }
    ::freeifaddrs(list);
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool local = false;
  for (auto* a = found; a && !local; a = a->ai_next) {
    char buf[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, buf, sizeof(buf));
    local = mine.count(buf) > 0 || std::string(buf).rfind("127.", 0) == 0;
  }
  ::freeaddrinfo(found);
  return local;
}

}  // namespace castor::config
