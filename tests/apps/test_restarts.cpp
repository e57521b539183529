// A training job that survives its workers (Note [Restart policy], Note
// [Trainer failure], Note [Parameter-server checkpoints]): `castor run
// parameter-server --max-restarts N --checkpoint-dir D` with a trainer
// SIGKILLed after the first epoch: it is started again alone, rejoins under
// a new incarnation and the epoch it died in runs again; with the server
// SIGKILLed: the job restarts whole and resumes from the last checkpoint.
// Both end with the accuracy of an undisturbed run. Then the restart
// budget, and a chaos test of random SIGKILLs over 10 seeds.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "apps/cli_runs.hpp"
#include "apps/common/local_launch.hpp"
#include "apps/common/restarts.hpp"
#include "apps/shell_spec.hpp"
#include "support/errors.hpp"

using castor::test::CommandResult;
using castor::test::contains;
using castor::test::run_castor;
using castor::test::shell;
using castor::test::worker_pid;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// A short sync run: 2 trainers, 3 epochs on 6000 samples.
const std::vector<std::string> kJob{"run", "parameter-server", "--workers", "3", "--epochs", "3", "--limit", "6000",
                                    "--test-limit", "1000", "--batch-size", "32", "--seed", "5"};

std::string fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("castor-test-restarts-" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  return dir.string();
}

std::vector<std::string> job(std::vector<std::string> extra) {
  auto args = kJob;
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The last "test accuracy: X%" of a run, in percent; NaN when there is none.
double accuracy_of(const std::string& out) {
  auto at = out.rfind("test accuracy: ");
  if (at == std::string::npos) return std::nan("");
  return std::stod(out.substr(at + 15));
}

size_t count(const std::string& out, const std::string& what) {
  size_t n = 0;
  for (auto at = out.find(what); at != std::string::npos; at = out.find(what, at + 1)) ++n;
  return n;
}

// The port that the job's latest start listens on ("" before the first).
std::string latest_port(const std::string& out) {
  auto at = out.rfind("listens on 127.0.0.1:");
  if (at == std::string::npos) return "";
  at += 21;
  return out.substr(at, out.find_first_not_of("0123456789", at) - at);
}

// SIGKILLs rank `rank` of the job's latest start; false if it is not running.
bool kill_rank(const std::string& out, int rank) {
  auto port = latest_port(out);
  if (port.empty()) return false;
  auto pid = worker_pid(rank, port);
  return pid > 0 && ::kill(pid, SIGKILL) == 0;
}

// Every "(killed by signal N)" the launcher reported was a SIGKILL.
void check_only_sigkills(const std::string& out) {
  std::regex signal_re("killed by signal ([0-9]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), signal_re); it != std::sregex_iterator(); ++it) {
    auto seen = (*it)[0].str();
    CHECK_MESSAGE((*it)[1].str() == "9", "a process died of another signal: " << seen);
  }
}

// The undisturbed run of kJob, once per test process: its accuracy, and how
// long it took (the chaos test aims its kills inside that time).
struct Undisturbed {
  double accuracy = 0;
  std::chrono::milliseconds took{0};
  std::vector<double> losses;  // each epoch's training loss, where its progress line shows it
};

// The training loss of epochs 1 to `epochs`, each from the last line that
// ended it ("epoch k/E [...] 100% loss X"); NaN for an epoch with none.
std::vector<double> epoch_losses(const std::string& out, int epochs) {
  std::vector<double> losses;
  for (int e = 1; e <= epochs; ++e) {
    auto at = out.rfind("epoch " + std::to_string(e) + "/" + std::to_string(epochs) + " [");
    auto loss = at == std::string::npos ? std::string::npos : out.find("% loss ", at);
    losses.push_back(loss == std::string::npos || loss > out.find('\n', at) ? std::nan("")
                                                                             : std::stod(out.substr(loss + 7)));
  }
  return losses;
}

const Undisturbed& undisturbed() {
  static Undisturbed run = [] {
    auto start = Clock::now();
    auto r = run_castor(job({}), std::chrono::seconds(180));
    INFO(r.output);
    REQUIRE(r.code == 0);
    return Undisturbed{accuracy_of(r.output),
                       std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start), {}};
  }();
  return run;
}

double reference_accuracy() { return undisturbed().accuracy; }

// Printed once the checkpoint of epoch 1 is committed.
const std::string kEpoch1Saved = "checkpoint: epoch 1 saved in ";

// Runs kJob with restarts and a checkpoint folder, SIGKILLing `rank` once
// epoch 1 has ended and its checkpoint is committed.
CommandResult run_killing_after_epoch1(int rank, const std::string& dir, bool& killed) {
  killed = false;
  return run_castor(job({"--max-restarts", "2", "--checkpoint-dir", dir}), std::chrono::seconds(240),
                    [&](const std::string& out) {
                      if (!killed && contains(out, kEpoch1Saved)) killed = kill_rank(out, rank);
                    });
}

}  // namespace

TEST_CASE("parameter-server --checkpoint-dir: a later run resumes after the last checkpoint, other settings are refused") {
  auto dir = fresh_dir("resume");
  auto first = run_castor({"run", "parameter-server", "--workers", "3", "--epochs", "2", "--limit", "6000",
                           "--test-limit", "1000", "--batch-size", "32", "--seed", "5", "--checkpoint-dir", dir});
  INFO(first.output);
  REQUIRE(first.code == 0);
  CHECK(fs::exists(fs::path(dir) / "MANIFEST.json"));
  auto second = run_castor(job({"--checkpoint-dir", dir}));
  INFO(second.output);
  REQUIRE(second.code == 0);
  CHECK(contains(second.output, "resuming after epoch 2 from the checkpoint in " + dir));
  CHECK_FALSE(contains(second.output, "epoch 1/3 ["));
  CHECK(contains(second.output, "epoch 3/3 [##############################] 100%"));
  // Resumed training is the training that was not interrupted.
  CHECK(std::fabs(accuracy_of(second.output) - reference_accuracy()) < 1e-9);
  auto other = run_castor(job({"--checkpoint-dir", dir, "--hidden", "64"}));
  INFO(other.output);
  CHECK(other.code == 1);
  CHECK(contains(other.output, "the checkpoint in " + dir + " (epoch 3) was made with trainers=2 hidden=128 seed=5"));
  CHECK(contains(other.output, "; this run has trainers=2 hidden=64 seed=5"));
  CHECK(contains(other.output, ": give another --checkpoint-dir"));
}

TEST_CASE("castor run --max-restarts: a trainer SIGKILLed after epoch 1 is started again alone and rejoins, and the job finishes") {
  auto reference = reference_accuracy();
  bool killed = false;
  auto r = run_killing_after_epoch1(2, fresh_dir("trainer"), killed);
  INFO(r.output);
  REQUIRE(killed);
  CHECK(r.code == 0);
  CHECK(contains(r.output, "[launch] worker2 died (killed by signal 9): starting it again (restart 1 of 2 for worker2); "
                           "it rejoins under incarnation 2"));
  CHECK(contains(r.output, "castor[worker1]: worker2 rejoined (incarnation 2)"));
  // The others carried on: the job started once, and resumed from no checkpoint.
  CHECK(count(r.output, "[run] 3 worker(s) of parameter-server") == 1);
  CHECK_FALSE(contains(r.output, "restarting the job"));
  CHECK_FALSE(contains(r.output, "resuming after epoch"));
  CHECK(contains(r.output, "trainer worker2 rejoined: "));  // epoch 2 runs again, or it trains from epoch 2 on
  CHECK(std::fabs(accuracy_of(r.output) - reference) <= 0.5);
  check_only_sigkills(r.output);
}

TEST_CASE("castor run --max-restarts: the server (rank 0) SIGKILLed after epoch 1, the job resumes and finishes") {
  auto reference = reference_accuracy();
  bool killed = false;
  auto r = run_killing_after_epoch1(0, fresh_dir("server"), killed);
  INFO(r.output);
  REQUIRE(killed);
  CHECK(r.code == 0);
  CHECK(contains(r.output, "[launch] worker0 died (killed by signal 9): restarting the job (restart 1 of 2 for worker0)"));
  CHECK(contains(r.output, "resuming after epoch 1 from the checkpoint"));
  CHECK(std::fabs(accuracy_of(r.output) - reference) <= 0.5);
  check_only_sigkills(r.output);
}

TEST_CASE("castor run --max-restarts parameter-server with no --checkpoint-dir: the server SIGKILLed after epoch 1, the job resumes from a folder of its own, which goes with it") {
  auto reference = reference_accuracy();
  bool killed = false;
  auto r = run_castor(job({"--max-restarts", "2"}), std::chrono::seconds(240), [&](const std::string& out) {
    if (!killed && contains(out, kEpoch1Saved)) killed = kill_rank(out, 0);
  });
  INFO(r.output);
  REQUIRE(killed);
  CHECK(r.code == 0);
  auto at = r.output.find(kEpoch1Saved) + kEpoch1Saved.size();
  auto folder = r.output.substr(at, r.output.find('\n', at) - at);
  CHECK(contains(folder, "castor-out/parameter-server-"));
  CHECK(contains(folder, ".checkpoint"));
  CHECK(contains(r.output, "resuming after epoch 1 from the checkpoint in " + folder + "\n"));
  CHECK(std::fabs(accuracy_of(r.output) - reference) <= 0.5);
  CHECK_FALSE(fs::exists(folder));
  check_only_sigkills(r.output);
}

TEST_CASE("castor run --max-restarts 1: a worker that dies twice fails the job, naming it and the count") {
  int kills = 0;
  auto r = run_castor(job({"--max-restarts", "1", "--checkpoint-dir", fresh_dir("budget")}), std::chrono::seconds(240),
                      [&](const std::string& out) {
                        // Once after epoch 1, once more as soon as it has rejoined.
                        if ((kills == 0 && contains(out, kEpoch1Saved)) ||
                            (kills == 1 && contains(out, "trainer worker1 rejoined")))
                          kills += kill_rank(out, 1) ? 1 : 0;
                      });
  INFO(r.output);
  REQUIRE(kills == 2);
  CHECK(r.code == 128 + SIGKILL);
  CHECK(contains(r.output, "starting it again (restart 1 of 1 for worker1)"));
  CHECK(contains(r.output, "castor run: worker1 died (killed by signal 9) 2 times; --max-restarts 1 allows 1 "
                           "restart(s) per worker: the job fails"));
  auto bad = run_castor({"run", "parameter-server", "--max-restarts", "many"});
  CHECK(bad.code == 2);
  CHECK(contains(bad.output, "castor run parameter-server: the argument ('many') for option '--max-restarts' is invalid"));
  bad = run_castor({"run", "--max-restarts", "1001", "parameter-server"});
  CHECK(bad.code == 2);
  CHECK(contains(bad.output, "castor run: --max-restarts takes a number from 0 to 255, not 1001"));
}

namespace {

// The process whose arguments include `args` in this order, one after the
// other (a `castor worker ... --name trainer2` of a launch), or -1.
pid_t process_with_args(const std::vector<std::string>& args) {
  std::string want;
  for (const auto& a : args) want += a + '\0';
  for (const auto& entry : fs::directory_iterator("/proc")) {
    auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (contains(cmdline, want)) return pid_t(std::stol(name));
  }
  return -1;
}

// A cluster file of kJob's parameter server (ps, trainer1, trainer2 on free
// ports), each worker with its certificate from `certs` when given.
std::string write_cluster(const std::string& name, const std::string& checkpoint_dir, const std::string& certs) {
  auto path = fresh_dir(name) + ".json";
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream f(path);
  f << R"({"app": "parameter-server", "args": ["--epochs", "3", "--limit", "6000", "--test-limit", "1000",)"
    << R"( "--batch-size", "32", "--seed", "5", "--checkpoint-dir", ")" << checkpoint_dir << R"("],)"
    << R"( "options": {"init_timeout_ms": 30000}, "workers": [)";
  const char* names[] = {"ps", "trainer1", "trainer2"};
  for (int i = 0; i < 3; ++i) {
    f << (i ? "," : "") << R"({"name": ")" << names[i] << R"(", "host": "127.0.0.1", "port": )"
      << castor::apps::free_local_port();
    if (!certs.empty())
      f << R"(, "tls": {"certificate": ")" << certs << "/" << names[i] << R"(.pem", "key": ")" << certs << "/"
        << names[i] << R"(.key", "ca": ")" << certs << R"(/ca.pem"})";
    f << "}";
  }
  f << "]}";
  return path;
}

}  // namespace

TEST_CASE("castor launch --local --max-restarts, with TLS: a trainer SIGKILLed after epoch 1, the job resumes and finishes") {
  auto reference = reference_accuracy();
  auto certs = fresh_dir("certs");
  REQUIRE(std::system(("'" + std::string(CASTOR_SOURCE_DIR) + "/scripts/make-certs.sh' '" + certs +
                       "' ps trainer1 trainer2 >/dev/null")
                          .c_str()) == 0);
  auto file = write_cluster("tls-job", fresh_dir("tls-checkpoints"), certs);
  bool killed = false;
  auto r = run_castor({"launch", file, "--local", "--max-restarts", "1"}, std::chrono::seconds(240),
                      [&](const std::string& out) {
                        if (killed || !contains(out, kEpoch1Saved)) return;
                        auto pid = process_with_args({"worker", "--config", file, "--name", "trainer2"});
                        killed = pid > 0 && ::kill(pid, SIGKILL) == 0;
                      });
  INFO(r.output);
  REQUIRE(killed);
  CHECK(r.code == 0);
  CHECK(contains(r.output, "[launch] trainer2 died (killed by signal 9): starting it again (restart 1 of 1 for trainer2); "
                           "it rejoins under incarnation 2"));
  // A cluster file's rejoin (no master): through ps, then trainer1.
  CHECK(contains(r.output, "castor[trainer1]: trainer2 rejoined (incarnation 2)"));
  CHECK(count(r.output, "[launch] starting 3 of 3 worker(s) from " + file) == 1);
  CHECK(contains(r.output, "trainer trainer2 rejoined: "));
  CHECK_FALSE(contains(r.output, "not encrypted"));  // TLS on every start
  CHECK(std::fabs(accuracy_of(r.output) - reference) <= 0.5);
  check_only_sigkills(r.output);
}

TEST_CASE("the restart loop: what counts as a death, restarts per worker, and a job that rank 0 ended well") {
  using castor::apps::run_with_restarts;
  int starts = 0;
  // A worker that dies just after rank 0 ended well (reaped in the same
  // round or a later one, never before): the job is over, not restarted.
  for (int i = 0; i < 3; ++i) {
    starts = 0;
    auto r = run_with_restarts(
        [&](int) {
          ++starts;
          return std::vector<castor::apps::ProcessSpec>{shell("leader", "sleep 0.2; exit 0", true),
                                                        shell("crasher", "sleep 0.35; kill -9 $$")};
        },
        2, "test");
    CHECK(r.exit_code == 0);
    CHECK(starts == 1);
  }
  // A worker other than rank 0 that dies while rank 0 runs: started again
  // alone (R2), in its next life; the job itself starts once.
  starts = 0;
  auto again = run_with_restarts(
      [&](int) {
        ++starts;
        return std::vector<castor::apps::ProcessSpec>{
            shell("leader", "sleep 1.5; exit 0", true),
            shell("flaky", "[ \"$CASTOR_INCARNATION\" = 3 ] && exit 0; sleep 0.1; kill -9 $$")};
      },
      2, "test");
  CHECK(again.exit_code == 0);
  CHECK(starts == 1);
  REQUIRE(again.restarted.size() == 2);
  CHECK(again.restarted[1].name == "flaky");
  CHECK(again.died.empty());
  // Rank 0 dies: the whole job starts again (R3), every worker in its first life.
  starts = 0;
  auto whole = run_with_restarts(
      [&](int) {
        ++starts;
        return std::vector<castor::apps::ProcessSpec>{
            shell("leader", "[ \"$CASTOR_RESTART\" = 1 ] && exit 0; sleep 0.1; kill -9 $$", true),
            shell("other", "[ \"$CASTOR_INCARNATION\" = 1 ] || exit 7; sleep 5")};
      },
      2, "test");
  CHECK(whole.exit_code == 0);
  CHECK(starts == 2);
  // Always dying: the budget's end names the dead worker and its signal,
  // whichever exit was reaped first.
  starts = 0;
  auto spent = run_with_restarts(
      [&](int) {
        ++starts;
        return std::vector<castor::apps::ProcessSpec>{shell("leader", "sleep 5; exit 1", true),
                                                      shell("crasher", "sleep 0.1; kill -9 $$")};
      },
      1, "test");
  CHECK(spent.exit_code == 128 + SIGKILL);
  CHECK(spent.failed == "crasher");
  CHECK(starts == 1);
  CHECK(spent.restarted.size() == 1);
  // A worker's own error is not restarted (R4).
  starts = 0;
  auto own = run_with_restarts(
      [&](int) {
        ++starts;
        return std::vector<castor::apps::ProcessSpec>{shell("leader", "sleep 5; exit 0", true),
                                                      shell("broken", "exit 3")};
      },
      2, "test");
  CHECK(own.exit_code == 3);
  CHECK(own.failed == "broken");
  CHECK(starts == 1);
}

// The multi-host case runs for real in tests/netns (scenario E); here, one
// host's launch without rank 0, its workers played by shell scripts.
TEST_CASE("the restart loop on a host without rank 0: a worker's note that rank 0 was lost restarts this host's workers") {
  using castor::apps::run_with_restarts;
  // R7: "far" finds rank 0 lost (its note), then fails as a program would;
  // "near" is stopped by the launcher. Both start again in their first life.
  const std::string note = "echo 'rank0-lost worker0: connection lost' >>\"$CASTOR_LAUNCH_NOTES\"; ";
  int starts = 0;
  std::vector<std::string> restart_seen;
  auto followed = run_with_restarts(
      [&](int restart) {
        ++starts;
        restart_seen.push_back(std::to_string(restart));
        return std::vector<castor::apps::ProcessSpec>{
            shell("far", "[ \"$CASTOR_RESTART\" = 1 ] && [ ! -s \"$CASTOR_LAUNCH_NOTES\" ] && exit 0; " + note +
                             "exit 1"),
            shell("near", "[ \"$CASTOR_RESTART\" = 1 ] && [ \"$CASTOR_INCARNATION\" = 1 ] && exit 0; sleep 5")};
      },
      2, "test", 3);
  CHECK(followed.exit_code == 0);
  CHECK(starts == 2);
  CHECK(restart_seen == std::vector<std::string>{"0", "1"});
  // A worker of this host dying by itself is still R2's: started again alone.
  starts = 0;
  auto alone = run_with_restarts(
      [&](int) {
        ++starts;
        return std::vector<castor::apps::ProcessSpec>{
            shell("flaky", "[ \"$CASTOR_INCARNATION\" = 2 ] && exit 0; sleep 0.1; kill -9 $$"),
            shell("steady", "sleep 1; exit 0")};
      },
      2, "test", 3);
  CHECK(alone.exit_code == 0);
  CHECK(starts == 1);
  REQUIRE(alone.restarted.size() == 1);
  CHECK(alone.restarted[0].name == "flaky");
  // Rank 0 lost again and again: this host gives up after max_restarts x
  // the job's workers (1 x 2) restarts, failing with the worker's code.
  starts = 0;
  auto spent = run_with_restarts(
      [&](int) {
        ++starts;
        return std::vector<castor::apps::ProcessSpec>{shell("far", note + "exit 1")};
      },
      1, "test", 2);
  CHECK(spent.exit_code == 1);
  CHECK(starts == 3);
  // Without the note, a worker's error is its own (R5): no restart.
  starts = 0;
  auto own = run_with_restarts(
      [&](int) {
        ++starts;
        return std::vector<castor::apps::ProcessSpec>{shell("far", "exit 4")};
      },
      2, "test", 3);
  CHECK(own.exit_code == 4);
  CHECK(starts == 1);
}

namespace {

// What a chaos run trains: a job of `epochs` epochs, started with
// `args` (which the chaos adds its restart budget to), whose launcher says
// `started` at each start; its undisturbed run's accuracy and time, and how
// far from that accuracy a disturbed run may end.
struct ChaosJob {
  std::vector<std::string> args;
  std::string started;
  int epochs = 0;
  Undisturbed undisturbed;
  double tolerance = 0;
  std::function<void(const std::string&)> check_output;  // more to check of a run's output, if given
};

// Whether the output from `from` on reports the end of an epoch before the
// last: the job is still training, with an epoch to go.
bool ended_an_epoch_before_the_last(const std::string& out, size_t from, int epochs) {
  for (int e = 1; e < epochs; ++e)
    if (out.find("epoch " + std::to_string(e) + "/" + std::to_string(epochs) + " [", from) != std::string::npos)
      return true;
  return false;
}

// Chaos: for each seed, 1 or 2 SIGKILLs of random ranks, each at a random
// time of a start of the job (from 5% to 85% of an undisturbed run's
// time), and at the latest once that start has ended an epoch before the
// last: the undisturbed run's time is taken once, and a start that runs
// faster than it would otherwise end before a late kill, which then finds
// nothing to restart. Every run must finish well with the undisturbed
// accuracy (within the job's tolerance), and no process may die of any
// other signal.
void chaos(const ChaosJob& job, unsigned seed) {
  auto reference = job.undisturbed.accuracy;
  std::string summary;
  {
    std::mt19937 rng(seed);
    int planned = 1 + int(rng() % 2);
    std::vector<int> victims;
    std::vector<std::chrono::milliseconds> delays;  // after the start of the job that the kill hits
    for (int i = 0; i < planned; ++i) {
      victims.push_back(int(rng() % 3));
      auto span = job.undisturbed.took.count();
      delays.emplace_back(span / 20 + int64_t(rng() % uint64_t(span * 4 / 5)));
    }
    int done = 0;
    size_t starts_seen = 0;  // starts of the job (R3) and of single workers (R2)
    Clock::time_point started{};
    size_t start_at = 0;  // where the latest start's output begins
    // A worker killed before the world finished joining comes back once
    // and then restarts the job (R6): one kill, one start.
    auto starts_in = [&](const std::string& out) {
      return count(out, job.started) + count(out, ": starting it again (restart") -
             count(out, "its world never finished joining");
    };
    auto args = job.args;
    args.insert(args.end(), {"--max-restarts", "3"});
    auto r = run_castor(args, std::chrono::seconds(240), [&](const std::string& out) {
      auto starts = starts_in(out);
      if (starts != starts_seen) {
        starts_seen = starts;
        started = Clock::now();
        start_at = out.size();
      }
      if (done == planned || starts_seen != size_t(done) + 1) return;
      bool due = Clock::now() - started >= delays[size_t(done)] ||
                 ended_an_epoch_before_the_last(out, start_at, job.epochs);
      if (due && kill_rank(out, victims[size_t(done)])) ++done;
    });
    INFO("seed " << seed << ": killed " << done << " of " << planned << " planned; output:\n" << r.output);
    CHECK(r.code == 0);
    auto restarted = count(r.output, "restarting the job");
    auto rejoined = count(r.output, ": starting it again (restart");
    summary += "seed " + std::to_string(seed) + ": " + std::to_string(done) + " SIGKILL(s), " +
               std::to_string(restarted) + " job restart(s), " + std::to_string(rejoined) + " rejoin(s), accuracy " +
               std::to_string(accuracy_of(r.output)) + "%\n";
    CHECK(restarted + rejoined <= size_t(done));
    CHECK(restarted + rejoined >= 1);  // the first kill found the job training, by its last epoch at the latest
    CHECK(std::fabs(accuracy_of(r.output) - reference) <= job.tolerance);
    if (job.check_output) job.check_output(r.output);
    check_only_sigkills(r.output);
  }
  MESSAGE("undisturbed accuracy " << reference << "%\n" << summary);
}

ChaosJob parameter_server_chaos(unsigned seed) {
  return ChaosJob{job({"--checkpoint-dir", fresh_dir("chaos-" + std::to_string(seed))}),
                  "[run] 3 worker(s) of parameter-server", 3, undisturbed(), 0.5, {}};
}

}  // namespace

TEST_CASE("chaos: random SIGKILLs during training, seeds 1-5: every run finishes with the undisturbed accuracy") {
  for (unsigned seed = 1; seed <= 5; ++seed) chaos(parameter_server_chaos(seed), seed);
}

TEST_CASE("chaos: random SIGKILLs during training, seeds 6-10: every run finishes with the undisturbed accuracy") {
  for (unsigned seed = 6; seed <= 10; ++seed) chaos(parameter_server_chaos(seed), seed);
}

// The pipeline's stages survive too (Note [Pipeline failure]): the stages
// hold the training's state, so a stage's death sends both back to the last
// checkpoint, which the driver keeps in a folder of the job's own when none
// is given.
namespace {

const std::vector<std::string> kPipelineJob{"run", "pipeline", "--workers", "3", "--epochs", "4", "--limit", "20000",
                                            "--test-limit", "1000"};

std::vector<std::string> pipeline_job(std::vector<std::string> extra) {
  auto args = kPipelineJob;
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The undisturbed pipeline, once per test process. The stages draw their
// first weights on their own workers, unseeded, so runs differ by a point
// or so.
const Undisturbed& pipeline_undisturbed() {
  static Undisturbed run = [] {
    auto start = Clock::now();
    auto r = run_castor(kPipelineJob, std::chrono::seconds(180));
    INFO(r.output);
    REQUIRE(r.code == 0);
    return Undisturbed{accuracy_of(r.output),
                       std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start),
                       epoch_losses(r.output, 4)};
  }();
  return run;
}

double pipeline_reference_accuracy() { return pipeline_undisturbed().accuracy; }

// A disturbed pipeline trained on from the right state: every epoch's loss
// lies within 6 % of the undisturbed run's in epoch 1 and 4 % later. Six
// undisturbed runs differed by up to 3.3 % in epoch 1 and 1.9 % later (the
// stages' first weights, the order in which micro-batches' gradients add
// up); an epoch run again from the checkpoint an epoch too early differs by
// 8-12 %, from fresh weights by 100 % and more (epoch 1 ends at about 0.89,
// epochs 2-4 at 0.47, 0.43, 0.41).
void check_pipeline_losses(const std::string& out) {
  auto reference = pipeline_undisturbed().losses;
  auto losses = epoch_losses(out, 4);
  for (size_t e = 0; e < losses.size(); ++e) {
    CAPTURE(e + 1);
    CHECK(std::fabs(losses[e] - reference[e]) <= (e == 0 ? 0.06 : 0.04) * reference[e]);
  }
}

// The folder of "checkpoint: epoch 1 saved in <folder>\n", or "".
std::string saved_folder(const std::string& out) {
  auto at = out.find("checkpoint: epoch 1 saved in ");
  if (at == std::string::npos) return "";
  at += 29;
  return out.substr(at, out.find('\n', at) - at);
}

// Runs the pipeline under --max-restarts 2, SIGKILLing `rank` once epoch 1's
// checkpoint is committed.
CommandResult run_pipeline_killing_after_epoch1(int rank, std::vector<std::string> extra, bool& killed) {
  killed = false;
  extra.insert(extra.end(), {"--max-restarts", "2"});
  return run_castor(pipeline_job(extra), std::chrono::seconds(240), [&](const std::string& out) {
    if (!killed && contains(out, "checkpoint: epoch 1 saved in ")) killed = kill_rank(out, rank);
  });
}

}  // namespace

TEST_CASE("castor run --max-restarts pipeline: a stage SIGKILLed after epoch 1 rejoins, both stages go back to the checkpoint, and the job finishes") {
  auto reference = pipeline_reference_accuracy();
  for (int rank : {2, 1}) {
    CAPTURE(rank);
    auto name = "worker" + std::to_string(rank);
    bool killed = false;
    auto r = run_pipeline_killing_after_epoch1(rank, {}, killed);
    INFO(r.output);
    REQUIRE(killed);
    CHECK(r.code == 0);
    CHECK(contains(r.output, "[launch] " + name + " died (killed by signal 9): starting it again (restart 1 of 2 for " +
                                 name + "); it rejoins under incarnation 2"));
    CHECK(contains(r.output, "; waiting for the stages' workers to rejoin\n"));
    CHECK(contains(r.output, "castor[worker0]: " + name + " rejoined (incarnation 2)"));
    // The rejoined stage is bound to its CPU again, where the first life was.
    CHECK(count(r.output, "pipeline: stages bound to a CPU each") + count(r.output, "pipeline: stages not bound") == 2);
    CHECK(contains(r.output, "pipeline: the stages are back; training goes on from the checkpoint of epoch "));
    // The others carried on: the job started once.
    CHECK(count(r.output, "[run] 3 worker(s) of pipeline") == 1);
    CHECK_FALSE(contains(r.output, "restarting the job"));
    CHECK(contains(r.output, "checkpoint: epoch 4 saved in "));
    CHECK(std::fabs(accuracy_of(r.output) - reference) <= 4.0);
    check_pipeline_losses(r.output);
    // PF1: the job's own folder, under castor-out, went with the job.
    auto folder = saved_folder(r.output);
    CHECK(contains(folder, "castor-out/pipeline-"));
    CHECK(contains(folder, ".checkpoint"));
    CHECK_FALSE(fs::exists(folder));
    check_only_sigkills(r.output);
  }
}

TEST_CASE("castor run --max-restarts pipeline: the driver (rank 0) SIGKILLed after epoch 1, the job restarts whole and resumes from its own folder") {
  auto reference = pipeline_reference_accuracy();
  bool killed = false;
  auto r = run_pipeline_killing_after_epoch1(0, {}, killed);
  INFO(r.output);
  REQUIRE(killed);
  CHECK(r.code == 0);
  CHECK(contains(r.output, "[launch] worker0 died (killed by signal 9): restarting the job (restart 1 of 2 for worker0)"));
  auto folder = saved_folder(r.output);
  CHECK(contains(r.output, "resuming after epoch 1 from the checkpoint in " + folder + "\n"));
  CHECK(count(r.output, "[run] 3 worker(s) of pipeline") == 2);
  CHECK(std::fabs(accuracy_of(r.output) - reference) <= 3.0);
  check_pipeline_losses(r.output);
  CHECK_FALSE(fs::exists(folder));
  check_only_sigkills(r.output);
}

TEST_CASE("pipeline --checkpoint-dir: a later run resumes after the last checkpoint, other settings are refused") {
  auto dir = fresh_dir("pipeline-resume");
  auto small = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"run", "pipeline", "--workers", "3", "--limit", "2048", "--test-limit", "500",
                                  "--no-progress", "--checkpoint-dir", dir};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_castor(args);
  };
  auto first = small({"--epochs", "2", "--checkpoint-every", "2"});
  INFO(first.output);
  REQUIRE(first.code == 0);
  CHECK(count(first.output, "checkpoint: epoch ") == 1);  // every 2 epochs: after epoch 2 only
  CHECK(contains(first.output, "checkpoint: epoch 2 saved in " + dir + "\n"));
  CHECK(fs::exists(fs::path(dir) / "MANIFEST.json"));
  // More epochs, other micro-batches (not a setting of the checkpoint's).
  auto second = small({"--epochs", "3", "--micro-batches", "2"});
  INFO(second.output);
  REQUIRE(second.code == 0);
  CHECK(contains(second.output, "resuming after epoch 2 from the checkpoint in " + dir + "\n"));
  CHECK(contains(second.output, "checkpoint: epoch 3 saved in " + dir + "\n"));
  CHECK_FALSE(contains(second.output, "checkpoint: epoch 2 saved"));
  // A folder the user gave stays.
  CHECK(fs::exists(fs::path(dir) / "MANIFEST.json"));
  auto other = small({"--epochs", "4", "--hidden1", "64"});
  INFO(other.output);
  CHECK(other.code == 1);
  CHECK(contains(other.output, "pipeline: the checkpoint in " + dir + " (epoch 3) was made with hidden1=256 hidden2=128"));
  CHECK(contains(other.output, "; this run has hidden1=64 hidden2=128"));
  CHECK(contains(other.output, ": give another --checkpoint-dir"));
  auto bad = run_castor({"run", "pipeline", "--checkpoint-every", "0"});
  CHECK(bad.code == 2);
  CHECK(contains(bad.output, "--checkpoint-every must be at least 1"));
}

namespace {

void pipeline_chaos(unsigned seed) {
  chaos(ChaosJob{kPipelineJob, "[run] 3 worker(s) of pipeline", 4, pipeline_undisturbed(), 4.0, check_pipeline_losses},
        seed);
}

}  // namespace

TEST_CASE("chaos: random SIGKILLs during the pipeline's training, seeds 1-2: every run trains on from the right state") {
  for (unsigned seed = 1; seed <= 2; ++seed) pipeline_chaos(seed);
}

TEST_CASE("chaos: random SIGKILLs during the pipeline's training, seeds 3-4: every run trains on from the right state") {
  for (unsigned seed = 3; seed <= 4; ++seed) pipeline_chaos(seed);
}

TEST_CASE("castor run --max-restarts rnn: a part's worker SIGKILLed after step 50 rejoins, the parts go back to the checkpoint, and the loss curve goes on from it") {
  bool killed = false;
  auto r = run_castor({"run", "rnn", "--workers", "3", "--steps", "400", "--log-every", "100", "--max-restarts", "2"},
                      std::chrono::seconds(240), [&](const std::string& out) {
                        if (!killed && contains(out, "checkpoint: step 50 saved in ")) killed = kill_rank(out, 2);
                      });
  INFO(r.output);
  REQUIRE(killed);
  CHECK(r.code == 0);
  CHECK(contains(r.output, "[launch] worker2 died (killed by signal 9): starting it again (restart 1 of 2 for worker2)"));
  CHECK(contains(r.output, "; waiting for the parts' workers to rejoin\n"));
  CHECK(contains(r.output, "rnn: the parts are back\n"));
  CHECK(contains(r.output, "rnn: training goes on from the checkpoint of step "));
  CHECK(count(r.output, "[run] 3 worker(s) of rnn") == 1);
  // The curve has every step once, and goes on from the checkpoint: a step
  // after it loses about what the steps before it did, where fresh weights
  // would start again at ln 16 = 2.77.
  auto at = r.output.find("curves: ");
  REQUIRE(at != std::string::npos);
  auto csv = r.output.substr(at + 8, r.output.find(" and ", at) - at - 8);
  std::ifstream in(csv);
  REQUIRE(in.good());
  std::string line;
  std::getline(in, line);  // the header
  std::vector<double> losses;
  while (std::getline(in, line)) {
    auto comma = line.find(',');
    CHECK(std::stoll(line.substr(0, comma)) == int64_t(losses.size()) + 1);
    losses.push_back(std::stod(line.substr(comma + 1)));
  }
  REQUIRE(losses.size() == 400);
  auto resumed_after = std::stoll(r.output.substr(r.output.find("from the checkpoint of step ") + 28));
  CAPTURE(resumed_after);
  REQUIRE(resumed_after >= 50);
  REQUIRE(resumed_after < 400);
  CHECK(losses[size_t(resumed_after)] < 2 * losses[size_t(resumed_after) - 1] + 0.01);
  CHECK(losses.back() < 0.02);
  // The job's own folder went with the job.
  auto saved = r.output.find("checkpoint: step 50 saved in ") + 29;
  CHECK_FALSE(fs::exists(r.output.substr(saved, r.output.find('\n', saved) - saved)));
  check_only_sigkills(r.output);
}
