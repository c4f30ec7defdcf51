#include "tarmac/net/http_client.hpp"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fmt/format.h>
#include <memory>
#include <mutex>

#include "tarmac/util/clock.hpp"
#include "tarmac/util/dynamic_library.hpp"

namespace tarmac::net {
namespace {

constexpr const char* kLibrary = "libcurl.so.4";

// The entry points tarmac calls, resolved from the library loaded at run time. The declarations
// come from libcurl's headers; nothing links against the library.
struct Curl {
  decltype(&curl_global_init) global_init = nullptr;
  decltype(&curl_easy_init) easy_init = nullptr;
  decltype(&curl_easy_setopt) easy_setopt = nullptr;
  decltype(&curl_easy_perform) easy_perform = nullptr;
  decltype(&curl_easy_getinfo) easy_getinfo = nullptr;
  decltype(&curl_easy_cleanup) easy_cleanup = nullptr;
  decltype(&curl_easy_strerror) easy_strerror = nullptr;
  decltype(&curl_slist_append) slist_append = nullptr;
  decltype(&curl_slist_free_all) slist_free_all = nullptr;
};

// Loads libcurl once per process (curl_global_init is not to be raced) and keeps it loaded.
const Result<Curl>& curl() {
  static const Result<Curl> loaded = []() -> Result<Curl> {
    auto lib = util::DynamicLibrary::open(kLibrary, "TARMAC_CURL_LIB",
                                          "install libcurl (Debian: apt install libcurl4) for webhooks and backfill");
    if (!lib.ok()) return lib.error();
    Curl c;
    lib->resolve(c.global_init, "curl_global_init");
    lib->resolve(c.easy_init, "curl_easy_init");
    lib->resolve(c.easy_setopt, "curl_easy_setopt");
    lib->resolve(c.easy_perform, "curl_easy_perform");
    lib->resolve(c.easy_getinfo, "curl_easy_getinfo");
    lib->resolve(c.easy_cleanup, "curl_easy_cleanup");
    lib->resolve(c.easy_strerror, "curl_easy_strerror");
    lib->resolve(c.slist_append, "curl_slist_append");
    lib->resolve(c.slist_free_all, "curl_slist_free_all");
    TARMAC_TRY(lib->complete("a usable libcurl"));
    const std::string& name = lib->name();
    if (const CURLcode rc = c.global_init(CURL_GLOBAL_DEFAULT); rc != CURLE_OK) {
      return make_error(Error::Code::External, fmt::format("{}: curl_global_init failed ({})", name, c.easy_strerror(rc)));
    }
    return c;
  }();
  return loaded;
}

bool has_control(std::string_view text) {
  return std::any_of(text.begin(), text.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c < 0x20 || c == 0x7f;
  });
}

// What one transfer keeps while libcurl calls back.
struct Transfer {
  const Request* request = nullptr;
  std::string body;
  bool too_large = false;
  bool stopped = false;  // on_data said stop
  bool untrusted = false;  // check_connection said no
  long long answered_at_ms = 0;  // monotonic: when Request::answered was first seen true
  bool lingered = false;  // ended by us: the answer was whole, the server held the connection
};

std::size_t on_write(char* data, std::size_t size, std::size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t n = size * count;
  const std::string_view piece(data, n);
  if (t->request->on_data) {
    if (!t->request->on_data(piece)) {
      t->stopped = true;
      return 0;  // anything but n makes libcurl end the transfer
    }
    return n;
  }
  if (t->body.size() + n > t->request->max_body_bytes) {
    t->too_large = true;
    return 0;
  }
  t->body.append(piece);
  return n;
}

// Called often during a transfer: a non-zero answer aborts it (the cancel flag).
int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (t->request->cancel != nullptr && t->request->cancel->is_set()) return 1;
  if (t->request->answered && t->request->answered()) {
    const long long now = util::monotonic_ms();
    if (t->answered_at_ms == 0) {
      t->answered_at_ms = now;
    } else if (now - t->answered_at_ms >= t->request->answered_linger_ms) {
      t->lingered = true;
      return 1;
    }
  }
  return 0;
}

// A socket libcurl made, before it connects: watched by the request's Cancel.
int on_socket(void* user, curl_socket_t fd, curlsocktype) {
  auto* cancel = static_cast<Cancel*>(user);
  cancel->watch(fd);
  return cancel->is_set() ? CURL_SOCKOPT_ERROR : CURL_SOCKOPT_OK;
}

// A socket libcurl closes: forgotten first.
int on_close(void* user, curl_socket_t fd) {
  static_cast<Cancel*>(user)->forget(fd);
  return ::close(fd);
}

// Once the connection is made, before the request is sent: check_connection's say.
int on_prereq(void* user, char* peer_ip, char* local_ip, int peer_port, int local_port) {
  auto* t = static_cast<Transfer*>(user);
  const Connection c{peer_ip != nullptr ? peer_ip : "", static_cast<unsigned>(std::max(0, peer_port)),
                     local_ip != nullptr ? local_ip : "", static_cast<unsigned>(std::max(0, local_port))};
  if (t->request->check_connection(c)) return CURL_PREREQFUNC_OK;
  t->untrusted = true;
  return CURL_PREREQFUNC_ABORT;
}

struct EasyDeleter {
  void operator()(CURL* easy) const { curl()->easy_cleanup(easy); }
};
struct ListDeleter {
  void operator()(curl_slist* list) const { curl()->slist_free_all(list); }
};

}  // namespace

Result<void> check_url(std::string_view url) {
  const auto bad = [&](std::string_view why) {
    return make_error(Error::Code::Invalid, fmt::format("'{}': {}", url, why));
  };
  std::string_view rest;
  if (url.starts_with("http://")) {
    rest = url.substr(7);
  } else if (url.starts_with("https://")) {
    rest = url.substr(8);
  } else {
    return bad("expected http://host[:port]/path or https://host[:port]/path");
  }
  if (has_control(url) || url.find(' ') != std::string_view::npos) return bad("it holds spaces or control characters");
  const std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
  if (authority.empty() || authority.front() == ':') return bad("no host");
  // Credentials in a URL end up in logs and process listings: give them as headers instead.
  if (authority.find('@') != std::string_view::npos) return bad("credentials (user@) in the URL are not accepted");
  return {};
}

void Cancel::set() {
  flag_ = true;
  std::lock_guard lock(m_);
  for (const int fd : fds_) ::shutdown(fd, SHUT_RDWR);
}

void Cancel::watch(int fd) {
  std::lock_guard lock(m_);
  fds_.insert(fd);
  if (flag_) ::shutdown(fd, SHUT_RDWR);  // set() came between the socket and this
}

void Cancel::forget(int fd) {
  std::lock_guard lock(m_);
  fds_.erase(fd);
}

namespace {

// A checked url's host ("[::1]" as "::1") and what follows it up to the path ("" or ":8080").
std::pair<std::string_view, std::string_view> host_and_port(std::string_view url) {
  std::string_view rest = url.substr(url.find("://") + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  if (rest.starts_with("[")) {
    const auto close = rest.find(']');
    if (close == std::string_view::npos) return {"", ""};
    return {rest.substr(1, close - 1), rest.substr(close + 1)};
  }
  const auto colon = rest.find(':');
  if (colon == std::string_view::npos) return {rest, ""};
  return {rest.substr(0, colon), rest.substr(colon)};
}

}  // namespace

bool is_loopback_url(std::string_view url) {
  if (!check_url(url).ok()) return false;
  const auto host = host_and_port(url).first;
  if (host == "localhost" || host == "::1") return true;
  in_addr v4{};
  const std::string text(host);
  return ::inet_pton(AF_INET, text.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

std::optional<unsigned> loopback_port(std::string_view url) {
  if (!is_loopback_url(url)) return std::nullopt;
  const auto port = host_and_port(url).second;
  if (port.empty()) return url.starts_with("https://") ? 443U : 80U;
  if (port.size() < 2 || port.size() > 6 || port.front() != ':') return std::nullopt;
  unsigned n = 0;
  for (const char c : port.substr(1)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<unsigned>(c - '0');
  }
  if (n == 0 || n > 65535) return std::nullopt;
  return n;
}

Result<void> available() {
  const auto& c = curl();
  if (!c.ok()) return c.error();
  return {};
}

Session::~Session() { close(); }

void Session::close() {
  if (easy_ != nullptr) curl()->easy_cleanup(static_cast<CURL*>(easy_));
  easy_ = nullptr;
  cancel_ = nullptr;
  checked_ = false;
  ca_file_.clear();
}

Result<Response> perform(const Request& request) {
  TARMAC_TRY(check_url(request.url));
  if (request.method != "GET" && request.method != "POST") {
    return make_error(Error::Code::Invalid, fmt::format("HTTP method {}: only GET and POST", request.method));
  }
  const auto& loaded = curl();
  if (!loaded.ok()) return loaded.error();
  const Curl& c = *loaded;
  // A session's handle (and the connection it keeps) while this request is like its last one; else
  // a new handle, the session's from now on. Every option below is set on each request, or cleared.
  std::unique_ptr<CURL, EasyDeleter> easy;
  CURL* e = nullptr;
  Session* s = request.session;
  const bool fits = s != nullptr && s->easy_ != nullptr && s->cancel_ == request.cancel &&
                    s->checked_ == static_cast<bool>(request.check_connection) && s->ca_file_ == request.ca_file;
  if (fits) {
    e = static_cast<CURL*>(s->easy_);
  } else {
    easy.reset(c.easy_init());
    if (!easy) return make_error(Error::Code::Internal, "curl_easy_init failed");
    e = easy.get();
    if (s != nullptr) {
      if (s->easy_ != nullptr) c.easy_cleanup(static_cast<CURL*>(s->easy_));
      s->easy_ = easy.release();
      s->cancel_ = request.cancel;
      s->checked_ = static_cast<bool>(request.check_connection);
      s->ca_file_ = request.ca_file;
    }
  }
  // A kept handle points at none of this request's memory once perform() returns, however it
  // returns (libcurl reads these only during a transfer; the next request sets them again).
  struct Forget {
    const Curl& c;
    CURL* e;
    bool kept;
    ~Forget() {
      if (!kept) return;
      c.easy_setopt(e, CURLOPT_ERRORBUFFER, static_cast<char*>(nullptr));
      c.easy_setopt(e, CURLOPT_HTTPHEADER, static_cast<curl_slist*>(nullptr));
      c.easy_setopt(e, CURLOPT_POSTFIELDS, static_cast<const char*>(nullptr));
      c.easy_setopt(e, CURLOPT_WRITEDATA, static_cast<void*>(nullptr));
      c.easy_setopt(e, CURLOPT_XFERINFODATA, static_cast<void*>(nullptr));
      c.easy_setopt(e, CURLOPT_PREREQDATA, static_cast<void*>(nullptr));
    }
  } const forget{c, e, s != nullptr};
  std::unique_ptr<curl_slist, ListDeleter> headers;
  std::vector<std::string> all = request.headers;
  // libcurl waits up to a second for "100 Continue" before a body over 1 KiB; no server here sends it.
  if (request.method == "POST") all.emplace_back("Expect:");
  for (const auto& header : all) {
    if (has_control(header) || header.find(':') == std::string::npos) {
      return make_error(Error::Code::Invalid, "an HTTP header must be 'Name: value' on one line");
    }
    curl_slist* grown = c.slist_append(headers.get(), header.c_str());
    if (grown == nullptr) return make_error(Error::Code::Internal, "curl_slist_append failed");
    (void)headers.release();
    headers.reset(grown);
  }
  Transfer transfer;
  transfer.request = &request;
  const long timeout = static_cast<long>(std::max(1LL, request.timeout_ms));
  const long connect_timeout = request.connect_timeout_ms > 0 ? static_cast<long>(request.connect_timeout_ms) : timeout;
  // Options whose setting cannot fail on a libcurl that has them; their codes are not checked.
  c.easy_setopt(e, CURLOPT_URL, request.url.c_str());
  c.easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  c.easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  c.easy_setopt(e, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for DNS timeouts
  c.easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout);
  c.easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_timeout);
  c.easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
  c.easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
  c.easy_setopt(e, CURLOPT_USERAGENT, "tarmac");
  if (!request.ca_file.empty()) c.easy_setopt(e, CURLOPT_CAINFO, request.ca_file.c_str());
  // A proxy from the environment (http_proxy) would be the other end of a loopback request, and
  // check_connection would check it instead of the server.
  c.easy_setopt(e, CURLOPT_NOPROXY, is_loopback_url(request.url) ? "*" : static_cast<const char*>(nullptr));
  c.easy_setopt(e, CURLOPT_HTTPHEADER, headers.get());  // nullptr: none
  if (request.method == "POST") {
    c.easy_setopt(e, CURLOPT_POST, 1L);
    c.easy_setopt(e, CURLOPT_POSTFIELDS, request.body.data());
    c.easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  } else {
    c.easy_setopt(e, CURLOPT_HTTPGET, 1L);
  }
  c.easy_setopt(e, CURLOPT_FORBID_REUSE, s != nullptr ? 0L : 1L);
  c.easy_setopt(e, CURLOPT_WRITEFUNCTION, &on_write);
  c.easy_setopt(e, CURLOPT_WRITEDATA, &transfer);
  c.easy_setopt(e, CURLOPT_XFERINFOFUNCTION, &on_progress);
  c.easy_setopt(e, CURLOPT_XFERINFODATA, &transfer);
  c.easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
  if (request.cancel != nullptr) {
    c.easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, &on_socket);
    c.easy_setopt(e, CURLOPT_SOCKOPTDATA, request.cancel);
    c.easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, &on_close);
    c.easy_setopt(e, CURLOPT_CLOSESOCKETDATA, request.cancel);
  }
  if (request.check_connection) {
    if (c.easy_setopt(e, CURLOPT_PREREQFUNCTION, &on_prereq) != CURLE_OK ||
        c.easy_setopt(e, CURLOPT_PREREQDATA, &transfer) != CURLE_OK) {
      return make_error(Error::Code::Unsupported,
                        "this libcurl cannot check who serves the connection (it needs 7.80 or later): nothing was sent",
                        Failure::Untrusted);
    }
  }
  char detail[CURL_ERROR_SIZE] = {};  // libcurl's own account: "SSL certificate problem: ..."
  c.easy_setopt(e, CURLOPT_ERRORBUFFER, detail);
  const CURLcode rc = c.easy_perform(e);
  if (rc != CURLE_OK && transfer.lingered) {
    Response response;  // whole by the caller's reading: the server only held the connection
    c.easy_getinfo(e, CURLINFO_RESPONSE_CODE, &response.status);
    response.body = std::move(transfer.body);
    return response;
  }
  if (rc != CURLE_OK) {
    if (transfer.too_large) {
      return make_error(Error::Code::Io, fmt::format("the answer is larger than {} bytes", request.max_body_bytes),
                        Failure::Refused);
    }
    if (transfer.stopped) return make_error(Error::Code::Io, "stopped while reading the answer", Failure::Refused);
    if (transfer.untrusted) {
      return make_error(Error::Code::Io, "the process at the other end of the connection is not the server's: nothing "
                                         "was sent",
                        Failure::Untrusted);
    }
    // A cancel shuts the connection down: libcurl sees it lost (or its socket refused) at once.
    if (rc == CURLE_ABORTED_BY_CALLBACK || (request.cancel != nullptr && request.cancel->is_set())) {
      return make_error(Error::Code::Io, "cancelled", Failure::Cancelled);
    }
    if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST) {
      return make_error(Error::Code::Io, detail[0] != '\0' ? std::string(detail) : std::string(c.easy_strerror(rc)),
                        Failure::Unreachable);
    }
    if (rc == CURLE_OPERATION_TIMEDOUT) {
      return make_error(Error::Code::Io, fmt::format("timed out after {} ms", timeout), Failure::Timeout);
    }
    return make_error(Error::Code::Io, detail[0] != '\0' ? std::string(detail) : std::string(c.easy_strerror(rc)),
                      Failure::Connection);
  }
  Response response;
  c.easy_getinfo(e, CURLINFO_RESPONSE_CODE, &response.status);
  response.body = std::move(transfer.body);
  return response;
}

Result<std::string> get(const std::string& url, long long timeout_ms, std::size_t max_bytes) {
  Request r;
  r.method = "GET";
  r.url = url;
  r.timeout_ms = timeout_ms;
  r.max_body_bytes = max_bytes;
  TARMAC_TRY_ASSIGN(Response answer, perform(r));
  if (answer.status != 200) return make_error(Error::Code::Io, fmt::format("{} answered HTTP {}", url, answer.status));
  return std::move(answer.body);
}

}  // namespace tarmac::net
