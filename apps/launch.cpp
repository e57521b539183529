#include "apps/launch.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/transport/cluster_secret.hpp"
#include "actors/api/worker.hpp"
#include "apps/common/app.hpp"
#include "apps/common/local_launch.hpp"
#include "apps/common/restarts.hpp"
#include "config/cluster_file.hpp"

namespace castor::apps {
namespace {

const char* kLaunchUsage =
    "usage: castor launch <cluster.json> [--local] [--max-restarts N]\n"
    "  starts every worker of the cluster file that lives on this host, each its own process;\n"
    "  with --max-restarts, run it on every host of the file: each restarts its own workers\n";

const char* kWorkerUsage =
    "usage: castor worker --config <cluster.json> --name <worker> [--local]\n"
    "  runs one worker of the cluster file (and its app or program, if the file names one)\n";

// Loads the file, prints its warnings, and checks that every app it names exists.
config::ClusterFile load_checked(const std::string& path) {
  auto file = config::load_cluster_file(path);
  for (const auto& w : file.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  for (size_t i = 0; i < file.workers.size(); ++i) {
    const auto& w = file.workers[i];
    if (w.app.empty()) continue;
    auto it = app_registry().find(w.app);
    if (it == app_registry().end())
      throw config::ConfigError(path + ": worker '" + w.name + "': unknown app '" + w.app + "' (see `castor apps`)");
    try {
      parse_app_flags(it->second, w.args);
    } catch (const std::exception& e) {
      throw config::ConfigError(path + ": worker '" + w.name + "': args: " + e.what());
    }
  }
  return file;
}

// Becomes the user's program for worker `name` of the cluster file (Note
// [Launch variables], V0): it finds the file and its name in CASTOR_CLUSTER_FILE
// and CASTOR_WORKER, and its signals and exit are the launcher's to see.
int exec_program(const std::string& path, const std::string& name, const std::string& program,
                 const std::vector<std::string>& args, bool local) {
  ::setenv("CASTOR_CLUSTER_FILE", std::filesystem::absolute(path).string().c_str(), 1);
  ::setenv("CASTOR_WORKER", name.c_str(), 1);
  if (local) ::setenv("CASTOR_LOCAL", "1", 1);
  std::vector<std::string> argv{program};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> raw;
  for (auto& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  ::execvp(raw[0], raw.data());
  std::fprintf(stderr, "castor worker: %s: worker '%s': cannot run program %s: %s\n", path.c_str(), name.c_str(),
               program.c_str(), std::strerror(errno));
  return 2;
}

}  // namespace

int run_app_rank(const std::string& app_name, const std::vector<std::string>& args, WorkerOptions opts) {
  const App* app = nullptr;
  if (!app_name.empty()) {
    auto it = app_registry().find(app_name);
    if (it == app_registry().end()) {
      std::fprintf(stderr, "error: unknown app '%s'\n", app_name.c_str());
      return 2;
    }
    app = &it->second;
  }
  try {
    auto parsed = app ? parse_app_flags(*app, args) : Flags();
    std::optional<Worker> joined;
    try {
      joined.emplace(init_rpc(std::move(opts)));
    } catch (const ShutdownError& e) {  // RJ7 of Note [Rejoin]: a new life that came too late
      std::fprintf(stderr, "%s; this worker has nothing to rejoin and ends\n", e.what());
      return 0;
    } catch (const RejoinError& e) {  // RJ8: a new life that came too early
      std::fprintf(stderr, "%s\n", e.what());
      return kExitRestartJob;
    }
    auto& w = *joined;
    int rc = app ? app->run(w, parsed) : 0;  // without an app: serve the others until they are done
    w.shutdown();
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

int launch_command(const std::vector<std::string>& args) {
  auto flags = command_flags();
  flags.add_options()
      ("local", po::bool_switch(), "start all of the file's workers here, on 127.0.0.1 (the file's ports)");
  declare_max_restarts(flags);
  auto usage = kLaunchUsage + flags_help(flags);
  std::string path;
  bool local = false;
  int max_restarts = 0;
  try {
    auto given = parse_flags(flags, args, {"cluster-file"});
    if (given.given("help")) {
      std::fputs(usage.c_str(), stdout);
      return 0;
    }
    path = given.find<std::string>("cluster-file").value_or("");
    local = given.get<bool>("local");
    max_restarts = max_restarts_from(given);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor launch: %s\n%s", e.what(), usage.c_str());
    return 2;
  }
  if (path.empty()) {
    std::fprintf(stderr, "castor launch: which cluster file?\n%s", usage.c_str());
    return 2;
  }
  try {
    auto file = load_checked(path);
    if (local)
      if (auto conflict = config::one_host_conflict(file); !conflict.empty())
        throw std::invalid_argument("--local starts every worker of " + path + " here, and " + conflict);
    auto absolute = std::filesystem::absolute(path).string();
    std::vector<ProcessSpec> specs;
    std::string hosts;
    for (const auto& w : file.workers) {
      hosts += (hosts.empty() ? "" : ", ") + w.name + "@" + w.host;
      if (!local && !config::is_local_host(w.host)) continue;
      ProcessSpec s;
      s.name = w.name;
      s.leader = w.rank == 0;
      s.argv = {self_executable(), "worker", "--config", absolute, "--name", w.name};
      if (local) s.argv.push_back("--local");
      specs.push_back(std::move(s));
    }
    // Note [The door]: a file without a secret whose every worker starts
    // here gets the user's secret (CASTOR_SECRET, else the user's secret
    // file, made on first use), which castor inspect finds too. Workers on
    // other hosts could not know it: they need the file's own secret.
    const char* given = std::getenv("CASTOR_SECRET");
    if (file.shared.secret.empty() && specs.size() == file.workers.size() && !(given && *given))
      if (auto secret = detail::user_secret(true))
        for (auto& s : specs) s.env["CASTOR_SECRET"] = *secret;
    if (specs.empty()) {
      auto conflict = config::one_host_conflict(file);
      std::fprintf(stderr, "castor launch: no worker of %s lives on this host (%s); %s\n", path.c_str(),
                   hosts.c_str(),
                   conflict.empty() ? "--local starts them all here"
                                    : ("--local could start them all here, but " + conflict).c_str());
      return 2;
    }
    auto result = run_with_restarts(
        [&](int) {
          std::printf("[launch] starting %zu of %zu worker(s) from %s\n", specs.size(), file.workers.size(),
                      path.c_str());
          std::fflush(stdout);
          return specs;
        },
        max_restarts, "castor launch", file.workers.size());  // R7 of Note [Restart policy] on a host without rank 0
    if (result.exit_code != 0 && !result.failed.empty())  // a stop signal (L8) was said by the launcher
      std::fprintf(stderr, "castor launch: worker %s failed (exit code %d)\n", result.failed.c_str(), result.exit_code);
    return result.exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor launch: %s\n", e.what());
    return 2;
  }
}

int worker_command(const std::vector<std::string>& args) {
  auto flags = command_flags();
  flags.add_options()
      ("config", po::value<std::string>()->value_name("FILE"), "the cluster file")
      ("name", po::value<std::string>()->value_name("WORKER"), "the worker of the file to run")
      ("local", po::bool_switch(), "every worker of the file runs on this host: use 127.0.0.1 for all");
  auto usage = kWorkerUsage + flags_help(flags);
  std::string path, name;
  bool local = false;
  try {
    auto given = parse_flags(flags, args);
    if (given.given("help")) {
      std::fputs(usage.c_str(), stdout);
      return 0;
    }
    path = given.find<std::string>("config").value_or("");
    name = given.find<std::string>("name").value_or("");
    local = given.get<bool>("local");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor worker: %s\n%s", e.what(), usage.c_str());
    return 2;
  }
  if (path.empty() || name.empty()) {
    std::fprintf(stderr, "castor worker: give --config and --name\n%s", usage.c_str());
    return 2;
  }
  WorkerOptions opts;
  std::string app, program;
  std::vector<std::string> app_args;
  try {
    auto file = load_checked(path);
    const auto& me = file.worker(name);
    opts = file.options_for(name);
    // The job's checkpoint folder, for the app or program (cluster_file.hpp).
    if (!file.checkpoint_dir.empty()) ::setenv(config::kCheckpointDirVariable, file.checkpoint_dir.c_str(), 1);
    app = me.app;
    program = me.program;
    app_args = me.args;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor worker: %s\n", e.what());
    return 2;
  }
  if (!program.empty()) return exec_program(path, name, program, app_args, local);
  if (local) config::move_to_this_host(opts);
  return run_app_rank(app, app_args, std::move(opts));
}

}  // namespace castor::apps
