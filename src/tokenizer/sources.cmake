# The tokenizer: registered into clef_engine by src/CMakeLists.txt.
target_sources(clef_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unicode.cc
  ${CMAKE_CURRENT_LIST_DIR}/pretokenizer.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_load.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenize_command.cc
)
