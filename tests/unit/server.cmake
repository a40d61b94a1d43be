# `clef serve` (issue 6): route table, metrics exposition and the scheduler (on the tiny model).
# The HTTP layer itself is tested live in tests/server/.
target_sources(clef_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_server.cc)
target_link_libraries(clef_unit_tests PRIVATE clef_server)
