// Test helpers: encode/decode through CAF's binary (de)serializer, as BASP does.
#pragma once

#include <vector>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "messages/value.hpp"

namespace castor::test {

template <class T>
std::vector<char> encode(T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  auto err = sink(x);
  if (err) throw std::runtime_error("encode failed");
  return buf;
}

template <class T>
caf::error decode(const std::vector<char>& buf, T& out) {
  caf::binary_deserializer source{nullptr, buf};
  return source(out);
}

inline Value roundtrip(Value v) {
  Value out;
  auto err = decode(encode(std::move(v)), out);
  if (err) throw std::runtime_error("decode failed");
  return out;
}

}  // namespace castor::test
