// Binding a worker process to one CPU, for workers that share a host and
// each keep one thread of arithmetic (the pipeline's stages, P1 of Note
// [Pipeline]): left alone, a stage's other threads (its link's receiver
// copying a frame, CAF's threads) run wherever the scheduler puts them, the
// other stage's core included.
#pragma once

#include <string>

namespace castor::apps {

/// Names the machine this process runs on: the kernel's boot id, the same
/// for every process under one kernel (containers included) and different
/// on another host or after a reboot. Empty if it cannot be read.
std::string host_identity();

/// Binds every thread of this process, and so every thread it starts later,
/// to the `slot`-th CPU (from 0) of those it may run on now. Refused, with
/// `why` set, if it may run on fewer than two CPUs, on fewer than slot + 1,
/// or if the kernel refuses; bound once, the same slot again changes nothing
/// and another slot is refused.
bool bind_process_to_cpu_slot(int slot, std::string& why);

}  // namespace castor::apps
