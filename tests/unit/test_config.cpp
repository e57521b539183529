// Cluster files: what a good file gives init_rpc, and an error naming the
// file and the field for each kind of mistake.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <caf/actor_system_config.hpp>

#include "actors/api/errors.hpp"
#include "config/init_from_env.hpp"
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

TEST_CASE("a program's own options fill what its cluster file does not name, and the file owns the world") {
  auto file = parse_cluster_file(kGood, "/etc/castor/job.json");
  castor::WorkerOptions mine;
  mine.name = "someone-else";
  mine.rank = 7;
  mine.world_size = 9;
  mine.secret = "a-secret-of-my-own-0123";
  mine.rpc_timeout = std::chrono::milliseconds(99000);   // the file names rpc_timeout_ms: the file wins
  mine.shutdown_timeout = std::chrono::milliseconds(4321);  // the file is silent: the program's stays
  mine.intra_op_threads = 3;
  mine.caf_settings["scheduler.max-threads"] = "8";       // the file's "caf" wins key by key
  mine.caf_settings["logger.verbosity"] = "quiet";
  mine.metrics_port = 9464;  // the file names none for this worker
  mine.cluster.push_back({"stranger", "10.9.9.9", 1});
  auto o = file.options_for("trainer", mine);
  CHECK(o.name == "trainer");
  CHECK(o.rank == 1);
  CHECK(o.world_size == 2);
  CHECK(o.host == "10.0.0.2");
  CHECK(o.master.host == "10.0.0.1");
  CHECK(o.secret.empty());  // the file has none, so no worker of the job has one
  CHECK(o.rpc_timeout == std::chrono::milliseconds(1500));
  CHECK(o.shutdown_timeout == std::chrono::milliseconds(4321));
  CHECK(o.intra_op_threads == 3);
  CHECK(o.autograd_mode == castor::AutogradMode::fast);
  CHECK(o.caf_settings.at("scheduler.max-threads") == "2");
  CHECK(o.caf_settings.at("logger.verbosity") == "quiet");
  CHECK(o.metrics_port == 9464);
  REQUIRE(o.cluster.size() == 2);  // the file's two workers, not the program's
  CHECK(o.cluster[0].name == "ps");
  CHECK(o.cluster[1].name == "trainer");
  CHECK(file.warnings.size() == 1);  // reading the options again warns of nothing new
  // Without a program's options, the same as before.
  CHECK(file.options_for("trainer").shutdown_timeout == castor::WorkerOptions{}.shutdown_timeout);
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
  // Past int64_t's range: said as written, not wrapped around to -1.
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h", "port": 18446744073709551615}]})") ==
        "/etc/castor/job.json: workers[0].port: expected an integer in 1..65535, got 18446744073709551615");
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

TEST_CASE("a cluster file names the job's checkpoint folder, relative to the file's own") {
  const char* workers = R"("workers": [{"name": "a", "host": "h", "port": 1}])";
  auto relative = parse_cluster_file(std::string("{") + workers + R"(, "checkpoint_dir": "ckpt/../run1"})",
                                     "/etc/castor/job.json");
  CHECK(relative.checkpoint_dir == "/etc/castor/run1");
  CHECK(relative.warnings.empty());
  auto absolute = parse_cluster_file(std::string("{") + workers + R"(, "checkpoint_dir": "/shared/job42"})",
                                     "/etc/castor/job.json");
  CHECK(absolute.checkpoint_dir == "/shared/job42");
  CHECK(parse_cluster_file(std::string("{") + workers + "}", "/etc/castor/job.json").checkpoint_dir.empty());
  CHECK(error_of(std::string("{") + workers + R"(, "checkpoint_dir": 7})") ==
        "/etc/castor/job.json: checkpoint_dir: expected a string, got number 7");
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

namespace {

// A launcher's environment, as read_launch_env sees it.
castor::LaunchEnv launch_env(const std::map<std::string, std::string>& vars, bool need_master = true) {
  return castor::detail::read_launch_env(
      [&](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      need_master);
}

std::string launch_error(const std::map<std::string, std::string>& vars) {
  try {
    launch_env(vars);
  } catch (const castor::RpcError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("Slurm's compressed host lists expand in order, zero padding kept") {
  using castor::detail::expand_host_list;
  using V = std::vector<std::string>;
  CHECK(expand_host_list("node7") == V{"node7"});
  CHECK(expand_host_list("node[01-03,7],gpu5") == V{"node01", "node02", "node03", "node7", "gpu5"});
  CHECK(expand_host_list("rack[1-2]-n[09-10]") == V{"rack1-n09", "rack1-n10", "rack2-n09", "rack2-n10"});
  CHECK(expand_host_list("a,b[3],c") == V{"a", "b3", "c"});
  for (const char* bad : {"", "node[", "node]", "node[3-1]", "node[]", "node[a-b]", "a,,b", "a,"})
    CHECK_THROWS_AS(expand_host_list(bad), std::invalid_argument);
  CHECK_THROWS_WITH(expand_host_list("node[5-2]"), "host list 'node[5-2]': '5-2' is not an ascending range");
  // A list past 100,000 hosts is refused before it is expanded: by one
  // group's ranges, by the product of groups, or by the whole list.
  CHECK_THROWS_WITH(expand_host_list("n[0-60000,0-60000]"), "host list 'n[0-60000,0-60000]': more than 100000 hosts");
  CHECK_THROWS_WITH(expand_host_list("r[0-999]-n[0-999]"), "host list 'r[0-999]-n[0-999]': more than 100000 hosts");
  CHECK_THROWS_WITH(expand_host_list("a[0-60000],b[0-60000]"),
                    "host list 'a[0-60000],b[0-60000]': more than 100000 hosts");
  CHECK(expand_host_list("n[1-100000]").size() == 100000);
}

TEST_CASE("init_rpc_from_env reads torchrun's, Slurm's and Open MPI's variables, in that order") {
  auto torchrun = launch_env({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "10.0.0.1"},
                              {"MASTER_PORT", "29500"}, {"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"}});
  CHECK(torchrun.source == "torchrun");
  CHECK(torchrun.rank == 2);
  CHECK(torchrun.world_size == 4);
  CHECK(torchrun.local_rank == 0);
  CHECK(torchrun.master_host == "10.0.0.1");
  CHECK(torchrun.master_port == 29500);
  // A caller who gives the master needs only the rank and world size.
  auto ranks_only = launch_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}}, false);
  CHECK(ranks_only.rank == 1);
  CHECK(ranks_only.world_size == 2);
  CHECK(ranks_only.master_host.empty());

  std::map<std::string, std::string> slurm{{"SLURM_PROCID", "5"},        {"SLURM_NTASKS", "8"},
                                           {"SLURM_LOCALID", "1"},       {"SLURM_JOB_ID", "123456"},
                                           {"SLURM_JOB_NODELIST", "gpu[07-10]"}, {"OMPI_COMM_WORLD_RANK", "0"}};
  auto s = launch_env(slurm);
  CHECK(s.source == "Slurm");
  CHECK(s.rank == 5);
  CHECK(s.world_size == 8);
  CHECK(s.local_rank == 1);
  CHECK(s.master_host == "gpu07");  // the list's first host
  CHECK(s.master_port == 10000 + 123456 % 20000);  // from the job id: every rank agrees
  slurm["MASTER_PORT"] = "29400";
  slurm["MASTER_ADDR"] = "login1";
  auto given = launch_env(slurm);
  CHECK(given.master_port == 29400);
  CHECK(given.master_host == "login1");

  auto mpi = launch_env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                         {"OMPI_MCA_ess_base_jobid", "3137339393"}});
  CHECK(mpi.source == "Open MPI");
  CHECK(mpi.rank == 1);
  CHECK(mpi.world_size == 4);
  CHECK(mpi.master_host == "127.0.0.1");  // every rank on this host
  CHECK(mpi.master_port == 10000 + 3137339393ULL % 20000);
}

TEST_CASE("init_rpc_from_env names the variable at fault and guesses nothing") {
  CHECK(launch_error({}) ==
        "init_rpc_from_env: no launcher's variables found: set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (castor "
        "run and torchrun do), or start the program with srun (Slurm) or mpirun (Open MPI)");
  CHECK(launch_error({{"RANK", "0"}}) == "init_rpc_from_env: WORLD_SIZE is not set");
  CHECK(launch_error({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}) ==
        "init_rpc_from_env: RANK must be an integer in [0, 3], got '4'");
  CHECK(launch_error({{"RANK", "0"}, {"WORLD_SIZE", "2x"}}) ==
        "init_rpc_from_env: WORLD_SIZE must be an integer in [1, 32767], got '2x'");
  CHECK(launch_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}}) ==
        "init_rpc_from_env: MASTER_ADDR is not set (RANK and WORLD_SIZE are: torchrun's variables need all four)");
  CHECK(launch_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}) ==
        "init_rpc_from_env: MASTER_PORT must be an integer in [1, 65535], got '70000'");
  CHECK(launch_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n[1-2]"}}) ==
        "init_rpc_from_env: Slurm gives no port: set MASTER_PORT (or SLURM_JOB_ID)");
  CHECK(launch_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "9"}}) ==
        "init_rpc_from_env: Slurm gives no node list (SLURM_JOB_NODELIST) and MASTER_ADDR is not set");
  CHECK(launch_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "9"},
                      {"SLURM_JOB_NODELIST", "n[2-1]"}}) ==
        "init_rpc_from_env: SLURM_JOB_NODELIST: host list 'n[2-1]': '2-1' is not an ascending range");
  CHECK(launch_error({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_PORT", "29500"}}) ==
        "init_rpc_from_env: Open MPI names no master host and the ranks span several hosts: set MASTER_ADDR to rank "
        "0's host (mpirun -x MASTER_ADDR=...)");
}

TEST_CASE("a cluster file's worker runs an app or the user's own program, never both") {
  auto file = parse_cluster_file(R"({
    "program": "bin/trainer", "args": ["--epochs", "2"],
    "workers": [{"name": "ps", "host": "127.0.0.1", "port": 29600, "program": "/opt/job/server"},
                {"name": "t1", "host": "127.0.0.1", "port": 29601},
                {"name": "t2", "host": "127.0.0.1", "port": 29602, "program": "trainer-on-path"},
                {"name": "t3", "host": "127.0.0.1", "port": 29603, "app": "rpc-tour"}]})",
                                 "/etc/castor/job.json");
  CHECK(file.workers[0].program == "/opt/job/server");
  CHECK(file.workers[1].program == "/etc/castor/bin/trainer");  // relative to the file's folder
  CHECK(file.workers[1].args == std::vector<std::string>{"--epochs", "2"});
  CHECK(file.workers[2].program == "trainer-on-path");  // no '/': looked up on PATH when it starts
  CHECK(file.workers[3].app == "rpc-tour");              // a worker's own choice replaces the default
  CHECK(file.workers[3].program.empty());
  CHECK(file.warnings.empty());
  CHECK(error_of(R"({"app": "rpc-tour", "program": "x", "workers": [{"name": "a", "host": "h", "port": 1}]})") ==
        "/etc/castor/job.json: program: give \"app\" (an app compiled into castor) or \"program\" (your own), not both");
  CHECK(error_of(R"({"workers": [{"name": "a", "host": "h", "port": 1, "program": ""}]})") ==
        "/etc/castor/job.json: workers[0].program: must not be empty");
}
