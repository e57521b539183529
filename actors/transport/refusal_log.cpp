// R2 of Note [The door]: rate-limited refusal lines.
#include "actors/transport/refusal_log.hpp"

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

// R3: at most this many lines a second in all, whatever the hosts: a flood
// from many hosts (or one host's every hundredth) does not fill a disk.
constexpr int kLinesPerSecond = 20;

struct Counts {
  std::mutex mtx;
  std::map<std::string, int64_t> by_host;  // by "host kind"
  std::chrono::steady_clock::time_point second{};  // the second the lines below count in
  int lines = 0;
  int64_t unsaid = 0;  // refusals past R3's bound since the last line that said so
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
    if (now - counts.second >= std::chrono::seconds(1)) {
      counts.second = now;
      counts.lines = 0;
    }
    if (++counts.lines > kLinesPerSecond) {
      ++counts.unsaid;
      return;
    }
    std::swap(unsaid, counts.unsaid);
  }
  if (unsaid > 0)
    std::fprintf(stderr, "castor[%s]: %lld refusal line(s) not shown: more than %d a second\n", worker.c_str(),
                 (long long)unsaid, kLinesPerSecond);
  std::string count;
  if (n > 1)
    count = " (refusal " + std::to_string(n) + " of this kind " + (shared ? "from hosts past the first 1024)" : "from this host)");
  std::fprintf(stderr, "castor[%s]: %s%s\n", worker.c_str(), line.c_str(), count.c_str());
}

}  // namespace castor::detail
