# libFuzzer target over the SystemOne request parser + validator; included from
# tests/fuzz/CMakeLists.txt. Seeds: one request body per file, e.g. from tests/data/requests.
add_executable(fuzz_request ${CMAKE_CURRENT_LIST_DIR}/fuzz_request.cc)
target_link_libraries(fuzz_request PRIVATE clef_engine)
target_link_options(fuzz_request PRIVATE -fsanitize=fuzzer,address,undefined)
