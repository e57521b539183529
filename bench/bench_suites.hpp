// The suites of castor-bench; each returns castor's figures.
#pragma once

#include <vector>

#include "bench_util.hpp"

namespace castor::bench {

/// The machine's limits in this run (bench/floors.cpp); part of the rpc suite.
std::vector<Figure> bench_floors(const Options& opts);
std::vector<Figure> bench_rpc(const Options& opts);
std::vector<Figure> bench_rref(const Options& opts);
std::vector<Figure> bench_autograd(const Options& opts);
std::vector<Figure> bench_train(const Options& opts);
std::vector<Figure> bench_pipeline(const Options& opts);
std::vector<Figure> bench_scale(const Options& opts);
std::vector<Figure> bench_sweep(const Options& opts);
std::vector<Figure> bench_recovery(const Options& opts);

/// The sweep's picture: latency and throughput against payload size.
void write_sweep_svg(const std::vector<Figure>& figures, const std::string& path);

}  // namespace castor::bench
