// Where the cluster secret of the door (Note [The door]) comes from when a
// launcher or castor inspect is not given one: like Erlang's cookie, a file
// of the user's own, made once with a fresh random secret.
#pragma once

#include <optional>
#include <string>

namespace castor::detail {

/// A fresh random cluster secret (64 hex digits).
std::string make_cluster_secret();

/// The user's secret file: $CASTOR_SECRET_FILE, else ~/.castor/secret.
std::string user_secret_path();

/// The user's secret; with `create`, makes the file (mode 0600, in a 0700
/// folder) when there is none. Nothing when it cannot be read or made, and
/// nothing (said on stderr) when another user owns the file or may read or
/// change it.
std::optional<std::string> user_secret(bool create);

/// A secret file's contents without surrounding whitespace; throws
/// std::runtime_error naming the file when it cannot be read.
std::string read_secret_file(const std::string& path);

}  // namespace castor::detail
