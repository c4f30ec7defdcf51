// How many descriptors this process has open: the leak check of the socket tests.
#pragma once

#include <dirent.h>

namespace tarmac::sched::testing {

inline int open_fds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

}  // namespace tarmac::sched::testing
