// SPDX-License-Identifier: MIT
// Per-op wall-clock profile of the backbone (no hardware counters needed). Off unless the
// environment variable CLEF_PROFILE is set (to anything but "0"); then every CLEF_PROF_SCOPE
// accumulates its time, and the table (seconds, calls, share) is printed to stderr at exit.
// Names starting with '>' are nested inside another scope and left out of the total.
// Scopes are entered only from the engine thread (outside parallel regions), so the cost when
// disabled is one predictable branch per op call.
#pragma once

#include <cstdint>

namespace clef::ops::prof {

/// True when CLEF_PROFILE is set (read once), or after set_enabled(true).
bool enabled() noexcept;

/// Turns the profile on or off from now on (tests; the environment variable is the user's switch).
void set_enabled(bool on) noexcept;

/// Seconds and calls accumulated so far under `name` (compared as a string); zeros when never timed.
struct Totals {
  double seconds = 0.0;
  std::int64_t calls = 0;
};
Totals totals(const char* name) noexcept;

/// Adds `seconds` to the counter named `name` (a string literal; the pointer is the key).
void add(const char* name, double seconds) noexcept;

/// Monotonic seconds.
double now() noexcept;

/// Prints the accumulated table to stderr and clears it.
void report() noexcept;

class Scope {
 public:
  explicit Scope(const char* name) noexcept : name_(enabled() ? name : nullptr), t0_(name_ ? now() : 0.0) {}
  ~Scope() {
    if (name_ != nullptr) add(name_, now() - t0_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  double t0_;
};

}  // namespace clef::ops::prof

#define CLEF_PROF_CAT2(a, b) a##b
#define CLEF_PROF_CAT(a, b) CLEF_PROF_CAT2(a, b)
/// Times the rest of the enclosing block under `name` (a string literal).
#define CLEF_PROF_SCOPE(name) ::clef::ops::prof::Scope CLEF_PROF_CAT(clef_prof_, __LINE__)(name)
