// A child process's tie to its parent's end, set in the child between fork
// and exec (or before a forked worker enters main): async-signal-safe.
#pragma once

#include <sys/types.h>

namespace castor::config {

// Asks the kernel for `signal` when `parent`'s thread that forked us ends
// (PR_SET_PDEATHSIG). A child whose parent ended before this (it was adopted
// already, so the kernel's signal will never come) dies of `signal` at once,
// default action and unblocked, as if the kernel had sent it: whoever reaps
// it sees the same status on both sides of that race.
void die_with_parent(int signal, pid_t parent);

}  // namespace castor::config
