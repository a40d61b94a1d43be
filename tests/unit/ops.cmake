# Issue 5 (ops + backbone): op harness (ref vs optimized) and backbone tests, plus the
# hidden-state dump tool the pytest parity suite (tests/reference/test_backbone.py) drives.
add_executable(clef_ops_tests
  ${CMAKE_CURRENT_LIST_DIR}/test_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/test_int8_gemm.cc
  ${CMAKE_CURRENT_LIST_DIR}/test_head_ops.cc
)
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/test_backbone.cc)
  target_sources(clef_ops_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_backbone.cc)
endif()
target_link_libraries(clef_ops_tests PRIVATE clef_engine GTest::gtest GTest::gtest_main clef_warnings)
target_compile_definitions(clef_ops_tests PRIVATE CLEF_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set_target_properties(clef_ops_tests PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
gtest_discover_tests(clef_ops_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)

if(EXISTS ${PROJECT_SOURCE_DIR}/src/runtime/backbone_dump.cc)
  add_executable(clef_backbone_dump ${PROJECT_SOURCE_DIR}/src/runtime/backbone_dump_main.cc)
  target_link_libraries(clef_backbone_dump PRIVATE clef_engine clef_warnings)
  set_target_properties(clef_backbone_dump PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endif()
