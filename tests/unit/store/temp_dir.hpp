// Test helper: a fresh directory under the system temp dir, removed with everything in it on
// destruction, so each test writes its own store and leaves nothing behind.
#pragma once

#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <stdexcept>
#include <string>

namespace tarmac::store::test_support {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tarmac-store-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot create a directory like " + pattern);
    root_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!root_.empty()) std::filesystem::remove_all(root_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  [[nodiscard]] const std::string& path() const { return root_; }
  // root/relative.
  [[nodiscard]] std::string operator/(const std::string& relative) const { return root_ + "/" + relative; }

 private:
  std::string root_;
};

}  // namespace tarmac::store::test_support
