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
#include "apps/common/local_launch.hpp"
#include "apps/common/restarts.hpp"
#include "apps/common/training_log.hpp"
#include "apps/inspect.hpp"
#include "apps/launch.hpp"
#include "actors/transport/cluster_secret.hpp"

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
    if (!app.flags_help.empty()) std::printf("%s", app.flags_help.c_str());
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
  std::optional<int> workers;  // -n / --workers; else the app's default (3 for a program)
  int max_restarts = 0;
  std::string target;
  std::vector<std::string> args;
};

// Reads -n/--workers N and --max-restarts N at args[i]; false if args[i]
// is neither. Throws std::invalid_argument for a bad value.
bool parse_run_flag(const std::vector<std::string>& args, size_t& i, RunRequest& req) {
  if (args[i] == "-n" || args[i] == "--workers") {
    if (i + 1 >= args.size()) throw std::invalid_argument(args[i] + " needs a number of workers");
    const auto& n = args[++i];
    if (n.empty() || n.size() > 5 || n.find_first_not_of("0123456789") != std::string::npos || std::stoi(n) < 1)
      throw std::invalid_argument(args[i - 1] + " must be a number of workers, at least 1, got '" + n + "'");
    req.workers = std::stoi(n);
    return true;
  }
  return parse_max_restarts(args, i, req.max_restarts);
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
    for (size_t i = 0; i < req.args.size(); ++i) {
      if (parse_run_flag(req.args, i, req)) continue;
      if (req.args[i] == "--help") {
        std::printf("castor run %s [-n N | --workers N] [--max-restarts N]: %s\n%s", app.name.c_str(),
                    app.summary.c_str(), app.flags_help.c_str());
        return 0;
      }
      app_args.push_back(req.args[i]);
    }
    parse_app_args(app_args, app.known_flags);  // refuse bad flags before starting anything
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
    for (; i < args.size() && args[i].rfind("-", 0) == 0; ++i) {
      if (args[i] == "--help" || args[i] == "-h") {
        std::fputs(kUsage, stdout);
        return 0;
      }
      if (!parse_run_flag(args, i, req)) throw std::invalid_argument("unknown flag " + args[i]);
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
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  auto cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "demo") {
    // Note [Curve files]: each demo its own files.
    std::vector<std::string> demo_args{"--compare", "--out", "castor-out/demo-" + new_job_id(), "--min-accuracy",
                                       "0.85"};
    demo_args.insert(demo_args.end(), rest.begin(), rest.end());  // later flags win
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
