// Shared tensors: segments, the registry that finds a tensor's segment, and
// the mapping of a peer's segment.
//
// Note [Shared tensors]
// ~~~~~~~~~~~~~~~~~~~~~
// B7 copies a tensor out of a same-host sender's memory once; a tensor that
// the user shared (castor::share_memory, as torch.multiprocessing's
// share_memory_()) is not copied at all: it reaches a worker on the same
// host as a view of the same bytes.
//  SH1. share_memory moves the storage's bytes into a segment of its own, in
//       place (the storage's data pointer changes, so every view, an
//       optimizer's parameters included, follows). The storage cannot grow
//       any more (a resize that needs more bytes throws, as it does for
//       PyTorch's shared tensors): grown, it would leave the segment. A
//       segment is a memfd named castor-shared-<id>, mapped read-write and
//       shared, with a 64-bit id unique to its process life; nothing is
//       left behind by a crash (the memory goes with the last mapping or
//       descriptor).
//  SH2. A contiguous tensor whose bytes lie in a live segment (made here,
//       or mapped from a peer: SH4) travels on the bulk link whatever its
//       size (bulk_frame.cpp's extract), so that it never goes as a copy
//       inside an envelope.
//  SH3. On a same-host link (B7) the head names, beside each tensor's
//       address, its segment: the sender's descriptor, the id and the
//       offset (fd -1: not shared). The frame holds the tensors until the
//       receiver's answer, as for a copy, so the descriptor stays open
//       while the receiver opens it (SH7: once mapped, the link keeps it).
//  SH4. The receiver opens the descriptor through /proc/<pid>/fd of the pid
//       the sender's rank joined with (the same check as B7's copy: ptrace
//       rights over the sender), checks that it is castor's memfd of that
//       id and large enough, maps it once while any tensor uses it
//       (segments are found by id), and makes the tensor a view of it. A
//       view received this way is itself shared: sent on, it goes by its
//       own descriptor. A segment that cannot be mapped is copied as B7 does.
//       A mapped segment stays mapped after its views die (the 64 used
//       last, up to 1 GiB): a server that sums the gradients its trainers
//       push each round would otherwise open, map and fault in their
//       segments every round. Kept, a segment its sender freed holds its
//       memory until it is pushed out, or its sender's link ends.
//  SH5. Elsewhere the value is a copy, as before: to another host (B1's
//       bytes), over CAF when the link is not open (B4), to the worker
//       itself (Note [Values]). Code that needs the view checks
//       castor::is_shared on the tensor it got.
//  SH6. A view aliases: what either side writes, the other reads, with no
//       ordering but the program's own messages (a reply sent after the
//       write is read after it). Like torch.multiprocessing, castor does
//       not lock shared tensors.
//  SH7. A frame of views that the peer can map without help needs no
//       answer. SH3's answer keeps the sender's descriptor open while the
//       receiver opens it; once the receiver answers kMapped (every tensor
//       that named a segment came as a view of it), the link keeps those
//       segments (their storage, so their descriptors) for the frames that
//       follow. A frame whose tensors all lie in kept segments goes as
//       kViews: the head of addresses with no lease, written like a small
//       frame (from the sending thread when the link is idle), with no
//       writer woken to wait and no answer sent. The receiver maps the
//       segments from its cache, or opens them again if it let them go
//       (their descriptors are still open); one it cannot map (its sender
//       died meanwhile) fails the message with why, as no bytes can
//       follow. A link keeps at most SH4's bounds (64 segments, 1 GiB),
//       letting go of the least recently named once an answer shows that
//       the peer has read every frame that named them (a link's frames are
//       numbered and read in order), and of all of them when it breaks or
//       stops. A parameter-server round sends four such frames; each woke
//       its sender's writer twice (the hand-over, the answer) and cost its
//       receiver a send (bench/README.md).
#include "actors/transport/bulk/shared_segments.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>

namespace castor::detail::bulk {
namespace {

std::string name_of(uint64_t id) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "castor-shared-%016llx", static_cast<unsigned long long>(id));
  return buf;
}

struct Segment;

// Live segments by their first byte and by id. Weak: a segment lives as
// long as the tensors over it.
class Registry {
 public:
  static Registry& instance() {
    static auto* registry = new Registry;  // never destroyed: tensors may outlive static teardown
    return *registry;
  }
  void add(const std::shared_ptr<Segment>& s);
  void remove(const Segment& s);
  std::shared_ptr<Segment> containing(const void* p, size_t n);
  /// Whether any segment lives: a process that shares nothing pays one
  /// load per tensor it sends, not a lock (SH2 asks of every small tensor).
  bool any() const { return live_.load(std::memory_order_acquire) > 0; }
  std::shared_ptr<Segment> by_id(uint64_t id);
  /// SH4: keeps a mapped segment, the last used first.
  void keep(const std::shared_ptr<Segment>& s);
  void forget_kept_of(int pid);
  size_t alive() const { return live_.load(std::memory_order_acquire); }

 private:
  static constexpr size_t kKeptSegments = 64;
  static constexpr size_t kKeptBytes = size_t(1) << 30;
  std::mutex mtx_;
  std::atomic<size_t> live_{0};  // by_base_'s size
  std::list<std::shared_ptr<Segment>> kept_;  // SH4, the last used first
  size_t kept_bytes_ = 0;
  std::map<uintptr_t, std::weak_ptr<Segment>> by_base_;
  std::map<uint64_t, std::weak_ptr<Segment>> by_id_;
};

struct Segment {
  char* base = nullptr;
  size_t bytes = 0;
  int fd = -1;
  uint64_t id = 0;
  bool mapped = false;  // from a peer (SH4), not made here
  int from_pid = 0;     // the peer it was mapped from
  ~Segment() {
    Registry::instance().remove(*this);
    if (base) ::munmap(base, bytes);
    if (fd >= 0) ::close(fd);
  }
};

void Registry::add(const std::shared_ptr<Segment>& s) {
  std::lock_guard<std::mutex> lock(mtx_);
  by_base_[uintptr_t(s->base)] = s;
  by_id_[s->id] = s;
  live_.store(by_base_.size(), std::memory_order_release);
}

void Registry::remove(const Segment& s) {
  std::lock_guard<std::mutex> lock(mtx_);
  auto b = by_base_.find(uintptr_t(s.base));
  if (b != by_base_.end() && b->second.expired()) by_base_.erase(b);
  auto i = by_id_.find(s.id);
  if (i != by_id_.end() && i->second.expired()) by_id_.erase(i);
  live_.store(by_base_.size(), std::memory_order_release);
}

std::shared_ptr<Segment> Registry::containing(const void* p, size_t n) {
  std::lock_guard<std::mutex> lock(mtx_);
  auto at = uintptr_t(p);
  auto it = by_base_.upper_bound(at);
  if (it == by_base_.begin()) return nullptr;
  --it;
  auto s = it->second.lock();
  if (!s || at + n > uintptr_t(s->base) + s->bytes) return nullptr;
  return s;
}

void Registry::keep(const std::shared_ptr<Segment>& s) {
  std::list<std::shared_ptr<Segment>> out;  // freed after the lock: a Segment's destructor takes it
  {
    std::lock_guard<std::mutex> lock(mtx_);
    for (auto it = kept_.begin(); it != kept_.end(); ++it)
      if (*it == s) {
        kept_.splice(kept_.begin(), kept_, it);
        return;
      }
    kept_.push_front(s);
    kept_bytes_ += s->bytes;
    while (kept_.size() > 1 && (kept_.size() > kKeptSegments || kept_bytes_ > kKeptBytes)) {
      kept_bytes_ -= kept_.back()->bytes;
      out.splice(out.begin(), kept_, std::prev(kept_.end()));
    }
  }
}

void Registry::forget_kept_of(int pid) {
  std::list<std::shared_ptr<Segment>> out;  // freed after the lock, as in keep()
  {
    std::lock_guard<std::mutex> lock(mtx_);
    for (auto it = kept_.begin(); it != kept_.end();) {
      auto next = std::next(it);
      if ((*it)->from_pid == pid) {
        kept_bytes_ -= (*it)->bytes;
        out.splice(out.begin(), kept_, it);
      }
      it = next;
    }
  }
}

std::shared_ptr<Segment> Registry::by_id(uint64_t id) {
  std::lock_guard<std::mutex> lock(mtx_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second.lock();
}

// SH1: ids unique to this process life: a random start, then a count.
uint64_t next_id() {
  static std::atomic<uint64_t> next{[] {
    std::random_device rd;
    return (uint64_t(rd()) << 32 | rd()) & ~uint64_t(0xffffff);
  }()};
  return next.fetch_add(1);
}

std::shared_ptr<Segment> make_segment(size_t bytes) {
  auto s = std::make_shared<Segment>();
  s->id = next_id();
  s->fd = ::memfd_create(name_of(s->id).c_str(), MFD_CLOEXEC);
  if (s->fd < 0) throw std::runtime_error(std::string("share_memory: memfd_create failed: ") + std::strerror(errno));
  if (::ftruncate(s->fd, off_t(bytes)) != 0)
    throw std::runtime_error("share_memory: cannot size a segment of " + std::to_string(bytes) +
                             " bytes: " + std::strerror(errno));
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
  if (p == MAP_FAILED)
    throw std::runtime_error("share_memory: cannot map " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
  s->base = static_cast<char*>(p);
  s->bytes = bytes;
  Registry::instance().add(s);
  return s;
}

void release_segment(void* holder) { delete static_cast<std::shared_ptr<Segment>*>(holder); }

}  // namespace

void move_to_shared_segment(const at::Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || !t.has_storage())
    throw std::invalid_argument("share_memory: only CPU tensors with a storage can be shared");
  if (in_shared_segment(t)) return;
  auto* storage = t.storage().unsafeGetStorageImpl();
  size_t bytes = storage->nbytes();
  if (bytes == 0) return;  // nothing to share
  auto segment = make_segment(bytes);
  std::memcpy(segment->base, storage->data(), bytes);
  void* base = segment->base;
  auto* holder = new std::shared_ptr<Segment>(std::move(segment));
  storage->set_data_ptr_noswap(c10::DataPtr(base, holder, &release_segment, c10::Device(c10::kCPU)));
  storage->set_resizable(false);  // grown, it would leave the segment and stop being shared
}

bool in_shared_segment(const at::Tensor& t) {
  return Registry::instance().any() && t.defined() && t.device().is_cpu() && t.has_storage() &&
         t.storage().nbytes() > 0 &&
         Registry::instance().containing(t.storage().data(), t.storage().nbytes()) != nullptr;
}

SharedRef shared_ref_of(const at::Tensor& t) {
  SharedRef ref;
  if (!Registry::instance().any() || !t.defined() || !t.device().is_cpu() || !t.has_storage() ||
      !t.is_contiguous() || t.numel() == 0)
    return ref;
  auto s = Registry::instance().containing(t.data_ptr(), t.numel() * t.element_size());
  if (!s) return ref;
  ref.fd = s->fd;
  ref.id = s->id;
  ref.offset = uint64_t(static_cast<char*>(t.data_ptr()) - s->base);
  return ref;
}

at::Tensor map_shared(int pid, const SharedRef& ref, const std::vector<int64_t>& sizes, at::ScalarType dtype,
                      uint64_t bytes, std::string& why) {
  auto segment = Registry::instance().by_id(ref.id);
  if (!segment) {
    // SH4: the sender's descriptor, checked to be castor's segment of that id.
    std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(ref.fd);
    char link[128] = {0};
    auto n = ::readlink(path.c_str(), link, sizeof link - 1);
    if (n <= 0) {  // gone, or no right to look (the same rights as B7's copy)
      why = "cannot read descriptor " + std::to_string(ref.fd) + " of pid " + std::to_string(pid) + ": " +
            std::strerror(errno);
      return {};
    }
    std::string expected = "/memfd:" + name_of(ref.id) + " (deleted)";
    if (std::string(link, size_t(n)) != expected) {
      why = "descriptor " + std::to_string(ref.fd) + " of pid " + std::to_string(pid) + " is not its shared segment";
      return {};
    }
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      why = std::string("cannot open the segment: ") + std::strerror(errno);
      return {};
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
      ::close(fd);
      why = "the segment cannot be measured";
      return {};
    }
    void* p = ::mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      why = std::string("cannot map the segment: ") + std::strerror(errno);
      ::close(fd);
      return {};
    }
    auto s = std::make_shared<Segment>();
    s->base = static_cast<char*>(p);
    s->bytes = size_t(st.st_size);
    s->fd = fd;
    s->id = ref.id;
    s->mapped = true;
    s->from_pid = pid;
    Registry::instance().add(s);
    segment = std::move(s);
  }
  if (segment->mapped) Registry::instance().keep(segment);  // one made here lives as long as its tensors
  auto element = uint64_t(c10::elementSize(dtype));
  if (ref.offset > segment->bytes || bytes > segment->bytes - ref.offset || ref.offset % element != 0) {
    why = "a tensor of " + std::to_string(bytes) + " bytes at offset " + std::to_string(ref.offset) +
          " does not fit its segment of " + std::to_string(segment->bytes);
    return {};
  }
  return at::from_blob(
      segment->base + ref.offset, sizes, [segment](void*) mutable { segment.reset(); },
      at::TensorOptions().dtype(dtype));
}

void forget_kept_segments_of(int pid) { Registry::instance().forget_kept_of(pid); }

size_t shared_segments_alive() { return Registry::instance().alive(); }

}  // namespace castor::detail::bulk
