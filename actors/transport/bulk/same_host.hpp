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

/// B15 of Note [Bulk path]: this process's revocation word. A head of
/// addresses carries its address and the value it had when the head was
/// made; revoke_copies() changes it, before any tensor whose copy a
/// receiver may still be making can be freed or reused.
uint64_t revocation_word_address();
uint64_t revocations_so_far();
void revoke_copies();

/// The receiver's side of B15, after its copy: whether the word at
/// `address` in process `pid` still reads `seen` (false when it cannot be read).
bool copy_still_valid(int pid, uint64_t address, uint64_t seen);

}  // namespace castor::detail::bulk
