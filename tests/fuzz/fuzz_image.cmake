# libFuzzer target over image decoding + preprocessing; included from tests/fuzz/CMakeLists.txt.
# Seeds: small PNG/JPEG/WebP files (tests/fuzz/make_image_seeds.py).
add_executable(fuzz_image ${CMAKE_CURRENT_LIST_DIR}/fuzz_image.cc)
target_link_libraries(fuzz_image PRIVATE clef_engine)
target_link_options(fuzz_image PRIVATE -fsanitize=fuzzer,address,undefined)
