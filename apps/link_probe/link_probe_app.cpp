// link-probe: rank 0 probes every other worker, each from its own thread,
// with one RPC, one RRef (remote + to_here) and one distributed
// forward/backward per round, for a fixed time, and prints one line per
// round that a script can read. tests/netns cuts links between hosts while
// it runs: a short cut only delays rounds, a long one fails the rounds of
// the cut-off peer with an error naming it, and the other peers go on.
//
// Lines (rank 0 only; t = wall clock, ms since the epoch):
//   probe: ready peers=worker1,worker2 t=...
//   probe: peer=worker1 round=7 ok ms=3 t=...
//   probe: peer=worker2 round=9 op=rpc failed kind=unreachable after_ms=7012 t=... error=<what()>
//   probe: peer=worker1 round=9 op=rref wrong value          (a result that is not the expected one)
//   probe: summary peer=worker1 rounds=95 ok=95 failed=0 wrong=0 max_ms=2411
// Exit code of rank 0's app: 0 when every round succeeded, 4 when a call
// failed, 5 when a result was wrong (the worker's exit code is 1 instead when
// its graceful shutdown fails, e.g. because a peer died).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "apps/common/app.hpp"
#include "engine/context.hpp"
#include "rref/rref.hpp"

// t + k, computed on the callee (the RPC and RRef probes).
CASTOR_FUNCTION(probe_plus, [](at::Tensor t, int64_t k) { return t + k; });

// t * s on the callee: differentiable, so a backward pass goes back there.
CASTOR_FUNCTION(probe_scale, [](at::Tensor t, double s) { return t * s; });

namespace {

using Clock = std::chrono::steady_clock;

std::mutex print_mutex;

void say(const std::string& line) {
  std::lock_guard<std::mutex> lock(print_mutex);
  std::printf("probe: %s\n", line.c_str());
  std::fflush(stdout);
}

long long wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

long long ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

const char* kind_name(castor::ErrorKind k) {
  switch (k) {
    case castor::ErrorKind::Remote: return "remote";
    case castor::ErrorKind::Lookup: return "lookup";
    case castor::ErrorKind::Type: return "type";
    case castor::ErrorKind::Timeout: return "timeout";
    case castor::ErrorKind::Unreachable: return "unreachable";
    case castor::ErrorKind::Shutdown: return "shutdown";
    case castor::ErrorKind::Internal: return "internal";
    case castor::ErrorKind::Autograd: return "autograd";
    case castor::ErrorKind::OwnerDied: return "owner_died";
  }
  return "unknown";
}

struct PeerStats {
  std::string name;
  int64_t rank = 0;
  int64_t rounds = 0, ok = 0, failed = 0, wrong = 0;
  long long max_ms = 0;
};

enum class Outcome { ok, failed, wrong };

// One round against `peer`: RPC, RRef, distributed autograd, each checked.
Outcome probe_round(castor::Worker& w, PeerStats& peer, int64_t round, castor::Timeout timeout) {
  auto t0 = Clock::now();
  const char* op = "rpc";
  try {
    auto x = at::full({8}, double(round));
    auto sum = w.rpc_sync(peer.name, probe_plus, x, peer.rank, timeout);
    if (!at::equal(sum, x + peer.rank)) {
      say("peer=" + peer.name + " round=" + std::to_string(round) + " op=rpc wrong value");
      return Outcome::wrong;
    }

    op = "rref";
    auto rref = w.remote(peer.name, probe_plus, x, 1, timeout);
    auto held = rref.to_here(timeout);
    if (!at::equal(held, x + 1)) {
      say("peer=" + peer.name + " round=" + std::to_string(round) + " op=rref wrong value");
      return Outcome::wrong;
    }

    op = "autograd";
    {
      castor::autograd::Context ctx(w);
      auto leaf = at::full({4}, double(round)).set_requires_grad(true);
      auto y = w.rpc_sync(peer.name, probe_scale, leaf, 3.0, timeout);
      ctx.backward({y.sum()}, false, timeout);
      auto grads = ctx.gradients();
      auto it = grads.find(leaf);
      if (it == grads.end() || !at::equal(it->second, at::full({4}, 3.0))) {
        say("peer=" + peer.name + " round=" + std::to_string(round) + " op=autograd wrong gradient");
        return Outcome::wrong;
      }
    }
  } catch (const castor::RpcError& e) {
    say("peer=" + peer.name + " round=" + std::to_string(round) + " op=" + op + " failed kind=" + kind_name(e.kind()) +
        " after_ms=" + std::to_string(ms_since(t0)) + " t=" + std::to_string(wall_ms()) + " error=" + e.what());
    return Outcome::failed;
  }
  auto ms = ms_since(t0);
  peer.max_ms = std::max(peer.max_ms, ms);
  say("peer=" + peer.name + " round=" + std::to_string(round) + " ok ms=" + std::to_string(ms) +
      " t=" + std::to_string(wall_ms()));
  return Outcome::ok;
}

void count(PeerStats& p, Outcome o) {
  ++p.rounds;
  if (o == Outcome::ok) ++p.ok;
  if (o == Outcome::failed) ++p.failed;
  if (o == Outcome::wrong) ++p.wrong;
}

// Note [Flags], F1.
void declare_flags(castor::apps::po::options_description& flags) {
  namespace po = castor::apps::po;
  flags.add_options()
      ("duration-ms", po::value<int64_t>()->default_value(10000)->value_name("N"),
       "probe for N ms after the first round")
      ("interval-ms", po::value<int64_t>()->default_value(100)->value_name("N"), "pause between one peer's rounds")
      ("call-timeout-ms", po::value<int64_t>()->default_value(30000)->value_name("N"),
       "limit of each call and backward pass");
}

// F5 of Note [Flags].
void check_flags(const castor::apps::Flags& args) {
  if (args.get<int64_t>("duration-ms") < 0 || args.get<int64_t>("interval-ms") < 0 ||
      args.get<int64_t>("call-timeout-ms") <= 0)
    throw std::invalid_argument("--duration-ms and --interval-ms must be >= 0, --call-timeout-ms > 0");
}

// Its flags were checked by parse_app_flags (F5), as every app's.
int run_probe(castor::Worker& w, const castor::apps::Flags& args) {
  if (w.rank() != 0) return 0;  // the others serve until rank 0 is done
  auto duration = std::chrono::milliseconds(args.get<int64_t>("duration-ms"));
  auto interval = std::chrono::milliseconds(args.get<int64_t>("interval-ms"));
  castor::Timeout timeout{std::chrono::milliseconds(args.get<int64_t>("call-timeout-ms"))};

  std::vector<PeerStats> peers;
  std::string names;
  for (const auto& info : w.get_worker_infos()) {
    if (info.id == w.rank()) continue;
    peers.push_back(PeerStats{info.name, info.id});
    names += (names.empty() ? "" : ",") + info.name;
  }
  // Round 1 with every peer before "ready": the links work before anyone cuts them.
  for (auto& p : peers) count(p, probe_round(w, p, 1, timeout));
  bool all_ok = std::all_of(peers.begin(), peers.end(), [](const PeerStats& p) { return p.ok == 1; });
  if (all_ok) say("ready peers=" + names + " t=" + std::to_string(wall_ms()));

  auto end = Clock::now() + duration;
  std::vector<std::thread> threads;
  if (all_ok)
    for (auto& p : peers)
      threads.emplace_back([&w, &p, end, interval, timeout] {
        for (int64_t round = 2; Clock::now() < end; ++round) {
          count(p, probe_round(w, p, round, timeout));
          std::this_thread::sleep_for(interval);
        }
      });
  for (auto& t : threads) t.join();

  int rc = 0;
  for (const auto& p : peers) {
    say("summary peer=" + p.name + " rounds=" + std::to_string(p.rounds) + " ok=" + std::to_string(p.ok) +
        " failed=" + std::to_string(p.failed) + " wrong=" + std::to_string(p.wrong) +
        " max_ms=" + std::to_string(p.max_ms));
    if (p.wrong > 0) rc = 5;
    if (p.failed > 0 && rc == 0) rc = 4;
  }
  return rc;
}

castor::apps::AppRegistrar registrar{castor::apps::App{
    "link-probe",
    "rank 0 probes every other worker (RPC, RRef, distributed autograd) for a fixed time, one line per round", 3,
    declare_flags, run_probe, check_flags}};

}  // namespace
