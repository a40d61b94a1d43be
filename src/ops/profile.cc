// SPDX-License-Identifier: MIT
#include "ops/profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace clef::ops::prof {
namespace {

struct Entry {
  const char* name;
  double seconds;
  std::int64_t calls;
};

struct Table {
  std::mutex mu;
  std::vector<Entry> rows;
};

Table& table() {
  static Table t;
  return t;
}

bool read_env() noexcept {
  const char* v = std::getenv("CLEF_PROFILE");
  const bool on = v != nullptr && std::strcmp(v, "0") != 0;
  if (on) {
    table();  // constructed before the atexit hook, so it outlives it
    std::atexit(report);
  }
  return on;
}

std::atomic<bool>& switch_state() noexcept {
  static std::atomic<bool> on{read_env()};
  return on;
}

}  // namespace

bool enabled() noexcept { return switch_state().load(std::memory_order_relaxed); }

void set_enabled(bool on) noexcept { switch_state().store(on, std::memory_order_relaxed); }

Totals totals(const char* name) noexcept {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  Totals out;
  for (const Entry& e : t.rows) {
    if (std::strcmp(e.name, name) == 0) {  // the same literal may have another address in another file
      out.seconds += e.seconds;
      out.calls += e.calls;
    }
  }
  return out;
}

double now() noexcept {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void add(const char* name, double seconds) noexcept {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (Entry& e : t.rows) {
    if (e.name == name) {
      e.seconds += seconds;
      ++e.calls;
      return;
    }
  }
  t.rows.push_back({name, seconds, 1});
}

void report() noexcept {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (t.rows.empty()) return;
  std::vector<Entry> rows = t.rows;
  std::sort(rows.begin(), rows.end(), [](const Entry& a, const Entry& b) { return a.seconds > b.seconds; });
  double total = 0.0;
  for (const Entry& e : rows) {
    if (e.name[0] != '>') total += e.seconds;  // '>' marks a scope nested in another
  }
  std::fprintf(stderr, "\nCLEF_PROFILE (wall seconds, summed over calls)\n%-28s %10s %8s %7s\n", "op", "seconds",
               "calls", "share");
  for (const Entry& e : rows) {
    std::fprintf(stderr, "%-28s %10.4f %8lld %6.1f%%\n", e.name, e.seconds, static_cast<long long>(e.calls),
                 total > 0 ? 100.0 * e.seconds / total : 0.0);
  }
  std::fprintf(stderr, "%-28s %10.4f\n", "total", total);
  t.rows.clear();
}

}  // namespace clef::ops::prof
