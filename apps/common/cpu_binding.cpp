#include "apps/common/cpu_binding.hpp"

#include <dirent.h>
#include <sched.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <vector>

namespace castor::apps {
namespace {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// Sets the mask of every thread listed in /proc/self/task; false with `why`
// on a refusal other than a thread that ended meanwhile (ESRCH).
bool bind_listed_threads(const cpu_set_t& set, std::string& why) {
  DIR* dir = opendir("/proc/self/task");
  if (!dir) {
    why = std::string("cannot list this process's threads: ") + std::strerror(errno);
    return false;
  }
  bool bound = true;
  while (auto* entry = readdir(dir)) {
    pid_t tid = pid_t(std::atoi(entry->d_name));
    if (tid <= 0 || sched_setaffinity(tid, sizeof set, &set) == 0 || errno == ESRCH) continue;
    why = "the kernel refused to bind thread " + std::to_string(tid) + ": " + std::strerror(errno);
    bound = false;
    break;
  }
  closedir(dir);
  return bound;
}

}  // namespace

std::string host_identity() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

bool bind_process_to_cpu_slot(int slot, std::string& why) {
  // Once bound, the process may run on one CPU only: what it was bound to
  // is remembered rather than read back.
  static std::mutex mtx;
  static int bound_slot = -1, bound_cpu = -1;
  std::lock_guard<std::mutex> lock(mtx);
  if (bound_slot >= 0) {
    if (slot == bound_slot) return true;
    why = "this process is bound to CPU " + std::to_string(bound_cpu) + " (slot " + std::to_string(bound_slot) +
          ") already";
    return false;
  }
  auto cpus = allowed_cpus();
  if (cpus.size() < 2 || slot < 0 || size_t(slot) >= cpus.size()) {
    why = "this process may run on " + std::to_string(cpus.size()) + " CPU(s), too few to give it CPU slot " +
          std::to_string(slot) + " of its own";
    return false;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpus[size_t(slot)], &set);
  // A thread started while the list is read may copy the mask of a thread
  // not bound yet: a second pass binds it (new threads from then on start
  // from bound ones).
  for (int pass = 0; pass < 2; ++pass)
    if (!bind_listed_threads(set, why)) return false;
  bound_slot = slot;
  bound_cpu = cpus[size_t(slot)];
  return true;
}

}  // namespace castor::apps
