// How often `what` occurs in `text` (overlapping occurrences counted), for the HTTP tests.
#pragma once

#include <string>

namespace tarmac::serve {

inline int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace tarmac::serve
