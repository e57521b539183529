// castor: the command. `castor demo` runs the main job on local workers;
// `castor run <app | program>` runs an app, or the user's own program, on
// local worker processes.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "apps/common/app.hpp"
#include "apps/common/flags.hpp"
#include "apps/common/local_launch.hpp"
#include "apps/common/restarts.hpp"
#include "apps/common/training_log.hpp"
#include "apps/inspect.hpp"
#include "apps/launch.hpp"
#include "actors/transport/cluster_secret.hpp"
#include "config/fork_server.hpp"
#include "config/init_from_env.hpp"

namespace {

using namespace castor::apps;

const char* kUsage =
    "usage: castor <command> [...]\n"
    "commands:\n"
    "  demo [flags]               the main job: parameter-server training on Fashion-MNIST with\n"
    "                             1 server + 2 trainers (local processes), then the same model\n"
    "                             trained in one process with libtorch for comparison; takes the\n"
    "                             parameter-server flags (castor run parameter-server --help)\n"
    "  run [-n N] [--max-restarts N] <app> [app flags]\n"
    "                             run an app on N local worker processes (--workers N: the same);\n"
    "                             with --max-restarts, a worker's death restarts the job, up to N\n"
    "                             times per worker\n"
    "  run [-n N] [--max-restarts N] <program> [args]\n"
    "                             run your own program (linked against castor::castor; it joins\n"
    "                             with castor::init_rpc_from_env()) on N local processes, like\n"
    "                             torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT\n"
    "  apps                       list the apps and their flags\n"
    "  launch <cluster.json> [--local] [--max-restarts N]\n"
    "                             start the cluster file's workers that live on this host\n"
    "  worker --config <cluster.json> --name <worker>   run one worker of a cluster file\n"
    "  inspect <host:port> [--json] [--watch]   show what a running worker holds (--help for more)\n"
    "  secret                     print a fresh cluster secret (for a cluster file's \"secret\")\n"
    "  --help                     this text\n";

int list_apps() {
  for (const auto& [name, app] : app_registry()) {
    std::printf("%-14s %s (default %d workers)\n", name.c_str(), app.summary.c_str(), app.default_workers);
    auto declared = declared_flags(app);
    if (!declared.options().empty()) std::printf("%s\n", flags_help(declared).c_str());
  }
  return 0;
}

// Note [The door]: the secret of a job this command starts whole:
// CASTOR_SECRET, else the user's secret file (made on first use, like
// Erlang's cookie), so that `castor inspect` finds it too; else a fresh one.
// Workers get it in their environment, which only their user can read.
std::string job_secret() {
  if (const char* given = std::getenv("CASTOR_SECRET"); given && *given) return given;
  if (auto mine = castor::detail::user_secret(true)) return *mine;
  return castor::detail::make_cluster_secret();
}

// What `castor run` was asked for: its own flags, then an in-tree app or a
// program, then that target's arguments.
struct RunRequest {
  std::vector<std::string> flags;  // castor run's own, before the target
  std::optional<int> workers;  // -n / --workers; else the app's default (3 for a program)
  int max_restarts = 0;
  std::string target;
  std::vector<std::string> args;
};

// castor run's own flags (Note [Flags]).
po::options_description run_flags() {
  auto flags = command_flags("castor run's flags");
  flags.add_options()
      ("workers,n", po::value<int>()->value_name("N"), "worker processes (default: the app's; 3 for a program)");
  declare_max_restarts(flags);
  return flags;
}

// Applies castor run's flags in `args` to `req`; true if --help was given.
// Throws std::invalid_argument for a bad value.
bool apply_run_flags(const std::vector<std::string>& args, RunRequest& req) {
  auto flags = parse_flags(run_flags(), args);
  if (auto n = flags.find<int>("workers")) {
    if (*n < 1) throw std::invalid_argument("-n (--workers) must be at least 1, got " + std::to_string(*n));
    if (*n > castor::detail::kMaxWorld)
      throw std::invalid_argument("-n (--workers) may be at most " + std::to_string(castor::detail::kMaxWorld) +
                                  " (a world's most workers), got " + std::to_string(*n));
    req.workers = *n;
  }
  if (flags.given("max-restarts")) req.max_restarts = max_restarts_from(flags);
  return flags.given("help");
}

// The program `castor run` starts for `target` when it is not an app: a
// path (with a '/'), or a name found on PATH. Empty when there is none.
std::string find_program(const std::string& target) {
  if (target.find('/') != std::string::npos) return ::access(target.c_str(), X_OK) == 0 ? target : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    auto end = dirs.find(':', start);
    auto dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    auto candidate = (dir.empty() ? std::string(".") : dir) + "/" + target;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "";
}

// Starts `argv()` on `workers` local processes with the launch variables
// of Note [Launch variables] (V1), again under the restart policy.
int run_local_job(int workers, int max_restarts, const std::string& what,
                  const std::function<std::vector<std::string>()>& argv) {
  auto secret = job_secret();
  // Note [Restart policy]: each start of the job gets a fresh port.
  auto make_specs = [&](int) {
    auto port = free_local_port();
    std::vector<ProcessSpec> specs;
    for (int r = 0; r < workers; ++r) {
      ProcessSpec s;
      s.name = "worker" + std::to_string(r);
      s.leader = r == 0;
      s.argv = argv();
      s.env = {{"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", std::to_string(port)},
               {"RANK", std::to_string(r)},
               {"WORLD_SIZE", std::to_string(workers)},
               {"LOCAL_RANK", std::to_string(r)},
               {"LOCAL_WORLD_SIZE", std::to_string(workers)},
               {"CASTOR_SECRET", secret},
               // Empty is unset to init_rpc_from_env: a cluster file named in
               // the user's shell must not override this job's V1 variables.
               {"CASTOR_CLUSTER_FILE", ""},
               {"CASTOR_WORKER", ""}};
      specs.push_back(std::move(s));
    }
    std::printf("[run] %d worker(s) of %s; rank 0 listens on 127.0.0.1:%u (castor inspect finds the job's secret)\n",
                workers, what.c_str(), unsigned(port));
    std::fflush(stdout);
    return specs;
  };
  return run_with_restarts(make_specs, max_restarts, "castor run").exit_code;
}

// Launches processes of this binary, each running the in-tree app as one rank.
int run_app(const App& app, RunRequest req) {
  std::vector<std::string> app_args;
  try {
    // castor's own flags may also follow the app's name (the older form).
    auto [ours, theirs] = split_flags(run_flags(), req.args);
    ours.insert(ours.begin(), req.flags.begin(), req.flags.end());  // F2: one flag, once, either side of the app
    if (apply_run_flags(ours, req)) {
      std::printf("castor run %s [-n N | --workers N] [--max-restarts N]: %s\n%s", app.name.c_str(),
                  app.summary.c_str(), flags_help(declared_flags(app)).c_str());
      return 0;
    }
    app_args = std::move(theirs);
    parse_app_flags(app, app_args);  // F2: refuse bad flags before starting anything
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor run %s: %s\n", app.name.c_str(), e.what());
    return 2;
  }
  auto name = app.name;
  return run_local_job(req.workers.value_or(app.default_workers), req.max_restarts, name, [&] {
    std::vector<std::string> argv{self_executable(), "_app", name};
    argv.insert(argv.end(), app_args.begin(), app_args.end());
    return argv;
  });
}

// `castor run [-n N] [--max-restarts N] <app | program> [args...]`: an app
// compiled into castor, or any program linked against castor::castor that
// joins with init_rpc_from_env() (its arguments are passed on untouched).
int run_command(const std::vector<std::string>& args) {
  RunRequest req;
  size_t i = 0;
  try {
    i = leading_flags(run_flags(), args);  // the flags before the app or program
    req.flags.assign(args.begin(), args.begin() + long(i));
    if (apply_run_flags(req.flags, req)) {
      std::printf("%s\n%s", kUsage, flags_help(run_flags()).c_str());
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor run: %s\n", e.what());
    return 2;
  }
  if (i == args.size()) {
    std::fprintf(stderr, "castor run: which app or program? (see `castor apps`, or give ./my_program)\n");
    return 2;
  }
  req.target = args[i];
  req.args.assign(args.begin() + long(i) + 1, args.end());
  bool path_like = req.target.find('/') != std::string::npos;
  if (auto it = app_registry().find(req.target); !path_like && it != app_registry().end())
    return run_app(it->second, std::move(req));
  auto program = find_program(req.target);
  if (program.empty()) {
    std::fprintf(stderr, "castor run: '%s' is %s\n", req.target.c_str(),
                 path_like ? "not an executable file"
                           : "neither an app (see `castor apps`) nor a program on PATH (give a path: ./prog)");
    return 2;
  }
  auto program_args = req.args;
  return run_local_job(req.workers.value_or(3), req.max_restarts, program, [&] {
    std::vector<std::string> argv{program};
    argv.insert(argv.end(), program_args.begin(), program_args.end());
    return argv;
  });
}

// One rank of an app (started by run_app with RANK etc. in the environment).
int app_worker(const std::string& app_name, const std::vector<std::string>& args) {
  castor::WorkerOptions opts;
  opts.host = "127.0.0.1";
  return run_app_rank(app_name, args, std::move(opts));
}

}  // namespace

int main(int argc, char** argv) {
  castor::config::serve_forks_if_asked(argc, argv);  // Note [Fork server]: the launcher's workers
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  auto cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "demo") {
    // The demo's own defaults, where the user gave none (F2: a flag is
    // taken once). Note [Curve files]: each demo its own files.
    auto given = [&](const std::string& flag) {
      for (const auto& a : rest)
        if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
      return false;
    };
    std::vector<std::string> demo_args;
    if (!given("--compare")) demo_args.push_back("--compare");
    if (!given("--out")) demo_args.insert(demo_args.end(), {"--out", "castor-out/demo-" + new_job_id()});
    if (!given("--min-accuracy")) demo_args.insert(demo_args.end(), {"--min-accuracy", "0.85"});
    demo_args.insert(demo_args.end(), rest.begin(), rest.end());
    RunRequest req;
    req.target = "parameter-server";
    req.args = std::move(demo_args);
    const auto& app = app_registry().at(req.target);  // before req is moved from: argument order is unspecified
    return run_app(app, std::move(req));
  }
  if (cmd == "apps") return list_apps();
  if (cmd == "launch") return launch_command(rest);
  if (cmd == "worker") return worker_command(rest);
  if (cmd == "inspect") return inspect_command(rest);
  if (cmd == "secret") {
    std::printf("%s\n", castor::detail::make_cluster_secret().c_str());
    return 0;
  }
  if (cmd == "run") return run_command(rest);
  if (cmd == "_app" && !rest.empty())
    return app_worker(rest[0], std::vector<std::string>(rest.begin() + 1, rest.end()));
  std::fprintf(stderr, "castor: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
