// Bounds-checked reading of lengths: CAF 0.17 resizes strings and byte vectors
// to whatever length the wire claims before checking it, so castor's own
// inspect() functions read lengths through these helpers instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <caf/binary_deserializer.hpp>
#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>

namespace castor::wire {

/// Bytes left in the input, or "unknown" (max) for deserializers that do not
/// say (CAF's BASP uses binary_deserializer, which does).
inline size_t remaining_bytes(caf::deserializer& f) {
  if (auto* bin = dynamic_cast<caf::binary_deserializer*>(&f)) return bin->remaining();
  return std::numeric_limits<size_t>::max();
}

/// Reads a sequence length and refuses one that claims more than `min_item_bytes`
/// per item beyond what the input still holds.
inline caf::error read_length(caf::deserializer& f, size_t& n, size_t min_item_bytes = 1) {
  if (auto err = f.begin_sequence(n)) return err;
  auto left = remaining_bytes(f);
  if (min_item_bytes > 0 && n > left / min_item_bytes) return caf::sec::end_of_stream;
  return caf::none;
}

/// A string whose length is checked before any allocation. The wire format is
/// CAF's own (length, bytes), so both sides stay interoperable with CAF strings.
caf::error write_string(caf::serializer& f, std::string& s);
caf::error read_string(caf::deserializer& f, std::string& s);

/// Wraps a string member for use in a generic `inspect`:
/// `f(x.id, wire::checked(x.name))`.
struct CheckedString {
  std::string& ref;
};
inline CheckedString checked(std::string& s) { return {s}; }
inline caf::error inspect(caf::serializer& f, CheckedString& x) { return write_string(f, x.ref); }
inline caf::error inspect(caf::deserializer& f, CheckedString& x) { return read_string(f, x.ref); }
template <class Inspector>
typename std::enable_if<!std::is_base_of<caf::serializer, Inspector>::value &&
                            !std::is_base_of<caf::deserializer, Inspector>::value,
                        typename Inspector::result_type>::type
inspect(Inspector& f, CheckedString& x) {
  return f(x.ref);
}

}  // namespace castor::wire

namespace castor::wire {

/// Wraps a vector member so that decoding checks its length first:
/// `f(wire::checked(x.args))`. Every element takes at least one byte.
template <class T>
struct CheckedVector {
  std::vector<T>& ref;
};
template <class T>
CheckedVector<T> checked(std::vector<T>& xs) {
  return {xs};
}
template <class T>
caf::error inspect(caf::serializer& f, CheckedVector<T>& x) {
  size_t n = x.ref.size();
  if (auto err = f.begin_sequence(n)) return err;
  for (auto& item : x.ref)
    if (auto err = f(item)) return err;
  return f.end_sequence();
}
template <class T>
caf::error inspect(caf::deserializer& f, CheckedVector<T>& x) {
  size_t n = 0;
  if (auto err = read_length(f, n)) return err;
  x.ref.clear();
  x.ref.resize(n);
  for (auto& item : x.ref) {
    if constexpr (std::is_same<T, std::string>::value) {
      if (auto err = read_string(f, item)) return err;
    } else {
      if (auto err = f(item)) return err;
    }
  }
  return f.end_sequence();
}
template <class Inspector, class T>
typename std::enable_if<!std::is_base_of<caf::serializer, Inspector>::value &&
                            !std::is_base_of<caf::deserializer, Inspector>::value,
                        typename Inspector::result_type>::type
inspect(Inspector& f, CheckedVector<T>& x) {
  return f(x.ref);
}

}  // namespace castor::wire
