// Cluster files: what a good file gives init_rpc, and an error naming the
// file and the field for each kind of mistake.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include <caf/actor_system_config.hpp>

#include "actors/transport/caf_config.hpp"
#include "config/cluster_file.hpp"

using castor::config::ConfigError;
using castor::config::parse_cluster_file;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_cluster_file(text, "/etc/castor/job.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

const char* kGood = R"({
  "app": "parameter-server", "args": ["--epochs", "1"],
  "workers": [
    {"name": "trainer", "rank": 1, "host": "10.0.0.2", "port": 29600, "args": ["--epochs", "2"]},
    {"name": "ps", "rank": 0, "host": "10.0.0.1", "port": 29600}
  ],
  "options": {"rpc_timeout_ms": 1500, "num_worker_threads": 4, "eager_worker_threads": 2, "autograd_mode": "fast",
              "heartbeat_ms": 5000, "caf": {"scheduler.max-threads": 2, "middleman.heartbeat-interval": "2s"},
              "colour": "blue"}
})";

}  // namespace

TEST_CASE("a cluster file gives each worker its options, rank 0 serving the rendezvous") {
  auto file = parse_cluster_file(kGood, "/etc/castor/job.json");
  REQUIRE(file.workers.size() == 2);
  CHECK(file.workers[0].name == "ps");  // sorted by rank
  CHECK(file.workers[1].args == std::vector<std::string>{"--epochs", "2"});  // its own args win
  CHECK(file.workers[0].args == std::vector<std::string>{"--epochs", "1"});
  CHECK(file.workers[0].app == "parameter-server");
  auto o = file.options_for("trainer");
  CHECK(o.name == "trainer");
  CHECK(o.rank == 1);
  CHECK(o.world_size == 2);
  CHECK(o.host == "10.0.0.2");
  CHECK(o.port == 29600);
  CHECK(o.master.host == "10.0.0.1");
  CHECK(o.master.port == 29600);
  CHECK(o.rpc_timeout == std::chrono::milliseconds(1500));
  CHECK(o.num_worker_threads == 4);
  CHECK(o.eager_worker_threads == 2);
  CHECK(o.autograd_mode == castor::AutogradMode::fast);
  CHECK(o.caf_settings.at("scheduler.max-threads") == "2");
  CHECK(o.caf_settings.at("middleman.heartbeat-interval") == "2s");  // options.caf wins over heartbeat_ms
  REQUIRE(file.warnings.size() == 1);
  CHECK(file.warnings[0] == "/etc/castor/job.json: unknown key options.colour (ignored)");
  CHECK_THROWS_WITH_AS(file.worker("nobody"),
                       "/etc/castor/job.json: no worker named 'nobody' (the file has: ps, trainer)", ConfigError);
}

TEST_CASE("a malformed cluster file is refused, naming the file and the field") {
  CHECK(error_of("{\"workers\": [").find("/etc/castor/job.json: not valid JSON") == 0);
  CHECK(error_of("[]") == "/etc/castor/job.json: expected a JSON object at the top, got array []");
  CHECK(error_of("{}") == "/etc/castor/job.json: workers: missing: a cluster file lists its workers");
  CHECK(error_of(R"({"workers": []})") ==
        "/etc/castor/job.json: workers: expected a non-empty list of workers, got array []");
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h"}]})") ==
        "/etc/castor/job.json: workers[0]: missing \"port\"");
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h", "port": "80"}]})") ==
        "/etc/castor/job.json: workers[0].port: expected an integer, got string \"80\"");
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h", "port": 70000}]})") ==
        "/etc/castor/job.json: workers[0].port: expected an integer in 1..65535, got 70000");
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h", "port": 1}, {"name": "a", "host": "h", "port": 2}]})") ==
        "/etc/castor/job.json: workers[1].name: duplicate worker name 'a'");
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h", "port": 1}, {"name": "b", "host": "h", "port": 1}]})") ==
        "/etc/castor/job.json: workers[1].port: duplicate address h:1");
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h", "port": 1, "rank": 3}]})") ==
        "/etc/castor/job.json: workers[0].rank: rank 3 is outside 0..0 (one rank per worker)");
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h", "port": 1, "rank": 0},
                                 {"name": "b", "host": "h", "port": 2, "rank": 0}]})") ==
        "/etc/castor/job.json: workers[1].rank: duplicate rank 0");
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h", "port": 1}], "options": {"autograd_mode": "slow"}})") ==
        "/etc/castor/job.json: options.autograd_mode: expected \"fast\" or \"smart\", got \"slow\"");
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h", "port": 1}], "options": {"rpc_timeout_ms": 0}})") ==
        "/etc/castor/job.json: options.rpc_timeout_ms: expected an integer in 1..604800000, got 0");
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h", "port": 1}],
                     "options": {"caf_config_file": "missing.ini"}})") ==
        "/etc/castor/job.json: options.caf_config_file: cannot read /etc/castor/missing.ini");
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h", "port": 1, "args": ["--x", 3]}]})") ==
        "/etc/castor/job.json: workers[0].args[1]: expected a string, got number 3");
}

TEST_CASE("a missing cluster file is named") {
  CHECK_THROWS_WITH_AS(castor::config::load_cluster_file("/nonexistent/job.json"),
                       "/nonexistent/job.json: cannot read the cluster file", ConfigError);
}

TEST_CASE("loopback names and this host's addresses are local, others are not") {
  CHECK(castor::config::is_local_host("127.0.0.1"));
  CHECK(castor::config::is_local_host("localhost"));
  CHECK_FALSE(castor::config::is_local_host("192.0.2.77"));  // TEST-NET-1: never assigned
}

TEST_CASE("cluster files set the bulk path and the metrics port") {
  auto file = parse_cluster_file(R"({"workers": [{"name": "a", "host": "h", "port": 1, "metrics_port": 9464},
                                                {"name": "b", "host": "h", "port": 2}],
                                     "options": {"bulk_threshold_bytes": 1048576, "bulk_same_host": false}})",
                                 "/etc/castor/job.json");
  auto a = file.options_for("a"), b = file.options_for("b");
  CHECK(a.metrics_port == 9464);
  CHECK(b.metrics_port == 0);
  CHECK(a.bulk_threshold == 1048576);
  CHECK_FALSE(b.bulk_same_host);
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h", "port": 1}], "options": {"bulk_same_host": 1}})") ==
        "/etc/castor/job.json: options.bulk_same_host: expected true or false, got number 1");
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h", "port": 1, "metrics_port": 0}]})").find(
            "/etc/castor/job.json: workers[0].metrics_port: ") == 0);
}

TEST_CASE("a cluster file carries the door's secret inline or in a file, never a short one or both") {
  auto with = [](const std::string& extra) {
    return R"({"workers": [{"name": "ps", "host": "127.0.0.1", "port": 29600}], )" + extra + "}";
  };
  auto file = parse_cluster_file(with(R"("secret": "0123456789abcdef0123", "options": {"greeting_timeout_ms": 750})"),
                                 "/etc/castor/job.json");
  auto opts = file.options_for("ps");
  CHECK(opts.secret == "0123456789abcdef0123");
  CHECK(opts.greeting_timeout == std::chrono::milliseconds(750));
  CHECK(parse_cluster_file(with(R"("options": {})"), "/etc/castor/job.json").options_for("ps").secret.empty());
  CHECK(error_of(with(R"("secret": "short")")) ==
        "/etc/castor/job.json: secret: a cluster secret needs at least 16 characters (`castor secret` prints a fresh "
        "one), got 5");
  CHECK(error_of(with(R"("secret": "0123456789abcdef0123", "secret_file": "s")")) ==
        "/etc/castor/job.json: secret: give \"secret\" or \"secret_file\", not both");
  CHECK(error_of(with(R"("secret_file": "no-such-secret")")) ==
        "/etc/castor/job.json: secret_file: cannot read /etc/castor/no-such-secret");
  // A file next to the cluster file, whitespace around it dropped; readable
  // by others: a warning.
  auto dir = std::string("/tmp/castor-test-config-") + std::to_string(::getpid());
  std::system(("mkdir -p " + dir + " && printf '  fedcba9876543210fedc\\n' > " + dir + "/cluster.secret && chmod 644 " + dir +
               "/cluster.secret").c_str());
  auto from_file = parse_cluster_file(with(R"("secret_file": "cluster.secret")"), dir + "/job.json");
  CHECK(from_file.options_for("ps").secret == "fedcba9876543210fedc");
  REQUIRE(from_file.warnings.size() == 1);
  CHECK(from_file.warnings[0] == dir + "/cluster.secret: the cluster secret is readable by other users (chmod 600 it)");
}

TEST_CASE("heartbeats are on by default, and a cluster file or a CAF setting changes or stops them") {
  using castor::detail::make_caf_config;
  using std::chrono::milliseconds;
  auto interval = [](const caf::actor_system_config& cfg) {
    return caf::get_or(cfg, "middleman.heartbeat-interval", caf::timespan{0});
  };
  auto timeout = [](const caf::actor_system_config& cfg) {
    return caf::get_or(cfg, "middleman.connection-timeout", caf::timespan{0});
  };
  auto defaults = make_caf_config(castor::WorkerOptions{});
  CHECK(interval(*defaults) == milliseconds(2000));  // Note [Silent peers]
  CHECK(timeout(*defaults) == milliseconds(30000));

  auto off = parse_cluster_file(R"({"workers": [{"name": "a", "host": "127.0.0.1", "port": 29600}],
                                    "options": {"heartbeat_ms": 0, "connection_timeout_ms": 0}})",
                                "/etc/castor/job.json");
  auto quiet = make_caf_config(off.options_for("a"));
  CHECK(interval(*quiet) == caf::timespan{0});
  CHECK(timeout(*quiet) == caf::timespan{0});

  castor::WorkerOptions tuned;
  tuned.caf_settings["middleman.connection-timeout"] = "90s";
  auto slow_link = make_caf_config(tuned);
  CHECK(interval(*slow_link) == milliseconds(2000));
  CHECK(timeout(*slow_link) == milliseconds(90000));
}
