# `clef serve`: the HTTP layer, its scheduler and metrics. A library of its own
# so that the engine (clef_engine) never links the HTTP code. Boost.Beast / Boost.Asio are
# header-only (Debian libboost1.74-dev); request bodies are decoded with zlib and libbrotli.
find_package(PkgConfig REQUIRED)
find_package(Boost 1.74 REQUIRED)
pkg_check_modules(CLEF_ZLIB REQUIRED IMPORTED_TARGET GLOBAL zlib)
pkg_check_modules(CLEF_BROTLIDEC REQUIRED IMPORTED_TARGET libbrotlidec)
add_library(clef_server
  ${CMAKE_CURRENT_LIST_DIR}/routes.cc
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cc
  ${CMAKE_CURRENT_LIST_DIR}/scheduler.cc
  ${CMAKE_CURRENT_LIST_DIR}/http_rules.cc
  ${CMAKE_CURRENT_LIST_DIR}/body_decoder.cc
  ${CMAKE_CURRENT_LIST_DIR}/readiness.cc
  ${CMAKE_CURRENT_LIST_DIR}/reply.cc
  ${CMAKE_CURRENT_LIST_DIR}/request_gate.cc
  ${CMAKE_CURRENT_LIST_DIR}/route_key.cc
  ${CMAKE_CURRENT_LIST_DIR}/handlers.cc
  ${CMAKE_CURRENT_LIST_DIR}/connection.cc
  ${CMAKE_CURRENT_LIST_DIR}/server.cc
)
target_include_directories(clef_server PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_compile_definitions(clef_server PRIVATE BOOST_ASIO_NO_DEPRECATED BOOST_BEAST_USE_STD_STRING_VIEW)
target_link_libraries(clef_server PUBLIC clef_engine
  PRIVATE Boost::headers PkgConfig::CLEF_ZLIB PkgConfig::CLEF_BROTLIDEC Threads::Threads clef_warnings)
# GCC 12 with -fsanitize=address (asan preset) reports a false -Wmaybe-uninitialized inside
# Beast 1.74's parser (a boost::optional read in basic_parser.hpp); not our code, so not with -Werror.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/connection.cc PROPERTIES
  COMPILE_OPTIONS "$<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>")
