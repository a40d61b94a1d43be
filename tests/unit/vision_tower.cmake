# Images: vision ops (ref vs optimized), the vision tower and M-RoPE positions, and the
# driver the live parity suite (tests/reference/test_vision_tower.py) and
# bench/bench_vision_tower.py run.
add_executable(clef_vision_tests
  ${CMAKE_CURRENT_LIST_DIR}/test_vision_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/test_mrope_positions.cc
  ${CMAKE_CURRENT_LIST_DIR}/test_vision_tower.cc
)
target_link_libraries(clef_vision_tests PRIVATE clef_engine GTest::gtest GTest::gtest_main clef_warnings)
target_compile_definitions(clef_vision_tests PRIVATE CLEF_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set_target_properties(clef_vision_tests PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
gtest_discover_tests(clef_vision_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)

add_executable(clef_vision_driver ${PROJECT_SOURCE_DIR}/tests/tools/vision_driver.cc)
target_link_libraries(clef_vision_driver PRIVATE clef_engine clef_warnings)
set_target_properties(clef_vision_driver PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
