// What tests ask of an error: which exception a call threw, and its message.
#pragma once

#include <exception>
#include <string>

#include "actors/api/errors.hpp"

namespace castor::test {

/// The message of the `E` that `f` throws. "NO EXCEPTION" if it throws
/// none, and "WRONG EXCEPTION TYPE: <message>" if it throws another
/// std::exception, so that a CHECK on the message fails naming what happened.
template <class E = castor::RpcError, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG EXCEPTION TYPE: ") + e.what();
  }
  return "NO EXCEPTION";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace castor::test
