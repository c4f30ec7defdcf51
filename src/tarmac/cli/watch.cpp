#include "tarmac/cli/watch.hpp"

#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <memory>
#include <thread>

#include "tarmac/cli/app.hpp"
#include "tarmac/cli/status_source.hpp"
#include "tarmac/cli/status.hpp"
#include "tarmac/util/escape.hpp"

namespace tarmac::cli {

namespace {

volatile std::sig_atomic_t g_watch_stop = 0;

void on_watch_signal(int /*signo*/) { g_watch_stop = 1; }

// Installs the stop handlers for the life of the watch and puts the old ones back after.
class WatchSignals {
 public:
  WatchSignals() {
    g_watch_stop = 0;
    struct sigaction sa {};
    sa.sa_handler = on_watch_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  WatchSignals(const WatchSignals&) = delete;
  WatchSignals& operator=(const WatchSignals&) = delete;
  ~WatchSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

// The alternate screen with a hidden cursor while watching a terminal; restored on every exit
// path (Ctrl-C included), so the shell gets its screen back as it was.
class Screen {
 public:
  explicit Screen(bool in_place) : in_place_(in_place) {
    if (in_place_) std::fputs("\033[?1049h\033[?25l", stdout);
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;
  ~Screen() {
    if (in_place_) std::fputs("\033[?25h\033[?1049l", stdout);
    std::fflush(stdout);
  }

  // Draws a frame over the previous one: home, each line cleared to its end, the rest erased.
  // Nothing is cleared before drawing, so the screen never flashes empty.
  void draw(const std::string& frame) const {
    if (!in_place_) {
      std::fputs(frame.c_str(), stdout);
      std::fputs("\n", stdout);
      std::fflush(stdout);
      return;
    }
    std::fputs(detail::in_place_frame(frame).c_str(), stdout);
    std::fflush(stdout);
  }

 private:
  bool in_place_;
};

struct WatchOptions {
  double interval_s = 1.0;
  long long count = 0;  // 0: until interrupted
  StatusOptions status;
};

int run_watch(const GlobalOptions& global, WatchOptions options) {
  if (!resolve_thresholds(global, options.status)) return kExitUsage;
  StatusSource source(global, options.status.thresholds, options.status.agent_socket, options.status.leases,
                      global.json ? gpu::ValueGroups::all() : kTableValues);
  const bool tty = isatty(STDOUT_FILENO) != 0;
  const bool color = use_color(global, stdout);
  WatchSignals signals;
  Screen screen(tty && !global.json);
  const auto cuda_visible = detail::env("CUDA_VISIBLE_DEVICES");
  const auto cuda_order = detail::env("CUDA_DEVICE_ORDER");
  const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(options.interval_s));
  auto next = std::chrono::steady_clock::now();
  for (long long frame = 0; g_watch_stop == 0 && (options.count == 0 || frame < options.count); ++frame) {
    const auto view = source.read();
    if (!view) return kExitCouldNotLook;
    if (global.json) {
      // One JSON object per line: a stream that tools read as NDJSON.
      fmt::print("{}\n", util::json_text(detail::frame_json(*view, cuda_visible, cuda_order)));
      std::fflush(stdout);
    } else {
      screen.draw(detail::render_frame(*view, color, options.interval_s));
    }
    next += interval;
    // Sleep in short steps so that Ctrl-C ends the watch at once; skip frames that fell behind.
    while (g_watch_stop == 0 && std::chrono::steady_clock::now() < next &&
           (options.count == 0 || frame + 1 < options.count)) {
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          next - std::chrono::steady_clock::now(), std::chrono::milliseconds(50)));
    }
    if (std::chrono::steady_clock::now() > next + interval) next = std::chrono::steady_clock::now();
  }
  return kExitOk;
}

}  // namespace

namespace detail {

std::string in_place_frame(const std::string& frame) {
  std::string out = "\033[H";
  std::size_t start = 0;
  while (start < frame.size()) {
    const std::size_t end = frame.find('\n', start);
    const std::size_t stop = end == std::string::npos ? frame.size() : end;
    out.append(frame, start, stop - start);
    out += "\033[K\n";
    start = stop + 1;
  }
  out += "\033[J";
  return out;
}

std::string render_frame(const gpu::Snapshot& snap, const gpu::ActivityThresholds& thresholds, bool color,
                         double interval_s) {
  return render_frame(view_of(snap, thresholds), color, interval_s);
}

std::string render_frame(const StatusView& view, bool color, double interval_s) {
  char* buffer = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  if (out == nullptr) return {};
  fmt::print(out, "Every {:g}s: tarmac status\n", interval_s);
  print_status(out, view, color);
  print_cuda_visibility(out, view.snapshot, color);
  std::fclose(out);
  std::string frame(buffer, size);
  std::free(buffer);
  return frame;
}

nlohmann::json frame_json(const StatusView& view, const std::optional<std::string>& cuda_visible,
                          const std::optional<std::string>& cuda_order) {
  return status_json(view, cuda_visible, cuda_order);
}

}  // namespace detail

void add_watch_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto* cmd = app.add_subcommand("watch", "Status redrawn in place every few seconds (Ctrl-C to stop)");
  auto options = std::make_shared<WatchOptions>();
  cmd->add_option("-n,--interval", options->interval_s, "Seconds between refreshes (default 1, at least 0.1)")
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("-c,--count", options->count, "Stop after this many refreshes (default: until interrupted)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--direct", options->status.direct, "Read NVML here even when an agent runs (see status --direct)");
  cmd->callback([&global, &exit_code, options] { exit_code = run_watch(global, *options); });
}

}  // namespace tarmac::cli
