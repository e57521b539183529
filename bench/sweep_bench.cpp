// castor-bench sweep: echo latency and throughput against payload size, and
// the picture of both (castor beside PyTorch) as SVG.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <ATen/ATen.h>

#include "bench_suites.hpp"

namespace castor::bench {

const std::vector<int64_t>& sweep_sizes_kib() {
  static const std::vector<int64_t> sizes{1, 16, 256, 1024, 4096, 16384, 65536};
  return sizes;
}

std::vector<Figure> bench_sweep(const Options& opts) {
  std::vector<Figure> out;
  BenchWorld world(opts, 2);
  auto& w = world.self();
  for (auto kib : sweep_sizes_kib()) {
    auto x = at::rand({kib * 1024 / 4});
    int n = int(std::clamp<int64_t>(200000 / kib, 7, 1000)) * opts.reps;
    auto us = median_us(n, [&] { w.rpc_sync<at::Tensor>("worker1", "bench_ident", x); }, 3);
    out.push_back({"sweep_echo_" + std::to_string(kib) + "KiB_us", us});
    out.push_back({"sweep_echo_" + std::to_string(kib) + "KiB_MiB_per_s", 2.0 * double(kib) / 1024 / (us / 1e6),
                   Better::higher});
  }
  return out;
}

namespace {

// One log-log panel: x = payload KiB, y = the figure, castor and PyTorch.
void panel(std::ostringstream& svg, double left, const std::string& title, const std::string& unit,
           const std::vector<double>& castor, const std::vector<double>& pytorch) {
  const double w = 420, h = 300, top = 50;
  const auto& xs = sweep_sizes_kib();
  double lo = 1e300, hi = 0;
  for (auto* series : {&castor, &pytorch})
    for (double v : *series)
      if (v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
  if (hi <= 0) return;
  double ylo = std::floor(std::log10(lo)), yhi = std::ceil(std::log10(hi));
  if (yhi <= ylo) yhi = ylo + 1;
  auto X = [&](size_t i) { return left + w * double(i) / double(xs.size() - 1); };
  auto Y = [&](double v) { return top + h - h * (std::log10(v) - ylo) / (yhi - ylo); };
  svg << "<text x='" << left + w / 2 << "' y='30' text-anchor='middle' font-size='15'>" << title << "</text>\n";
  svg << "<rect x='" << left << "' y='" << top << "' width='" << w << "' height='" << h
      << "' fill='none' stroke='#999'/>\n";
  for (double e = ylo; e <= yhi; ++e) {
    svg << "<line x1='" << left << "' x2='" << left + w << "' y1='" << Y(std::pow(10, e)) << "' y2='"
        << Y(std::pow(10, e)) << "' stroke='#eee'/>\n";
    svg << "<text x='" << left - 6 << "' y='" << Y(std::pow(10, e)) + 4 << "' text-anchor='end' font-size='11'>1e"
        << int(e) << "</text>\n";
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    auto label = xs[i] >= 1024 ? std::to_string(xs[i] / 1024) + " MiB" : std::to_string(xs[i]) + " KiB";
    svg << "<text x='" << X(i) << "' y='" << top + h + 18 << "' text-anchor='middle' font-size='11'>" << label
        << "</text>\n";
  }
  svg << "<text x='" << left - 45 << "' y='" << top + h / 2 << "' font-size='12' transform='rotate(-90 "
      << left - 45 << ' ' << top + h / 2 << ")' text-anchor='middle'>" << unit << "</text>\n";
  auto line = [&](const std::vector<double>& ys, const char* colour) {
    std::string pts;
    for (size_t i = 0; i < ys.size() && i < xs.size(); ++i)
      if (ys[i] > 0) pts += std::to_string(X(i)) + "," + std::to_string(Y(ys[i])) + " ";
    svg << "<polyline points='" << pts << "' fill='none' stroke='" << colour << "' stroke-width='2'/>\n";
  };
  line(castor, "#1f77b4");
  line(pytorch, "#d62728");
}

}  // namespace

void write_sweep_svg(const std::vector<Figure>& figures, const std::string& path) {
  std::vector<double> lat_c, lat_p, thr_c, thr_p;
  for (auto kib : sweep_sizes_kib()) {
    auto base = "sweep_echo_" + std::to_string(kib) + "KiB_";
    for (auto& f : figures) {
      if (f.name == base + "us") lat_c.push_back(f.castor), lat_p.push_back(f.pytorch.value_or(0));
      if (f.name == base + "MiB_per_s") thr_c.push_back(f.castor), thr_p.push_back(f.pytorch.value_or(0));
    }
  }
  if (lat_c.empty()) return;
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='1040' height='420' font-family='sans-serif'>\n"
      << "<rect width='100%' height='100%' fill='white'/>\n";
  panel(svg, 70, "echo round trip (lower is better)", "µs", lat_c, lat_p);
  panel(svg, 590, "echo throughput, both ways (higher is better)", "MiB/s", thr_c, thr_p);
  svg << "<text x='70' y='400' font-size='13' fill='#1f77b4'>castor</text>\n"
      << "<text x='140' y='400' font-size='13' fill='#d62728'>PyTorch 1.13 (TensorPipe)</text>\n</svg>\n";
  std::ofstream(path) << svg.str();
}

}  // namespace castor::bench
