// Bounds-checked reading of lengths: CAF 0.17 resizes byte vectors to whatever
// length the wire claims before checking it, so castor's own inspect()
// functions read lengths through these helpers instead; and the receiving
// side of hostile input (Note [Hostile input]).
#pragma once

// Note [Hostile input]
// ~~~~~~~~~~~~~~~~~~~~
// Every byte a worker decodes comes from a peer that may be broken, of
// another version, or hostile. What castor guarantees about it:
//  H1. Decoding never trusts the wire: every length is checked against the
//      bytes left before anything is allocated (read_length, read_string;
//      CAF 0.17 itself resizes a std::vector<char> to the claimed length, up
//      to 4 GiB, so castor never decodes a byte vector through CAF), Value
//      nesting is capped (64), tensor shapes are checked for overflow and
//      against the element bytes, dtype, flag, enum and bool bytes are
//      validated. Whatever decodes re-encodes to bytes that decode to the
//      same value.
//  H2. The message structs that travel alone (CallRequest, CallReply,
//      TensorChunk, RRefControl, BackwardGrad, BackwardDone, ContextControl)
//      do not fail their CAF message when their content is malformed:
//      decoding records why in the struct's `malformed` field (receiver side
//      only, never sent), skips the rest of the payload (they are the last
//      element of their message), and the message reaches the worker actor,
//      which logs "castor[<me>]: dropped a malformed <type> from worker
//      <peer>: <why>" and drops it (actors/transport/malformed.cpp). A request whose id
//      was readable is answered with an error and a reply whose id was
//      readable fails its call, so neither side waits for a timeout.
//  H3. A well-formed message of a type or shape the worker does not handle
//      reaches its default handler: logged naming the peer and dropped (a
//      request is answered with CAF's unexpected_message error, an
//      asynchronous message with nothing: answering it with an error hung
//      the worker's graceful shutdown).
//  H4. A dropped counted message (calls, replies, autograd messages) still
//      counts as received, as a well-formed one does, so termination
//      detection (Note [Graceful shutdown]) stays balanced for peers.
//  H5. What CAF drops before castor sees it cannot be attributed: BASP
//      header and framing errors, unknown type names, malformed elements
//      that are CAF's own types (atoms, strings, actor handles) or not the
//      last element of a message. CAF reports those only through its own
//      logger (off by default); a request dropped there is not answered and
//      its caller times out. CAF's own decoders also bound nothing by the
//      input for the type-erased message itself (e.g. nested caf::message
//      values recurse once per few bytes); castor cannot change that.
//  H6. tests/fuzz/fuzz_messages.cpp (libFuzzer with ASan and UBSan, in the
//      test suite for 60 s; scripts/fuzz.sh for a million inputs) decodes
//      every struct, and whole caf::messages as BASP does, from arbitrary
//      bytes; each bug it found has a unit test in tests/unit.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
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

/// A decoding error that says why (shown by describe()).
inline caf::error refuse(std::string why) { return caf::make_error(caf::sec::invalid_argument, std::move(why)); }

/// Readable text of a decoding error: its reason, or "truncated".
std::string describe(const caf::error& err);

/// Reads a sequence length and refuses one that claims more than `min_item_bytes`
/// per item beyond what the input still holds.
inline caf::error read_length(caf::deserializer& f, size_t& n, size_t min_item_bytes = 1) {
  if (auto err = f.begin_sequence(n)) return err;
  auto left = remaining_bytes(f);
  if (min_item_bytes > 0 && n > left / min_item_bytes)
    return caf::make_error(caf::sec::end_of_stream, "a length of " + std::to_string(n) + " with only " +
                                                        std::to_string(left) + " bytes left");
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

namespace castor::wire {

/// True for message structs with a receiver-side `malformed` field (H2).
template <class T, class = void>
struct has_malformed_mark : std::false_type {};
template <class T>
struct has_malformed_mark<T, std::void_t<decltype(std::declval<T&>().malformed)>>
    : std::is_same<decltype(std::declval<T&>().malformed), std::string> {};

/// Decodes with `read()`. When that fails inside a whole payload (a
/// binary_deserializer, as BASP uses), records why in `malformed`, skips the
/// rest and succeeds, so that the worker actor can name the sender (H2).
/// The struct must be the last element of its message.
template <class Read>
caf::error decode_or_mark(caf::deserializer& f, std::string& malformed, Read&& read) {
  malformed.clear();
  auto err = read();
  if (!err) return caf::none;
  auto* bin = dynamic_cast<caf::binary_deserializer*>(&f);
  if (bin == nullptr) return err;
  malformed = describe(err);
  bin->skip(bin->remaining());
  return caf::none;
}

}  // namespace castor::wire
