// SPDX-License-Identifier: MIT
#include "core/version.h"

#ifndef CLEF_VERSION
#error "CLEF_VERSION is defined by src/core/CMakeLists.txt from project(VERSION)"
#endif

namespace clef {

const char* const kVersion = CLEF_VERSION;

}  // namespace clef
