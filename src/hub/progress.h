// SPDX-License-Identifier: MIT
// `clef pull`'s progress on stderr (docs/MODELS.md "clef pull", Progress): a redrawn block on a
// terminal, plain lines in a log. Internal to the hub layer (hub/pull.cc).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace clef::hub {

/// How progress is shown on stderr.
enum class ProgressStyle {
  kAuto,   ///< a bar when stderr is a terminal, else plain lines
  kBar,    ///< redrawn lines: per file and total bytes, rate, ETA
  kLines,  ///< a plain line every `log_interval_s` seconds and one per verified file
  kNone,   ///< nothing but errors
};

/// One file's progress, written by the worker that fetches it and read by the progress thread.
struct FileProgress {
  std::string path;
  std::atomic<std::int64_t> size{-1};  ///< bytes (-1: unknown)
  std::atomic<std::int64_t> done{0};   ///< bytes present
  std::atomic<std::int64_t> resumed_from{0};
  std::atomic<int> state{0};                      ///< 0 waiting, 1 fetching, 2 done (set after `started`)
  std::chrono::steady_clock::time_point started;  ///< written before state becomes 1
};

/// "1.5 MiB": bytes in binary units, one decimal above bytes.
std::string human_bytes(double bytes);

/// The progress display of one pull: a thread that redraws (kBar) or prints a line every
/// `log_interval_s` seconds (kLines) from the files' counters and `received` (bytes received in
/// this run, for the rate) until finish(); kNone shows nothing. `files` must outlive it.
class PullProgress {
 public:
  PullProgress(ProgressStyle style, double log_interval_s, std::vector<const FileProgress*> files,
               const std::atomic<std::int64_t>& received);
  ~PullProgress();
  PullProgress(const PullProgress&) = delete;
  PullProgress& operator=(const PullProgress&) = delete;

  /// Starts the thread (kBar, kLines).
  void start();
  /// Draws the final state and joins the thread.
  void finish();
  /// Writes "clef pull: LINE" on stderr in kLines style (the bar shows it otherwise).
  void log(const std::string& line);

 private:
  void loop();
  ProgressStyle style_;
  double log_interval_s_;
  std::vector<const FileProgress*> files_;
  const std::atomic<std::int64_t>& received_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::thread thread_;
};

}  // namespace clef::hub
