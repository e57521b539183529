// R2 of Note [The door]: rate-limited refusal lines.
#include "actors/transport/refusal_log.hpp"

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>

#include "actors/transport/sockets.hpp"

namespace castor::detail {
namespace {

constexpr size_t kMaxCountedHosts = 1024;
constexpr const char* kOtherHosts = "(other hosts)";

struct Counts {
  std::mutex mtx;
  std::map<std::string, int64_t> by_host;  // by "host kind"
};

}  // namespace

void log_refusal(const std::string& worker, const std::string& peer, const std::string& kind, const std::string& line) {
  static Counts counts;
  auto host = net::host_part(peer);
  int64_t n;
  bool shared = false;
  {
    std::lock_guard<std::mutex> lock(counts.mtx);
    auto key = host + " " + kind;
    if (counts.by_host.size() >= kMaxCountedHosts && !counts.by_host.count(key)) {
      key = std::string(kOtherHosts) + " " + kind;
      shared = true;
    }
    n = ++counts.by_host[key];
  }
  if (n > 3 && n % 100 != 0) return;
  std::string count;
  if (n > 1)
    count = " (refusal " + std::to_string(n) + " of this kind " + (shared ? "from hosts past the first 1024)" : "from this host)");
  std::fprintf(stderr, "castor[%s]: %s%s\n", worker.c_str(), line.c_str(), count.c_str());
}

}  // namespace castor::detail
