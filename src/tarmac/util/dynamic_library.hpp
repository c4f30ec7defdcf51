// A shared library loaded at run time (dlopen) by the feature that needs it, as libcurl and OpenSSL
// are: the binary then starts without it, and a machine without it gets a message naming it and
// its package instead of a binary that will not start.
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#include "tarmac/util/result.hpp"

namespace tarmac::util {

class DynamicLibrary {
 public:
  // Loads `name` (the environment variable `override_env`, when set and not empty, names another
  // file: tests) and keeps it loaded for the process's life. The error says that it cannot be
  // loaded, why, and `install_hint` ("install libcurl (Debian: apt install libcurl4) for webhooks").
  [[nodiscard]] static Result<DynamicLibrary> open(const char* name, const char* override_env,
                                                   std::string_view install_hint);

  // Sets `fn` to `symbol` (searched in the library and what it needs); when there is none, `fn` is
  // null and the symbol is added to missing().
  template <class Fn>
  void resolve(Fn& fn, const char* symbol) {
    static_assert(std::is_pointer_v<Fn> && std::is_function_v<std::remove_pointer_t<Fn>>);
    // dlsym's void* to a function pointer: what POSIX guarantees to work.
    fn = reinterpret_cast<Fn>(find(symbol));
  }

  // An error naming the library and what it lacks (`what`: "a usable libcurl"), or ok.
  [[nodiscard]] Result<void> complete(std::string_view what) const;

  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  DynamicLibrary(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}
  [[nodiscard]] void* find(const char* symbol);

  void* handle_ = nullptr;  // never closed
  std::string name_;
  std::string missing_;
};

}  // namespace tarmac::util
