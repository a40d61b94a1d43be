# Ops, nn blocks, the Qwen3.5 text model and the backbone runtime (issue 5).
# GEMM: oneDNN (Debian libdnnl, OpenMP runtime); our own parallel loops use the same OpenMP.
# Kernels: Google Highway (Debian libhwy-dev) compiles each src/ops/cpu kernel file once per x86-64
# target and dispatches at run time (ops/isa.h). The build itself targets the plain x86-64
# baseline (no -march), so one binary runs on every x86-64 CPU.
find_package(dnnl REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(hwy REQUIRED)

target_sources(clef_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/parallel.cc
  ${CMAKE_CURRENT_LIST_DIR}/profile.cc
  ${CMAKE_CURRENT_LIST_DIR}/rope_freq.cc
  ${CMAKE_CURRENT_LIST_DIR}/ref/ref_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/ref/gdn.cc
  ${CMAKE_CURRENT_LIST_DIR}/ref/gemm.cc
  ${CMAKE_CURRENT_LIST_DIR}/ref/int8_gemm.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/int8_gemm.cc
  ${CMAKE_CURRENT_LIST_DIR}/ref/vision_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/ref/head_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/elementwise.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/conv1d.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/gdn.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/attention.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/vision_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/head_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/gemm_onednn.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/isa.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/peak.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/convert.cc
)
# Targets compiled into every kernel file: SCALAR (baseline), AVX2, AVX3 (AVX-512) and AVX3_DL
# (Ice Lake / Zen 4 set; its bf16 kernels add the avx512bf16 attribute). SSSE3/SSE4 are left out:
# their masked loads/stores touch whole vectors (ops/isa.h).
target_compile_definitions(clef_engine PRIVATE HWY_WANT_AVX3_DL "HWY_DISABLED_TARGETS=(HWY_SSSE3|HWY_SSE4)")
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 15)
  # clang 14 (the fuzz preset's compiler) crashes in its backend on the AVX-512 copies ("Do not know
  # how to split the result of this operator"): such builds get the baseline kernels only.
  message(STATUS "clef: clang ${CMAKE_CXX_COMPILER_VERSION}: kernels compiled for the baseline level only")
  target_compile_definitions(clef_engine PRIVATE HWY_COMPILE_ONLY_STATIC CLEF_INT8_SCALAR_ONLY)
endif()
target_link_libraries(clef_engine PRIVATE DNNL::dnnl OpenMP::OpenMP_CXX hwy::hwy)
# GCC notes that vector-typed returns of the per-target inline helpers would change the ABI
# between targets; they never cross a target boundary (all internal, inlined per target).
set_source_files_properties(
  ${CMAKE_CURRENT_LIST_DIR}/cpu/elementwise.cc ${CMAKE_CURRENT_LIST_DIR}/cpu/conv1d.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/gdn.cc ${CMAKE_CURRENT_LIST_DIR}/cpu/attention.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/vision_ops.cc ${CMAKE_CURRENT_LIST_DIR}/cpu/peak.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/convert.cc
  PROPERTIES COMPILE_OPTIONS "-Wno-psabi")
# The joint head's ops fix their summation order (ops/head_ops.h): no multiply-add may be fused on
# any target (GCC contracts a * b + c by default in C++), so every level gives the baseline's bits.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/cpu/head_ops.cc
  PROPERTIES COMPILE_OPTIONS "-Wno-psabi;-ffp-contract=off")
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/ref/head_ops.cc PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
# The int8 kernels: register tiles are arrays sized by int template parameters (sign-conversion
# noise), and GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized inside _mm512_cvtph_ps.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/cpu/int8_gemm.cc
  PROPERTIES COMPILE_OPTIONS "-Wno-psabi;-Wno-sign-conversion;-Wno-maybe-uninitialized")

target_sources(clef_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/../nn/state.cc
  ${CMAKE_CURRENT_LIST_DIR}/../nn/linear.cc
  ${CMAKE_CURRENT_LIST_DIR}/../nn/mlp.cc
  ${CMAKE_CURRENT_LIST_DIR}/../nn/gated_deltanet.cc
  ${CMAKE_CURRENT_LIST_DIR}/../nn/attention.cc
  ${CMAKE_CURRENT_LIST_DIR}/../models/qwen35/text_model.cc
  ${CMAKE_CURRENT_LIST_DIR}/../runtime/backbone.cc
  ${CMAKE_CURRENT_LIST_DIR}/../runtime/backbone_dump.cc
)
