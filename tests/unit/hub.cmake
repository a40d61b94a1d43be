# Models by name (docs/MODELS.md): name parsing, quant matching, file choice and offline
# resolution in a Hugging Face cache laid out on disk. `clef pull` is tested live in tests/hub/.
target_sources(clef_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/test_hub.cc)
target_link_libraries(clef_unit_tests PRIVATE clef_hub)
