// SPDX-License-Identifier: MIT
// `clef pull`'s progress display (hub/progress.h).
#include "hub/progress.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace clef::hub {

namespace {

using Clock = std::chrono::steady_clock;

std::string human_eta(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "--:--";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

}  // namespace

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

PullProgress::PullProgress(ProgressStyle style, double log_interval_s, std::vector<const FileProgress*> files,
                           const std::atomic<std::int64_t>& received)
    : style_(style), log_interval_s_(log_interval_s), files_(std::move(files)), received_(received) {}

PullProgress::~PullProgress() { finish(); }

void PullProgress::start() {
  if (style_ == ProgressStyle::kBar || style_ == ProgressStyle::kLines) thread_ = std::thread([this] { loop(); });
}

void PullProgress::finish() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void PullProgress::log(const std::string& line) {
  if (style_ != ProgressStyle::kLines) return;  // none: nothing; the bar shows it
  std::lock_guard<std::mutex> lock(mu_);
  std::fprintf(stderr, "clef pull: %s\n", line.c_str());
  std::fflush(stderr);
}

void PullProgress::loop() {
  const auto start = Clock::now();
  int drawn = 0;
  auto last_line = start;
  std::int64_t last_bytes = 0;
  auto last_tick = start;
  double rate = 0;
  std::int64_t total = 0;
  for (const auto* f : files_) total += std::max<std::int64_t>(0, f->size.load());
  while (true) {
    const bool final = stop_.load();
    const auto now = Clock::now();
    std::int64_t done = 0;
    int finished = 0;
    for (const auto* f : files_) {
      done += std::max<std::int64_t>(0, f->done.load());
      finished += f->state.load() == 2 ? 1 : 0;
    }
    const double dt = std::chrono::duration<double>(now - last_tick).count();
    if (dt >= 0.5) {
      const double inst = static_cast<double>(received_.load() - last_bytes) / dt;
      rate = rate == 0 ? inst : 0.7 * rate + 0.3 * inst;
      last_bytes = received_.load();
      last_tick = now;
    }
    const double eta = rate > 0 ? static_cast<double>(total - done) / rate : -1;
    const std::string summary =
        std::to_string(finished) + "/" + std::to_string(files_.size()) + " files, " +
        human_bytes(static_cast<double>(done)) + " / " + human_bytes(static_cast<double>(total)) +
        (total > 0 ? " (" + std::to_string(done * 100 / std::max<std::int64_t>(1, total)) + "%)" : "") + ", " +
        human_bytes(rate) + "/s, ETA " + human_eta(eta);
    if (style_ == ProgressStyle::kBar) {
      std::string out;
      if (drawn > 0) out += "\x1b[" + std::to_string(drawn) + "F";
      int lines = 0;
      for (const auto* f : files_) {
        if (f->state.load() != 1) continue;
        const double el = std::chrono::duration<double>(now - f->started).count();
        const double fr = el > 0 ? static_cast<double>(f->done.load() - f->resumed_from.load()) / el : 0;
        const std::int64_t fsize = f->size.load();
        const std::int64_t fs_ = std::max<std::int64_t>(1, fsize);
        const int pct = static_cast<int>(std::clamp<std::int64_t>(f->done.load() * 100 / fs_, 0, 100));
        std::string bar(20, ' ');
        for (int i = 0; i < pct / 5; ++i) bar[static_cast<std::size_t>(i)] = '#';
        std::string shown = f->path.size() > 32 ? "..." + f->path.substr(f->path.size() - 29) : f->path;
        char line[256];
        std::snprintf(line, sizeof line, "\x1b[2K%-32s [%s] %3d%% %s / %s %s/s ETA %s\n", shown.c_str(), bar.c_str(),
                      pct, human_bytes(static_cast<double>(f->done.load())).c_str(),
                      human_bytes(static_cast<double>(fsize)).c_str(), human_bytes(fr).c_str(),
                      human_eta(fr > 0 ? static_cast<double>(fsize - f->done.load()) / fr : -1).c_str());
        out += line;
        ++lines;
      }
      out += "\x1b[2Ktotal: " + summary + "\n";
      ++lines;
      // Clear lines left from a taller previous frame.
      for (int i = lines; i < drawn; ++i) out += "\x1b[2K\n";
      const int extra = std::max(0, drawn - lines);
      if (extra > 0) out += "\x1b[" + std::to_string(extra) + "F";
      drawn = lines;
      std::lock_guard<std::mutex> lock(mu_);
      std::fputs(out.c_str(), stderr);
      std::fflush(stderr);
    } else if (style_ == ProgressStyle::kLines) {
      if (final || std::chrono::duration<double>(now - last_line).count() >= log_interval_s_) {
        last_line = now;
        std::lock_guard<std::mutex> lock(mu_);
        std::fprintf(stderr, "clef pull: %s\n", summary.c_str());
        std::fflush(stderr);
      }
    }
    if (final) break;
    for (int i = 0; i < 5 && !stop_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace clef::hub
