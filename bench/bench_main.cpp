// castor-bench: castor's figures, side by side with PyTorch's in one run.
#include <cstdio>
#include <cstring>
#include <string>

#include "bench_suites.hpp"
#include "config/fork_server.hpp"

namespace {

const char* kUsage =
    "usage: castor-bench SUITE [--vs-pytorch] [--json] [--reps N]\n"
    "  SUITE: rpc | rref | autograd | train | pipeline | scale | sweep | recovery | all\n"
    "  --vs-pytorch  also run PyTorch's side (bench/pytorch_bench.py) and print ratios castor/pytorch\n"
    "  --json        print one JSON object {figure: {castor, pytorch, ratio}}\n"
    "  --reps N      multiply the repetitions per figure (default 1)\n"
    "  --plot FILE   sweep: draw latency and throughput against payload size (SVG)\n";

}  // namespace

int main(int argc, char** argv) {
  castor::config::serve_forks_if_asked(argc, argv);  // Note [Fork server]: BenchWorld's peers
  using namespace castor::bench;
  if (argc >= 2 && std::strcmp(argv[1], "_worker") == 0) return run_peer(argc, argv);
  if (argc >= 2 && std::strcmp(argv[1], "_start") == 0) return 0;  // process_start_ms: loaded, nothing else
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  Options opts;
  opts.self_path = argv[0];
  std::string suite = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--vs-pytorch") {
      opts.vs_pytorch = true;
    } else if (a == "--json") {
      opts.json = true;
    } else if (a == "--plot" && i + 1 < argc) {
      opts.plot = argv[++i];
    } else if (a == "--reps" && i + 1 < argc) {
      opts.reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "castor-bench: unknown option '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  std::vector<std::string> suites;
  if (suite == "all")
    suites = {"rpc", "rref", "autograd", "train", "pipeline", "scale", "sweep", "recovery"};
  else if (suite == "rpc" || suite == "rref" || suite == "autograd" || suite == "train" || suite == "pipeline" || suite == "scale" || suite == "sweep" ||
           suite == "recovery")
    suites = {suite};
  else {
    std::fprintf(stderr, "castor-bench: unknown suite '%s'\n%s", suite.c_str(), kUsage);
    return 2;
  }
  try {
    std::vector<Figure> figures;
    for (const auto& s : suites) {
      std::vector<Figure> part;
      if (s == "rpc") part = bench_rpc(opts);
      if (s == "rref") part = bench_rref(opts);
      if (s == "autograd") part = bench_autograd(opts);
      if (s == "train") part = bench_train(opts);
      if (s == "pipeline") part = bench_pipeline(opts);
      if (s == "scale") part = bench_scale(opts);
      if (s == "sweep") part = bench_sweep(opts);
      if (s == "recovery") part = bench_recovery(opts);
      figures.insert(figures.end(), part.begin(), part.end());
    }
    if (opts.vs_pytorch) {
      auto py = run_pytorch(suites, opts.reps);
      for (auto& f : figures)
        if (auto it = py.find(f.name); it != py.end()) f.pytorch = it->second;
    }
    report(figures, opts);
    if (!opts.plot.empty()) write_sweep_svg(figures, opts.plot);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "castor-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
