#include "tarmac/reap/gate.hpp"

#include <cstdlib>
#include <string_view>

namespace tarmac::reap {

bool kill_gate_open() {
  const char* value = std::getenv("TARMAC_REAP_KILL_PREVIEW");
  return value != nullptr && std::string_view(value) == "1";
}

const char* kill_gate_reason() {
  return "not enabled yet: a review of reap --kill found ways a local user could steer a pass "
         "into signalling a process other than the idle holder (docs/reap.md, \"Before --kill is enabled\")";
}

}  // namespace tarmac::reap
