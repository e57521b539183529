// The user's cluster secret file, and fresh secrets.
#include "actors/transport/cluster_secret.hpp"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace castor::detail {

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
  auto s = text.str();
  auto first = s.find_first_not_of(" \t\r\n"), last = s.find_last_not_of(" \t\r\n");
  return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}

std::optional<std::string> user_secret(bool create) {
  auto path = user_secret_path();
  try {
    auto s = read_secret_file(path);
    if (!s.empty()) return s;
  } catch (const std::exception&) {
  }
  if (!create) return std::nullopt;
  auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) ::mkdir(path.substr(0, slash).c_str(), 0700);
  // O_EXCL: two launchers starting at once agree on the first one's secret.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) {
    auto secret = make_cluster_secret() + "\n";
    bool ok = ::write(fd, secret.data(), secret.size()) == ssize_t(secret.size());
    ::close(fd);
    if (!ok) return std::nullopt;
  }
  try {
    auto s = read_secret_file(path);
    if (!s.empty()) return s;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace castor::detail
