// Closing descriptors that another process handed over (SCM_RIGHTS), off the caller's thread. A
// close can wait on whoever holds the other end: a file of a FUSE mount the sender runs (its
// daemon is asked to FLUSH and need never answer), a socket with SO_LINGER set and data unsent.
// The agent's threads that serve everyone (the scheduler's loop, backfill's intake) must not wait
// so; each descriptor a user sent is closed here instead.
#pragma once

#include <vector>

#include "tarmac/util/fd.hpp"

namespace tarmac::util {

// Closes `fd` on one of a few threads of its own (started when first needed, up to 4, each kept
// for the process's life); any thread. A close that never returns holds one of them; the others
// go on with the rest.
void close_in_background(Fd fd);
// Likewise each of `fds`, which is left empty.
void close_in_background(std::vector<Fd>& fds);

}  // namespace tarmac::util
