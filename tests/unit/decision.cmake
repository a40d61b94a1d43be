# Request model, validation, render(): unit tests and the batch driver that the live
# parity tests (tests/reference/test_render_parity.py, test_request_parity.py) pipe JSON through.
target_sources(clef_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/test_render.cc
  ${CMAKE_CURRENT_LIST_DIR}/test_request.cc
  ${CMAKE_CURRENT_LIST_DIR}/test_response_echo.cc
)
add_executable(clef_render_driver ${PROJECT_SOURCE_DIR}/tests/tools/render_driver.cc)
target_link_libraries(clef_render_driver PRIVATE clef_engine clef_warnings)
set_target_properties(clef_render_driver PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)

# The driver of encode_record and the answers (tests/tools/decision_driver.cc, used by
# tests/reference/test_record_parity.py); built once encode_record and the answers are in the engine.
get_target_property(_clef_engine_sources clef_engine SOURCES)
if(EXISTS ${PROJECT_SOURCE_DIR}/tests/tools/decision_driver.cc
   AND _clef_engine_sources MATCHES "decision/record\\.cc" AND _clef_engine_sources MATCHES "decision/answers\\.cc")
  add_executable(clef_decision_driver ${PROJECT_SOURCE_DIR}/tests/tools/decision_driver.cc)
  target_link_libraries(clef_decision_driver PRIVATE clef_engine clef_warnings)
  set_target_properties(clef_decision_driver PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endif()
