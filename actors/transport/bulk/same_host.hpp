// B7 of Note [Bulk path]: telling that a peer shares this machine and pid
// namespace, and copying tensors straight out of its memory.
#pragma once

#include <cstdint>
#include <string>

namespace castor::detail::bulk {

/// This machine and pid namespace: the kernel's boot id and the namespace's
/// inode ("" when unknown).
const std::string& host_identity();

/// Copies `n` bytes at `address` of process `pid` into `into`
/// (process_vm_readv); false when the kernel refuses.
bool copy_from_process(int pid, uint64_t address, void* into, uint64_t n);

}  // namespace castor::detail::bulk
