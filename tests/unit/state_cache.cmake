# Exact state reuse: the LRU / key unit tests, the engine-level hit/miss tests, and the
# driver that tests/reference/test_state_cache.py and bench/bench_state_cache.py pipe requests through.
target_sources(clef_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_state_cache.cc)
add_executable(clef_cache_driver ${PROJECT_SOURCE_DIR}/tests/tools/cache_driver.cc)
target_link_libraries(clef_cache_driver PRIVATE clef_engine clef_warnings)
set_target_properties(clef_cache_driver PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
