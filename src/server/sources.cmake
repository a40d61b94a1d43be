# `clef serve` (issue 6): the HTTP layer, its scheduler and metrics. A library of its own so that
# the engine (clef_engine) never links the HTTP library. cpp-httplib comes from Debian
# (libcpp-httplib-dev, 0.11.4, a compiled library plus its header).
find_package(PkgConfig REQUIRED)
pkg_check_modules(CPPHTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
add_library(clef_server
  ${CMAKE_CURRENT_LIST_DIR}/routes.cc
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cc
  ${CMAKE_CURRENT_LIST_DIR}/scheduler.cc
  ${CMAKE_CURRENT_LIST_DIR}/readiness.cc
  ${CMAKE_CURRENT_LIST_DIR}/server.cc
)
target_include_directories(clef_server PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(clef_server PUBLIC clef_engine PRIVATE PkgConfig::CPPHTTPLIB Threads::Threads clef_warnings)
