// Test certificates: a CA and one certificate per worker, made by
// scripts/make-certs.sh (as a user would make them).
#pragma once

#include <string>
#include <vector>

#include "actors/api/worker_options.hpp"

namespace castor::test {

/// A fresh folder under the temporary directory, named after `tag` and this
/// process, holding ca.pem and NAME.pem / NAME.key for each of `names`.
/// Throws std::runtime_error (failing the test) when the script fails.
std::string make_certs(const std::string& tag, const std::vector<std::string>& names);

/// The same, from a root CA through an intermediate one
/// (support/make-chained-certs.sh): ca.pem holds the root alone, NAME.pem
/// the certificate and the intermediate's, NAME-alone.pem the certificate
/// alone.
std::string make_chained_certs(const std::string& tag, const std::vector<std::string>& names);

/// The TLS files make_certs wrote for `name`.
TlsOptions tls_files(const std::string& dir, const std::string& name);

/// While it lives, child workers started by the test (castor_test_worker)
/// run TLS with the files in `dir` and, when `bytes_on_socket`, send their
/// large tensors through the bulk links' sessions instead of B7's copy
/// (test_worker_main.cpp reads CASTOR_TEST_TLS_DIR and
/// CASTOR_TEST_BULK_SOCKET). Unsets both when its scope ends, exceptions
/// included, so that no later test runs TLS by accident.
class ChildTls {
 public:
  ChildTls(const std::string& dir, bool bytes_on_socket);
  ~ChildTls();
  ChildTls(const ChildTls&) = delete;
  ChildTls& operator=(const ChildTls&) = delete;
};

}  // namespace castor::test
