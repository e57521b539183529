// libFuzzer target over castor's message decoding, fed the way BASP feeds it:
// a caf::binary_deserializer over untrusted bytes, with an actor system as its
// context. The first byte picks what to decode: one castor message struct, or
// a whole type-erased caf::message (what BASP decodes from a payload). What
// decodes is re-encoded and decoded again: the two encodings must agree.
// See Note [Hostile input] in messages/wire_checks.hpp.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deep_to_string.hpp>
#include <caf/message.hpp>
#include <caf/scoped_execution_unit.hpp>

#include "messages/atoms.hpp"
#include "messages/autograd_proto.hpp"
#include "messages/call.hpp"
#include "messages/chunk.hpp"
#include "messages/rendezvous.hpp"
#include "messages/rref_proto.hpp"
#include "messages/shutdown_proto.hpp"
#include "messages/type_registry.hpp"

namespace {

caf::actor_system* sys = nullptr;
caf::scoped_execution_unit* unit = nullptr;

[[noreturn]] void fail(const char* what, const char* type) {
  std::fprintf(stderr, "fuzz_messages: %s for %s\n", what, type);
  std::abort();
}

// Receiver-side marks (malformed) never travel: a message carrying one was
// not decoded completely, so there is nothing to compare.
template <class T>
bool is_malformed(const T& x) {
  if constexpr (castor::wire::has_malformed_mark<T>::value)
    return !x.malformed.empty();
  else
    return false;
}

template <class T>
std::vector<char> encode_or_die(T& x, const char* type) {
  std::vector<char> buf;
  caf::binary_serializer sink{unit, buf};
  if (auto err = sink(x)) fail("re-encoding a decoded value failed", type);
  return buf;
}

// CAF 0.17 encodes float and double with a loop that never ends on an
// infinity (caf/detail/ieee_754.hpp): a caf::message holding CAF's own
// floating-point elements is decoded and printed but not re-encoded. castor
// sends none (Value encodes the bits itself), see Note [Hostile input] H5.
bool reencodable(const caf::message& x) {
  for (size_t i = 0; i < x.size(); ++i)
    if (x.match_element<float>(i) || x.match_element<double>(i) || x.match_element<long double>(i)) return false;
  return true;
}
template <class T>
bool reencodable(const T&) {
  return true;
}

// What a caf::message from a peer may hold for this target: castor's own
// types and the CAF builtins castor sends (atoms, integers, strings, actor
// handles). Other CAF builtins reach CAF's own decoders, whose limits castor
// cannot change (Note [Hostile input] H5): "@charbuf" resizes to the claimed
// length before checking it (up to 4 GiB), "@message", "@error" and the
// system messages nest without a bound, floating point never ends encoding an
// infinity. Inputs naming them are skipped, not counted as findings.
bool castor_shaped(const char* data, size_t size) {
  caf::binary_deserializer header{unit, data, size};
  uint16_t nr = 0;
  std::string names;
  if (header.begin_object(nr, names) || nr != 0) return true;  // CAF refuses it by itself
  static const std::set<std::string> caf_builtins = {
      "@<>", "@atom", "@i8", "@i16", "@i32", "@i64", "@u8", "@u16", "@u32", "@u64", "bool",
      "@str", "@strvec", "@actor", "@addr", "@strong_actor_ptr", "@node"};
  size_t begin = 0;
  while (begin <= names.size()) {
    auto end = names.find('+', begin);
    if (end == std::string::npos) end = names.size();
    auto name = names.substr(begin, end - begin);
    if (!caf_builtins.count(name) && name.rfind("castor::", 0) != 0) return false;
    begin = end + 1;
  }
  return true;
}

template <class T>
void decode_as(const char* type, const char* data, size_t size) {
  if constexpr (std::is_same<T, caf::message>::value)
    if (!castor_shaped(data, size)) return;
  T x;
  caf::binary_deserializer source{unit, data, size};
  if (source(x) || is_malformed(x)) return;
  (void)caf::deep_to_string(x);  // what a log line would print
  if (!reencodable(x)) return;
  auto first = encode_or_die(x, type);
  T y;
  caf::binary_deserializer again{unit, first};
  if (again(y)) fail("decoding castor's own encoding failed", type);
  if (is_malformed(y)) fail("castor's own encoding decoded as malformed", type);
  if (again.remaining() != 0) fail("decoding castor's own encoding left bytes over", type);
  if (encode_or_die(y, type) != first) fail("encodings differ after a round trip", type);
}

using Decoder = void (*)(const char*, const char*, size_t);

struct Target {
  const char* name;
  Decoder decode;
};

const Target targets[] = {
    {"castor::Value", &decode_as<castor::Value>},
    {"castor::CallRequest", &decode_as<castor::CallRequest>},
    {"castor::CallReply", &decode_as<castor::CallReply>},
    {"castor::ErrorInfo", &decode_as<castor::ErrorInfo>},
    {"castor::TensorChunk", &decode_as<castor::TensorChunk>},
    {"castor::WorkerRecord", &decode_as<castor::WorkerRecord>},
    {"castor::JoinRequest", &decode_as<castor::JoinRequest>},
    {"castor::JoinReply", &decode_as<castor::JoinReply>},
    {"castor::TerminationReport", &decode_as<castor::TerminationReport>},
    {"castor::RRefControl", &decode_as<castor::RRefControl>},
    {"castor::RRefControlAck", &decode_as<castor::RRefControlAck>},
    {"castor::AutogradMeta", &decode_as<castor::AutogradMeta>},
    {"castor::BackwardGrad", &decode_as<castor::BackwardGrad>},
    {"castor::BackwardDone", &decode_as<castor::BackwardDone>},
    {"castor::ContextControl", &decode_as<castor::ContextControl>},
    {"caf::message", &decode_as<caf::message>},
};
constexpr size_t kNumTargets = sizeof(targets) / sizeof(targets[0]);

// -- seeds: real encoded messages, one file each ---------------------------------

size_t index_of(const char* name) {
  for (size_t i = 0; i < kNumTargets; ++i)
    if (std::string(targets[i].name) == name) return i;
  std::abort();
}

template <class T>
void write_seed(const std::string& dir, const char* target, T x, int& count) {
  std::vector<char> buf{char(index_of(target))};
  caf::binary_serializer sink{unit, buf};
  if (sink(x)) fail("encoding a seed failed", target);
  std::ofstream out(dir + "/seed-" + std::to_string(count++), std::ios::binary);
  out.write(buf.data(), std::streamsize(buf.size()));
}

void write_seeds(const std::string& dir) {
  using namespace castor;
  int n = 0;
  auto values = std::vector<Value>{
      Value(), Value(true), Value(int64_t(-7)), Value(2.5), Value("text"),
      Value(at::arange(6, at::kFloat).reshape({2, 3})), Value(at::ones({2}, at::kBool)),
      Value(at::zeros({3}, at::kDouble).set_requires_grad(true)), Value(at::empty({0}, at::kLong)),
      Value(Value::List{Value(1), Value("a"), Value(Value::List{Value(false)})}),
      Value(RRefForkData{1, RRefId(1, 5), ForkId(0, 3), 0, "Tensor"}),
      Value(ExternalTensor{TransferId(1, 9), 8, {4, 1024}, true})};
  for (auto& v : values) write_seed(dir, "castor::Value", v, n);
  CallRequest req;
  req.id = CallId(1, 42);
  req.caller = 1;
  req.function = "aten::add";
  req.args = {values[5], values[2], values[9]};
  req.kind = CallKind::method;
  req.target = RRefId(0, 4);
  req.result_to = RRefForkData{1, RRefId(1, 6), ForkId(1, 7), 1, "Tensor"};
  req.autograd = AutogradMeta{ContextId(1, 1), AutogradMessageId(1, 2), {1, 2, 3}};
  write_seed(dir, "castor::CallRequest", req, n);
  CallReply ok{CallId(1, 42), true, values[5], {}, {}};
  CallReply bad{CallId(1, 43), false, {}, ErrorInfo{ErrorKind::Remote, "worker1", "it threw"}, {}};
  write_seed(dir, "castor::CallReply", ok, n);
  write_seed(dir, "castor::CallReply", bad, n);
  write_seed(dir, "castor::ErrorInfo", ErrorInfo{ErrorKind::Type, "worker0", "wrong type"}, n);
  TensorChunk chunk;
  chunk.transfer = TransferId(1, 9);
  chunk.dtype = 8;
  chunk.sizes = {4, 1024};
  chunk.offset = 4096;
  chunk.bytes = std::vector<char>(64, 'x');
  write_seed(dir, "castor::TensorChunk", chunk, n);
  WorkerRecord rec{"worker1", 1, "127.0.0.1", 4242};
  write_seed(dir, "castor::WorkerRecord", rec, n);
  JoinRequest join{rec, 2, kWireProtocolVersion, "fast", {"f(Tensor)->Tensor", "g()->int64"}, 5000};
  write_seed(dir, "castor::JoinRequest", join, n);
  write_seed(dir, "castor::JoinReply", JoinReply{true, false, "", {rec, rec}}, n);
  write_seed(dir, "castor::TerminationReport", TerminationReport{3, 1, 10, 9, true}, n);
  write_seed(dir, "castor::RRefControl",
             RRefControl{ControlId(1, 1), RRefOp::child_accept, RRefId(0, 2), ForkId(1, 3), 1}, n);
  write_seed(dir, "castor::RRefControlAck", RRefControlAck{ControlId(1, 1)}, n);
  write_seed(dir, "castor::AutogradMeta", req.autograd, n);
  BackwardGrad grad;
  grad.context = ContextId(0, 1);
  grad.send = AutogradMessageId(1, 5);
  grad.from = 0;
  grad.request = 77;
  grad.grads = {values[7], Value()};
  grad.timeout_ms = 1000;
  grad.participants = {5, 6};
  write_seed(dir, "castor::BackwardGrad", grad, n);
  write_seed(dir, "castor::BackwardDone", BackwardDone{ContextId(0, 1), 77, false, ErrorInfo{}}, n);
  write_seed(dir, "castor::ContextControl", ContextControl{ContextId(0, 1), ContextControl::abort, 1, ErrorInfo{}}, n);
  // Whole messages as BASP carries them to a worker.
  write_seed(dir, "caf::message", caf::make_message(req), n);
  write_seed(dir, "caf::message", caf::make_message(ok), n);
  write_seed(dir, "caf::message", caf::make_message(grad), n);
  write_seed(dir, "caf::message", caf::make_message(chunk), n);
  write_seed(dir, "caf::message", caf::make_message(hello_atom::value, WorkerId(1)), n);
  write_seed(dir, "caf::message", caf::make_message(join_atom::value, join), n);
  write_seed(dir, "caf::message", caf::make_message(probe_atom::value, int64_t(3)), n);
  write_seed(dir, "caf::message", caf::make_message(std::string("x"), int32_t(1), uint64_t(2)), n);
  std::printf("fuzz_messages: wrote %d seeds to %s\n", n, dir.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto* cfg = new caf::actor_system_config;
  castor::detail::register_message_types(*cfg);
  cfg->set("scheduler.max-threads", 1);
  cfg->set("logger.verbosity", caf::atom("quiet"));
  sys = new caf::actor_system{*cfg};
  unit = new caf::scoped_execution_unit{sys};
  if (const char* dir = std::getenv("CASTOR_FUZZ_WRITE_SEEDS")) {  // tests/fuzz/run.sh
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& target = targets[data[0] % kNumTargets];
  target.decode(target.name, reinterpret_cast<const char*>(data) + 1, size - 1);
  return 0;
}
