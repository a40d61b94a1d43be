// SPDX-License-Identifier: MIT
#include "line_reader.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace clef::cli {

bool LineReader::next(std::string& line, bool& too_long, const char* what) {
  line.clear();
  too_long = false;
  bool any = false;
  for (;;) {
    if (pos_ == len_) {
      ssize_t got = 0;
      do {
        got = ::read(::fileno(f_), buf_, sizeof buf_);
      } while (got < 0 && errno == EINTR);
      if (got < 0) throw IoError(std::string("cannot read ") + what + ": " + errno_message(errno));
      len_ = static_cast<std::size_t>(got);
      pos_ = 0;
      if (len_ == 0) {
        terminated_ = false;
        return any;
      }
    }
    any = true;
    const char* start = buf_ + pos_;
    const void* nl = std::memchr(start, '\n', len_ - pos_);
    const std::size_t take = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - start) : len_ - pos_;
    bytes_ += take + (nl ? 1 : 0);
    if (!too_long) {
      if (line.size() + take > max_line_) {
        too_long = true;
        line.clear();
        line.shrink_to_fit();
      } else {
        line.append(start, take);
      }
    }
    pos_ += take + (nl ? 1 : 0);
    if (nl) {
      terminated_ = true;
      return true;
    }
  }
}

}  // namespace clef::cli
