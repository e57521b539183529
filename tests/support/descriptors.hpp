// Tests that run a process out of file descriptors (a launcher that cannot
// make a worker's pipe, a door that cannot accept).
#pragma once

#include <dirent.h>
#include <sys/resource.h>

#include <cstdlib>
#include <vector>

namespace castor::test {

/// The lowest limit on descriptor numbers (RLIMIT_NOFILE) that leaves
/// exactly `free` of them to open: new descriptors take the lowest free
/// numbers. 0 when /proc/self/fd cannot be read.
inline rlim_t descriptor_limit_leaving(size_t free) {
  std::vector<int> open;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return 0;
  while (auto* entry = ::readdir(dir)) {
    int fd = std::atoi(entry->d_name);
    if (entry->d_name[0] != '.' && fd != ::dirfd(dir)) open.push_back(fd);
  }
  ::closedir(dir);
  for (rlim_t limit = 1;; ++limit) {
    size_t used = 0;
    for (int fd : open) used += rlim_t(fd) < limit ? 1 : 0;
    if (limit - used == free) return limit;
  }
}

/// While it lives, this process may open only `free` more descriptors
/// (descriptor_limit_leaving); the limit it found comes back when it ends,
/// a failed check included. ok() says whether the limit could be set.
class DescriptorsLeft {
 public:
  explicit DescriptorsLeft(size_t free) {
    if (::getrlimit(RLIMIT_NOFILE, &before_) != 0) return;
    rlimit low = before_;
    low.rlim_cur = descriptor_limit_leaving(free);
    set_ = low.rlim_cur > 0 && ::setrlimit(RLIMIT_NOFILE, &low) == 0;
  }
  ~DescriptorsLeft() { restore(); }
  DescriptorsLeft(const DescriptorsLeft&) = delete;
  DescriptorsLeft& operator=(const DescriptorsLeft&) = delete;
  bool ok() const { return set_; }
  void restore() {
    if (set_) ::setrlimit(RLIMIT_NOFILE, &before_);
    set_ = false;
  }

 private:
  rlimit before_{};
  bool set_ = false;
};

}  // namespace castor::test
