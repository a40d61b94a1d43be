# Tokenizer throughput benchmark vs the PyPI `tokenizers`. Not a test: run by hand,
#   build/release/bin/clef_bench_tokenizer --model DIR [--mb 50]
add_executable(clef_bench_tokenizer ${CMAKE_CURRENT_LIST_DIR}/bench_tokenizer.cc)
target_link_libraries(clef_bench_tokenizer PRIVATE clef_engine clef_warnings)
target_compile_definitions(clef_bench_tokenizer PRIVATE CLEF_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set_target_properties(clef_bench_tokenizer PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
