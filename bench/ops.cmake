# Op micro-benchmarks incl. the GEMM library comparison (oneDNN vs OpenBLAS).
# OpenBLAS is linked only here, as the comparison point; the engine uses oneDNN.
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_library(CLEF_OPENBLAS_LIB NAMES openblas PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread NO_DEFAULT_PATH)
find_path(CLEF_OPENBLAS_INCLUDE cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-pthread NO_DEFAULT_PATH)
if(CLEF_OPENBLAS_LIB AND CLEF_OPENBLAS_INCLUDE)
  add_executable(clef_bench_ops ${CMAKE_CURRENT_LIST_DIR}/bench_ops.cc)
  target_include_directories(clef_bench_ops SYSTEM PRIVATE ${CLEF_OPENBLAS_INCLUDE})
  target_link_libraries(clef_bench_ops PRIVATE clef_engine ${CLEF_OPENBLAS_LIB} OpenMP::OpenMP_CXX clef_warnings)
  set_target_properties(clef_bench_ops PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
else()
  message(STATUS "clef_bench_ops: OpenBLAS (openblas-pthread) not found, benchmark not built")
endif()
