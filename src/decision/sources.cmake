# SystemOne request model, validation and Python-exact render().
target_sources(clef_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/request_error.cc
  ${CMAKE_CURRENT_LIST_DIR}/json_value.cc
  ${CMAKE_CURRENT_LIST_DIR}/render.cc
  ${CMAKE_CURRENT_LIST_DIR}/request.cc
)
