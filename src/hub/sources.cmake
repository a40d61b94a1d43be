# Models by name (docs/MODELS.md): the Hugging Face cache (resolution, file choice) and `clef pull`
# (HTTP through Debian's libcurl). A library of its own so that the engine never links libcurl.
find_package(CURL REQUIRED)
add_library(clef_hub
  ${CMAKE_CURRENT_LIST_DIR}/cache.cc
  ${CMAKE_CURRENT_LIST_DIR}/pull.cc
)
target_include_directories(clef_hub PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(clef_hub
  PUBLIC clef_engine
  PRIVATE CURL::libcurl OpenSSL::Crypto Threads::Threads clef_warnings)
