// Globally unique ids: a 16-bit worker id in the high bits and a 48-bit local
// counter, PyTorch's scheme, for RRefs, forks, autograd contexts and messages.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include <caf/meta/type_name.hpp>

namespace castor {

/// A worker's id: its rank in the world.
using WorkerId = int16_t;

namespace detail {

inline constexpr int kLocalIdBits = 48;
inline constexpr uint64_t kLocalIdMask = (uint64_t{1} << kLocalIdBits) - 1;
// Note [Incarnation ids]
// ~~~~~~~~~~~~~~~~~~~~~~
// A worker that dies and rejoins (Note [Rejoin] in actors/cluster/rejoin.cpp)
// starts its counters again, but survivors still remember ids of its old
// life (an RRef it owned, a fork, a context). The top 8 bits of the local
// part are the maker's incarnation less one, so a new life never hands out
// an id its old life did, and an id tells which life made it
// (incarnation_of). Incarnation 1 keeps the plain counter (40 bits: 10^12
// ids of a kind per life).
inline constexpr int kIncarnationShift = 40;
inline constexpr uint32_t kMaxIncarnation = 256;

/// Packed (worker, counter) id. `Tag` keeps the kinds apart at compile time.
template <class Tag>
struct GlobalId {
  uint64_t packed = 0;

  constexpr GlobalId() = default;
  constexpr explicit GlobalId(uint64_t raw) : packed(raw) {}
  constexpr GlobalId(WorkerId worker, uint64_t local)
      : packed((uint64_t(uint16_t(worker)) << kLocalIdBits) | (local & kLocalIdMask)) {}

  constexpr WorkerId worker() const { return WorkerId(uint16_t(packed >> kLocalIdBits)); }
  constexpr uint64_t local() const { return packed & kLocalIdMask; }
  constexpr bool valid() const { return packed != 0; }
  int64_t as_int() const { return int64_t(packed); }

  friend constexpr bool operator==(GlobalId a, GlobalId b) { return a.packed == b.packed; }
  friend constexpr bool operator!=(GlobalId a, GlobalId b) { return a.packed != b.packed; }
  friend constexpr bool operator<(GlobalId a, GlobalId b) { return a.packed < b.packed; }

  friend std::string to_string(GlobalId x) {
    return std::string(Tag::prefix) + "(" + std::to_string(x.worker()) + ":" +
           std::to_string(x.local()) + ")";
  }

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, GlobalId& x) {
    return f(caf::meta::type_name(Tag::type_name), x.packed);
  }
};

/// Hands out ids of one kind for one worker; thread-safe. Counters start at 1
/// so that 0 means "no id".
template <class Id>
class IdGenerator {
 public:
  explicit IdGenerator(WorkerId self = 0, uint32_t incarnation = 1) { reset(self, incarnation); }
  /// `incarnation` in [1, kMaxIncarnation].
  void reset(WorkerId self, uint32_t incarnation = 1) {
    self_ = self;
    counter_.store((uint64_t(incarnation - 1) << kIncarnationShift) + 1, std::memory_order_relaxed);
  }
  Id next() { return Id(self_, counter_.fetch_add(1, std::memory_order_relaxed)); }

 private:
  WorkerId self_;
  std::atomic<uint64_t> counter_{1};
};

/// The incarnation of the worker that made `id` (Note [Incarnation ids]).
template <class Tag>
constexpr uint32_t incarnation_of(GlobalId<Tag> id) {
  return uint32_t(id.local() >> kIncarnationShift) + 1;
}

struct CallIdTag { static constexpr const char* prefix = "call"; static constexpr const char* type_name = "castor::CallId"; };
struct RRefIdTag { static constexpr const char* prefix = "rref"; static constexpr const char* type_name = "castor::RRefId"; };
struct ForkIdTag { static constexpr const char* prefix = "fork"; static constexpr const char* type_name = "castor::ForkId"; };
struct ContextIdTag { static constexpr const char* prefix = "ctx"; static constexpr const char* type_name = "castor::ContextId"; };
struct AutogradMessageIdTag { static constexpr const char* prefix = "amsg"; static constexpr const char* type_name = "castor::AutogradMessageId"; };
struct ControlIdTag { static constexpr const char* prefix = "ctl"; static constexpr const char* type_name = "castor::ControlId"; };
struct TransferIdTag { static constexpr const char* prefix = "xfer"; static constexpr const char* type_name = "castor::TransferId"; };

}  // namespace detail

using CallId = detail::GlobalId<detail::CallIdTag>;
using RRefId = detail::GlobalId<detail::RRefIdTag>;
using ForkId = detail::GlobalId<detail::ForkIdTag>;
using ContextId = detail::GlobalId<detail::ContextIdTag>;
using AutogradMessageId = detail::GlobalId<detail::AutogradMessageIdTag>;
using TransferId = detail::GlobalId<detail::TransferIdTag>;
using ControlId = detail::GlobalId<detail::ControlIdTag>;

}  // namespace castor

namespace std {
template <class Tag>
struct hash<castor::detail::GlobalId<Tag>> {
  size_t operator()(castor::detail::GlobalId<Tag> x) const noexcept {
    return std::hash<uint64_t>{}(x.packed);
  }
};
}  // namespace std
