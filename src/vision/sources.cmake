# Images: data-URL decoding to RGB8 and the exact Qwen2-VL preprocessing.
# Decoders come from Debian: libpng-dev, libjpeg62-turbo-dev, libwebp-dev (scripts/setup.sh).
find_package(PNG REQUIRED)
find_package(JPEG REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(CLEF_WEBP REQUIRED IMPORTED_TARGET libwebp libwebpdemux)
target_sources(clef_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/base64.cc
  ${CMAKE_CURRENT_LIST_DIR}/image.cc
  ${CMAKE_CURRENT_LIST_DIR}/preprocess.cc
  ${CMAKE_CURRENT_LIST_DIR}/request_images.cc
)
# Pillow's and NumPy's arithmetic rounds after every operation: no fused multiply-adds (-march=native
# enables FMA), or a resampled pixel can land one level off.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/preprocess.cc PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
target_link_libraries(clef_engine PRIVATE PNG::PNG JPEG::JPEG PkgConfig::CLEF_WEBP)
