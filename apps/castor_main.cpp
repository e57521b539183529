// castor: the command. `castor demo` runs the main job on local workers;
// `castor run <app>` runs any app on local worker processes.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "apps/common/app.hpp"
#include "apps/common/local_launch.hpp"
#include "apps/common/restarts.hpp"
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
    "  run <app> [--workers N] [--max-restarts N] [app flags]\n"
    "                             run an app on N local worker processes; with --max-restarts, a\n"
    "                             worker's death restarts the job, up to N times per worker\n"
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

// Launches `workers` processes of this binary, each running `app` as one rank.
int run_app(const std::string& app_name, std::vector<std::string> args) {
  auto it = app_registry().find(app_name);
  if (it == app_registry().end()) {
    std::fprintf(stderr, "castor run: unknown app '%s' (see `castor apps`)\n", app_name.c_str());
    return 2;
  }
  int workers = it->second.default_workers;
  int max_restarts = 0;
  std::vector<std::string> app_args;
  try {
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--workers" && i + 1 < args.size()) {
        workers = std::atoi(args[++i].c_str());
      } else if (parse_max_restarts(args, i, max_restarts)) {
        continue;
      } else if (args[i] == "--help") {
        std::printf("castor run %s [--workers N] [--max-restarts N]: %s\n%s", app_name.c_str(),
                    it->second.summary.c_str(), it->second.flags_help.c_str());
        return 0;
      } else {
        app_args.push_back(args[i]);
      }
    }
    parse_app_args(app_args, it->second.known_flags);  // refuse bad flags before starting anything
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor run %s: %s\n", app_name.c_str(), e.what());
    return 2;
  }
  if (workers < 1) {
    std::fprintf(stderr, "castor run: --workers must be at least 1\n");
    return 2;
  }
  auto secret = job_secret();
  // Note [Restart policy]: each start of the job gets a fresh port.
  auto make_specs = [&](int) {
    auto port = free_local_port();
    std::vector<ProcessSpec> specs;
    for (int r = 0; r < workers; ++r) {
      ProcessSpec s;
      s.name = "worker" + std::to_string(r);
      s.leader = r == 0;
      s.argv = {self_executable(), "_app", app_name};
      s.argv.insert(s.argv.end(), app_args.begin(), app_args.end());
      s.env = {{"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", std::to_string(port)},
               {"RANK", std::to_string(r)},
               {"WORLD_SIZE", std::to_string(workers)},
               {"CASTOR_SECRET", secret}};
      specs.push_back(std::move(s));
    }
    std::printf("[run] %d worker(s) of %s; rank 0 listens on 127.0.0.1:%u (castor inspect finds the job's secret)\n",
                workers, app_name.c_str(), unsigned(port));
    std::fflush(stdout);
    return specs;
  };
  return run_with_restarts(make_specs, max_restarts, "castor run").exit_code;
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
    std::vector<std::string> demo_args{"--compare", "--out", "castor-out/demo", "--min-accuracy", "0.85"};
    demo_args.insert(demo_args.end(), rest.begin(), rest.end());  // later flags win
    return run_app("parameter-server", demo_args);
  }
  if (cmd == "apps") return list_apps();
  if (cmd == "launch") return launch_command(rest);
  if (cmd == "worker") return worker_command(rest);
  if (cmd == "inspect") return inspect_command(rest);
  if (cmd == "secret") {
    std::printf("%s\n", castor::detail::make_cluster_secret().c_str());
    return 0;
  }
  if (cmd == "run") {
    if (rest.empty()) {
      std::fprintf(stderr, "castor run: which app? (see `castor apps`)\n");
      return 2;
    }
    return run_app(rest[0], std::vector<std::string>(rest.begin() + 1, rest.end()));
  }
  if (cmd == "_app" && !rest.empty())
    return app_worker(rest[0], std::vector<std::string>(rest.begin() + 1, rest.end()));
  std::fprintf(stderr, "castor: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
