# Qwen3.5 vision tower and M-RoPE positions (requests with images).
target_sources(clef_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/vision_tower.cc
  ${CMAKE_CURRENT_LIST_DIR}/mrope_positions.cc
)
