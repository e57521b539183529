// What a process started through a fork server says about itself, for
// tests/integration/test_fork_server.cpp (Note [Fork server]).
#pragma once

namespace castor::test {

/// castor_test_worker probe CODE|sleep: prints its argv, environment
/// variable CASTOR_PROBE_VAR, working folder, threads at start, a product's
/// sum, parent, /proc/self/cmdline, CASTOR_PROBE_VAR in /proc/self/environ,
/// its open descriptors, SIGPIPE's disposition, whether SIGUSR2 is blocked
/// and its umask, one per line; then exits with CODE,
/// or with "sleep" waits up to 60 s to be killed.
int fork_probe(int argc, char** argv);

/// castor_test_worker requester: starts a fork server of its own
/// executable, forks a sleeping probe through it, prints "server PID" and
/// "worker PID", then waits up to 60 s to be killed.
int fork_requester(int argc, char** argv);

}  // namespace castor::test
