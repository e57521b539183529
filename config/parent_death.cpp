#include "config/parent_death.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace castor::config {

void die_with_parent(int signal, pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, signal);
  if (::getppid() == parent) return;
  struct sigaction by_default {};
  by_default.sa_handler = SIG_DFL;
  ::sigaction(signal, &by_default, nullptr);
  sigset_t just_it;
  ::sigemptyset(&just_it);
  ::sigaddset(&just_it, signal);
  ::sigprocmask(SIG_UNBLOCK, &just_it, nullptr);
  ::raise(signal);
  ::_exit(128 + signal);  // a signal whose default is to go on (none that a caller names)
}

}  // namespace castor::config
