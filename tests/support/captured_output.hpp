// Tests that read what this process writes to its stdout or stderr: the
// launcher's prefixed lines of its children, a worker's refusal and
// malformed-message lines. fd 1 or 2 goes to a file while a CapturedOutput
// lives, and comes back when it ends, however the test leaves (a failed
// REQUIRE throws).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>

namespace castor::test {

class CapturedOutput {
 public:
  /// `fd`: 1 (stdout) or 2 (stderr).
  explicit CapturedOutput(int fd) : fd_(fd) {
    char name[] = "/tmp/castor-output-XXXXXX";
    int file = ::mkstemp(name);
    path_ = name;
    flush();
    // Close-on-exec: a child started while we capture (a launched worker)
    // must not keep the runner's own pipe open after the test.
    saved_ = ::fcntl(fd_, F_DUPFD_CLOEXEC, 0);
    if (file >= 0) {
      ::dup2(file, fd_);
      ::close(file);
    }
  }
  ~CapturedOutput() {
    flush();
    if (saved_ >= 0) {
      ::dup2(saved_, fd_);
      ::close(saved_);
    }
    std::remove(path_.c_str());
  }
  CapturedOutput(const CapturedOutput&) = delete;
  CapturedOutput& operator=(const CapturedOutput&) = delete;

  /// What was written so far.
  std::string text() const {
    flush();
    std::ifstream in(path_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  /// Waits up to `limit` for `part` to be written (another thread may write it).
  bool wait_for(const std::string& part, std::chrono::milliseconds limit = std::chrono::seconds(10)) const {
    auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (text().find(part) != std::string::npos) return true;
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

 private:
  void flush() const { std::fflush(fd_ == 1 ? stdout : stderr); }

  int fd_;
  int saved_ = -1;
  std::string path_;
};

/// What `run` wrote to `fd` (1 or 2); the descriptor comes back even when
/// `run` throws.
inline std::string output_of(int fd, const std::function<void()>& run) {
  CapturedOutput captured(fd);
  run();
  return captured.text();
}

}  // namespace castor::test
