# SPDX-License-Identifier: MIT
# Warning and sanitizer flags shared by every clef target.
add_library(clef_warnings INTERFACE)
target_compile_options(clef_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
  -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Woverloaded-virtual
  -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
if(CLEF_WERROR)
  target_compile_options(clef_warnings INTERFACE -Werror)
endif()
if(CLEF_SANITIZE)
  target_compile_options(clef_warnings INTERFACE -fsanitize=${CLEF_SANITIZE} -fno-omit-frame-pointer
                         -fno-sanitize-recover=all)
  target_link_options(clef_warnings INTERFACE -fsanitize=${CLEF_SANITIZE})
endif()
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  # GCC 12 reports false -Wrestrict positives inside libstdc++ for "literal" + std::string chains
  # at -O2/-O3 (GCC bug 105329); the warning is fixed in GCC 13.
  target_compile_options(clef_warnings INTERFACE -Wno-restrict)
endif()
