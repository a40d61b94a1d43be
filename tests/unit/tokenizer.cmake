# Tokenizer unit tests and the batch driver used by the live parity tests.
target_sources(clef_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer.cc
)
add_executable(clef_tokenizer_batch ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_batch_tool.cc)
target_link_libraries(clef_tokenizer_batch PRIVATE clef_engine clef_warnings)
set_target_properties(clef_tokenizer_batch PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
