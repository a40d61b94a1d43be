# `clef serve`: route table, metrics exposition and the scheduler (on the tiny model); header
# rules, the request gate, the routing key and the bounded body decoder. The HTTP layer itself is tested live in
# tests/server/.
target_sources(clef_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_server.cc
                                       ${CMAKE_CURRENT_LIST_DIR}/test_http_rules.cc
                                       ${CMAKE_CURRENT_LIST_DIR}/test_request_gate.cc)
pkg_check_modules(CLEF_BROTLIENC REQUIRED IMPORTED_TARGET libbrotlienc)
target_link_libraries(clef_unit_tests PRIVATE clef_server PkgConfig::CLEF_ZLIB PkgConfig::CLEF_BROTLIENC)
