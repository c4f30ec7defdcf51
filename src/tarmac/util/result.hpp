// Result<T>: a value or an Error, the return type of every fallible library function.
// Libraries propagate with TARMAC_TRY; only the top level (cli) turns errors into messages and
// exit codes. Nothing here throws.
#pragma once

#include <any>
#include <string>
#include <utility>
#include <variant>

namespace tarmac {

// Why something failed: a stable machine-readable code and a sentence for people, and, where the
// layer that failed knows more than the sentence says, that knowledge in the layer's own type.
struct Error {
  enum class Code {
    Invalid,        // bad input from the user (flag, file, value)
    NotFound,       // a file, library, device or process that does not exist
    Unsupported,    // the hardware or driver cannot do it
    Io,             // the operating system refused (read, write, fork, ...)
    External,       // an outside library or service failed (the GPU driver's library, ...)
    Internal,       // a bug
  };
  Code code = Code::Internal;
  std::string message;
  // The failing layer's own account, in a type that layer defines (an outside API's return code,
  // a status to answer), read back only through that layer's accessor: util/ knows none of them,
  // and code that does not know the type just sees the message.
  std::any cause;

  // The cause when it is a C, nullptr otherwise (no cause, or another layer's).
  template <typename C>
  [[nodiscard]] const C* cause_as() const {
    return std::any_cast<C>(&cause);
  }
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design, as std::expected
  Result(Error error) : v_(std::move(error)) {}  // NOLINT

  [[nodiscard]] bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  [[nodiscard]] const Error& error() const { return std::get<1>(v_); }
  Error&& take_error() { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

// Result<void>: success or an Error.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT
  [[nodiscard]] bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  [[nodiscard]] const Error& error() const { return error_; }
  Error&& take_error() { return std::move(error_); }

 private:
  Error error_;
  bool ok_ = true;
};

inline Error make_error(Error::Code code, std::string message) {
  Error e;
  e.code = code;
  e.message = std::move(message);
  return e;
}

// An Error that carries `cause` for the layer that defined its type (see Error::cause).
template <typename C>
Error make_error(Error::Code code, std::string message, C cause) {
  Error e = make_error(code, std::move(message));
  e.cause = std::move(cause);
  return e;
}

}  // namespace tarmac

#define TARMAC_CONCAT_INNER(a, b) a##b
#define TARMAC_CONCAT(a, b) TARMAC_CONCAT_INNER(a, b)

// TARMAC_TRY(expr): returns the error of a failed Result<void> from the enclosing function.
#define TARMAC_TRY(expr)                                           \
  do {                                                             \
    if (auto tarmac_try_r_ = (expr); !tarmac_try_r_.ok()) {        \
      return tarmac_try_r_.take_error();                           \
    }                                                              \
  } while (false)

// TARMAC_TRY_ASSIGN(lhs, expr): lhs = value of expr, or return its error.
#define TARMAC_TRY_ASSIGN(lhs, expr)                                             \
  auto TARMAC_CONCAT(tarmac_try_v_, __LINE__) = (expr);                          \
  if (!TARMAC_CONCAT(tarmac_try_v_, __LINE__).ok()) {                            \
    return TARMAC_CONCAT(tarmac_try_v_, __LINE__).take_error();                  \
  }                                                                              \
  lhs = std::move(TARMAC_CONCAT(tarmac_try_v_, __LINE__)).value()
