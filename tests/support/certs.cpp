#include "support/certs.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace castor::test {

namespace {

std::string run_cert_script(const std::string& script, const std::string& tag, const std::vector<std::string>& names) {
  auto dir = (std::filesystem::temp_directory_path() / ("castor-certs-" + std::to_string(::getpid()) + "-" + tag)).string();
  auto cmd = "'" + std::string(CASTOR_SOURCE_DIR) + "/" + script + "' '" + dir + "'";
  for (auto& n : names) cmd += " '" + n + "'";
  cmd += " >/dev/null";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("cannot make test certificates: " + cmd + " failed");
  return dir;
}

}  // namespace

std::string make_certs(const std::string& tag, const std::vector<std::string>& names) {
  return run_cert_script("scripts/make-certs.sh", tag, names);
}

std::string make_chained_certs(const std::string& tag, const std::vector<std::string>& names) {
  return run_cert_script("tests/support/make-chained-certs.sh", tag, names);
}

TlsOptions tls_files(const std::string& dir, const std::string& name) {
  return TlsOptions{dir + "/" + name + ".pem", dir + "/" + name + ".key", dir + "/ca.pem", ""};
}

ChildTls::ChildTls(const std::string& dir, bool bytes_on_socket) {
  ::setenv("CASTOR_TEST_TLS_DIR", dir.c_str(), 1);
  if (bytes_on_socket) ::setenv("CASTOR_TEST_BULK_SOCKET", "1", 1);
}

ChildTls::~ChildTls() {
  ::unsetenv("CASTOR_TEST_TLS_DIR");
  ::unsetenv("CASTOR_TEST_BULK_SOCKET");
}

}  // namespace castor::test
