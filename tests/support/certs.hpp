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

/// The TLS files make_certs wrote for `name`.
TlsOptions tls_files(const std::string& dir, const std::string& name);

}  // namespace castor::test
