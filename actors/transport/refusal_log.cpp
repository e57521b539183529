// R2 of Note [The door]: rate-limited refusal lines.
#include "actors/transport/refusal_log.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <utility>

#include "actors/transport/sockets.hpp"

namespace castor::detail {
namespace {

constexpr size_t kMaxCountedHosts = 1024;
constexpr const char* kOtherHosts = "(other hosts)";

// R3: whatever the hosts, lines leave through a bucket of kBurstLines that
// refills at kLinesPerSecond: a burst of trouble is said whole, and a flood
// from many hosts (or one host's every hundredth) writes a line a second,
// not a disk full.
constexpr double kBurstLines = 200;
constexpr double kLinesPerSecond = 1;

struct Counts {
  std::mutex mtx;
  std::map<std::string, int64_t> by_host;  // by "host kind"
  double tokens = kBurstLines;
  std::chrono::steady_clock::time_point filled = std::chrono::steady_clock::now();
  int64_t unsaid = 0;  // lines past R3's bound since the last line that said so
};

}  // namespace

void log_refusal(const std::string& worker, const std::string& peer, const std::string& kind, const std::string& line) {
  static Counts counts;
  auto host = net::host_part(peer);
  int64_t n, unsaid = 0;
  bool shared = false;
  {
    std::lock_guard<std::mutex> lock(counts.mtx);
    auto key = host + " " + kind;
    if (counts.by_host.size() >= kMaxCountedHosts && !counts.by_host.count(key)) {
      key = std::string(kOtherHosts) + " " + kind;
      shared = true;
    }
    n = ++counts.by_host[key];
    if (n > 3 && n % 100 != 0) return;
    auto now = std::chrono::steady_clock::now();  // R3
    counts.tokens = std::min(kBurstLines, counts.tokens + std::chrono::duration<double>(now - counts.filled).count() *
                                                              kLinesPerSecond);
    counts.filled = now;
    if (counts.tokens < 1) {
      ++counts.unsaid;
      return;
    }
    counts.tokens -= 1;
    std::swap(unsaid, counts.unsaid);
  }
  if (unsaid > 0)
    std::fprintf(stderr, "castor[%s]: %lld refusal line(s) not shown: past %g at once, a line a second\n",
                 worker.c_str(), (long long)unsaid, kBurstLines);
  std::string count;
  if (n > 1)
    count = " (refusal " + std::to_string(n) + " of this kind " + (shared ? "from hosts past the first 1024)" : "from this host)");
  std::fprintf(stderr, "castor[%s]: %s%s\n", worker.c_str(), line.c_str(), count.c_str());
}

}  // namespace castor::detail
