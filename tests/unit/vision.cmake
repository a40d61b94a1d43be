# Images: unit tests of decoding and preprocessing, and the driver that the
# live parity test tests/reference/test_vision_preprocess.py runs against transformers + Pillow.
target_sources(clef_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_vision.cc)
add_executable(clef_image_driver ${PROJECT_SOURCE_DIR}/tests/tools/image_driver.cc)
target_link_libraries(clef_image_driver PRIVATE clef_engine clef_warnings)
set_target_properties(clef_image_driver PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
