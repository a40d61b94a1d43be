# Ops, nn blocks, the Qwen3.5 text model and the backbone runtime (issue 5).
# GEMM: oneDNN (Debian libdnnl, OpenMP runtime); our own parallel loops use the same OpenMP.
find_package(dnnl REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)

target_sources(clef_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/parallel.cc
  ${CMAKE_CURRENT_LIST_DIR}/profile.cc
  ${CMAKE_CURRENT_LIST_DIR}/rope_freq.cc
  ${CMAKE_CURRENT_LIST_DIR}/ref/ref_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/ref/gdn.cc
  ${CMAKE_CURRENT_LIST_DIR}/ref/gemm.cc
  ${CMAKE_CURRENT_LIST_DIR}/ref/vision_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/elementwise.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/conv1d.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/gdn.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/attention.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/vision_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu/gemm_onednn.cc
)
target_link_libraries(clef_engine PRIVATE DNNL::dnnl OpenMP::OpenMP_CXX)

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
