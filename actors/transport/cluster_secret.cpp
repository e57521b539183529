// The user's cluster secret file, and fresh secrets.
#include "actors/transport/cluster_secret.hpp"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace castor::detail {
namespace {

std::string trimmed(const std::string& s) {
  auto first = s.find_first_not_of(" \t\r\n"), last = s.find_last_not_of(" \t\r\n");
  return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}

}  // namespace

std::string make_cluster_secret() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    std::random_device rd;
    for (auto& b : bytes) b = static_cast<unsigned char>(rd());
  }
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (auto b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::string user_secret_path() {
  if (const char* p = std::getenv("CASTOR_SECRET_FILE"); p && *p) return p;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.castor/secret";
}

std::string read_secret_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the secret file " + path);
  std::stringstream text;
  text << in.rdbuf();
  return trimmed(text.str());
}

namespace {

enum class Found { none, refused, secret };

// The user's secret file is used only while it is the user's alone: one
// another user owns (planted in a shared /tmp when HOME is unset) or may
// read is refused, and said, never used quietly. Checked on the open file.
Found read_private_secret(const std::string& path, std::string& secret) {
  // Not waited on if a FIFO (another user's plant is refused, not read); a
  // link is judged by the file it names.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0 && errno == ENOENT) return Found::none;
  struct stat st {};
  std::string why;
  if (fd < 0) {
    why = std::strerror(errno);
  } else if (::fstat(fd, &st) != 0) {
    why = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    why = "it is not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    why = "it belongs to user " + std::to_string(st.st_uid) + ", not to this one (" + std::to_string(::geteuid()) + ")";
  } else if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", unsigned(st.st_mode & 0777));
    why = std::string("other users may read or change it (mode ") + mode + "; chmod 600 it)";
  }
  std::string text;
  char buf[512];
  ssize_t n = 0;
  while (why.empty() && text.size() < 4096 && (n = ::read(fd, buf, sizeof buf)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) why = std::strerror(errno);
    else text.append(buf, size_t(n));
  }
  if (fd >= 0) ::close(fd);
  if (!why.empty()) {
    std::fprintf(stderr, "castor: not using the secret file %s: %s\n", path.c_str(), why.c_str());
    return Found::refused;
  }
  secret = trimmed(text);
  return secret.empty() ? Found::none : Found::secret;
}

}  // namespace

std::optional<std::string> user_secret(bool create) {
  auto path = user_secret_path();
  std::string secret;
  switch (read_private_secret(path, secret)) {
    case Found::secret: return secret;
    case Found::refused: return std::nullopt;
    case Found::none: break;
  }
  if (!create) return std::nullopt;
  auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) ::mkdir(path.substr(0, slash).c_str(), 0700);
  // O_EXCL: two launchers starting at once agree on the first one's secret.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) {
    auto fresh = make_cluster_secret() + "\n";
    bool ok = ::write(fd, fresh.data(), fresh.size()) == ssize_t(fresh.size());
    ::close(fd);
    if (!ok) return std::nullopt;
  }
  if (read_private_secret(path, secret) == Found::secret) return secret;
  return std::nullopt;
}

}  // namespace castor::detail
