// SPDX-License-Identifier: MIT
// The text and JSON reports of `clef inspect` (and the MCP tool model_info): the release's
// configuration, the parameter counts and memory estimates of runtime/inspect.h's ModelSummary,
// and this machine's kernel level and GEMM library.
#include "inspect_report.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/json_reader.h"
#include "core/paths.h"
#include "io/gguf.h"
#include "ops/gemm.h"
#include "ops/isa.h"

namespace clef::cli {
namespace {

/// Tensor count per ggml type name of a GGUF file, in the order types first occur.
std::vector<std::pair<std::string, std::int64_t>> gguf_tensor_type_counts(const GgufFile& g) {
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (const GgufTensorInfo& t : g.header().tensors) {
    const std::string name = ggml_type_name(t.type);
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == name; });
    if (it == out.end()) {
      out.emplace_back(name, 1);
    } else {
      ++it->second;
    }
  }
  return out;
}

nlohmann::ordered_json gguf_tensor_types(const GgufFile& g) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [type, count] : gguf_tensor_type_counts(g)) j[type] = count;
  return j;
}

std::string gguf_tensor_types_text(const GgufFile& g) {
  std::string out = std::to_string(g.header().tensors.size()) + ":";
  for (const auto& [type, count] : gguf_tensor_type_counts(g)) out += " " + std::to_string(count) + " " + type;
  return out;
}

/// Bytes of the head's fp32 copy (a clef-layout GGUF's head, dequantized at load).
std::uint64_t head_f32_bytes(const ReleaseFolder& r) {
  std::uint64_t b = 0;
  for (const auto& [type, bytes] : r.head_weights->bytes_by_dtype()) b += bytes;
  return b;
}

std::string human_count(std::int64_t v) {
  char buf[64];
  const double d = static_cast<double>(v);
  if (v >= 1'000'000'000) std::snprintf(buf, sizeof buf, "%.3fB", d / 1e9);
  else if (v >= 1'000'000) std::snprintf(buf, sizeof buf, "%.2fM", d / 1e6);
  else if (v >= 1'000) std::snprintf(buf, sizeof buf, "%.1fK", d / 1e3);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  return buf;
}

std::string human_bytes(std::uint64_t b) {
  char buf[64];
  const double d = static_cast<double>(b);
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", d / static_cast<double>(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", d / static_cast<double>(1ull << 20));
  else if (b >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", d / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

std::string dtype_mix(const std::map<std::string, std::uint64_t>& by) {
  std::string s;
  for (const auto& [k, v] : by) {
    if (!s.empty()) s += ", ";
    s += k + " " + human_bytes(v);
  }
  return s;
}

}  // namespace

std::string format_inspect_report(const ReleaseFolder& r, const ModelSummary& s, std::int64_t chunk,
                                  std::int64_t context) {
  const auto& c = r.config;
  const auto& t = c.text;
  std::ostringstream o;
  o << "model        " << r.model_name << (r.random_weights ? "  (RANDOM WEIGHTS: answers are meaningless)" : "")
    << "\nfolder       " << r.dir;
  if (!r.gguf.empty()) {
    o << "\ngguf         " << std::filesystem::path(r.gguf).filename().string() << ": GGUF v"
      << r.weights->gguf()->header().version << ", architecture " << r.gguf_info.architecture
      << (r.gguf_info.name.empty() ? "" : ", name \"" + printable(r.gguf_info.name) + "\"") << "\n  tokenizer        "
      << (r.tokenizer_source == "tokenizer.json" ? "tokenizer.json beside the GGUF (it wins over the GGUF metadata)"
                                                 : "GGUF metadata (tokenizer.ggml.*)")
      << "\n  layout           " << r.gguf_info.layout
      << (r.gguf_info.layout == "clef" ? " (llama.cpp's Clef conversion: backbone and head in one file)"
                                       : " (llama.cpp's Qwen3.5 backbone; the head beside it)")
      << "\n  tensors          " << gguf_tensor_types_text(*r.weights->gguf())
      << (r.gguf_info.layout == "clef"
              ? "\n  joint head       inside the GGUF (clef.decision.*, decision.* / dec.blk.* tensors), dequantized "
                "to "
                "fp32 at load: " +
                    human_bytes(head_f32_bytes(r))
              : std::string(
                    "\n  joint head       joint_head.safetensors + joint_head_config.json beside the GGUF (llama.cpp's "
                    "Qwen3.5 converter writes no head)"))
      << "\n  vision           "
      << (r.mmproj.empty()
              ? std::string("none: text-only (llama.cpp writes the vision tower to a separate mmproj file; give it "
                            "with --mmproj)")
              : "the projector " + printable(std::filesystem::path(r.mmproj).filename().string()) + " (" +
                    r.mmproj_info->projector_type + "; tensors " + gguf_tensor_types_text(*r.vision_weights->gguf()) +
                    "; block-type tensors and the patch embedding as fp32 copies)");
  }
  o << "\narchitecture " << (c.architectures.empty() ? "?" : c.architectures[0]) << " (model_type " << c.model_type
    << ", " << (c.composite ? "composite text+vision config" : "text-only config") << ")\n\n";
  o << "backbone     Qwen3.5: hidden " << t.hidden_size << ", " << t.num_hidden_layers << " layers, MLP "
    << t.intermediate_size << ", vocab " << t.vocab_size
    << (r.model.text.tied ? " (tied lm_head)" : " (untied lm_head)") << "\n  full attention   " << t.num_attention_heads
    << " q heads / " << t.num_key_value_heads << " kv heads x " << t.head_dim << ", output gate, rotary "
    << t.rotary_dim() << " dims, theta " << t.rope_theta << ", M-RoPE [" << t.mrope_section[0] << ","
    << t.mrope_section[1] << "," << t.mrope_section[2] << "] interleaved\n  gated deltanet   " << t.linear_num_key_heads
    << " k heads / " << t.linear_num_value_heads << " v heads, dk " << t.linear_key_head_dim << ", dv "
    << t.linear_value_head_dim << ", conv " << t.linear_conv_kernel_dim << "\n  layer pattern    ";
  for (std::size_t i = 0; i < t.layer_types.size(); ++i)
    o << (t.layer_types[i] == LayerType::kFullAttention ? 'F' : 'L');
  o << "   (L = Gated DeltaNet x" << t.count(LayerType::kLinearAttention) << ", F = full attention x"
    << t.count(LayerType::kFullAttention) << ": layers";
  for (std::size_t i = 0; i < t.layer_types.size(); ++i) {
    if (t.layer_types[i] == LayerType::kFullAttention) o << ' ' << i;
  }
  o << ")\n  per layer        Gated DeltaNet " << human_count(s.linear_layer_params) << ", full attention "
    << human_count(s.full_layer_params) << " params\n";
  for (const auto& [k, v] : s.text_blocks) o << "    " << k << ": " << human_count(v) << "\n";
  o << "  text params      " << human_count(s.text_params) << " (" << s.text_params << ", including embeddings)\n";
  if (c.vision) {
    const auto& v = *c.vision;
    o << "\nvision tower  depth " << v.depth << ", hidden " << v.hidden_size << ", " << v.num_heads << " heads, MLP "
      << v.intermediate_size << ", patch " << v.patch_size << ", merge " << v.spatial_merge_size << ", out "
      << v.out_hidden_size << "\n";
    for (const auto& [k, x] : s.vision_blocks) o << "    " << k << ": " << human_count(x) << "\n";
    o << "  vision params    " << human_count(s.vision_params) << " (" << s.vision_params << ")\n";
  }
  const auto& h = r.head_config;
  o << "\njoint head   hidden " << h.hidden_size << ", width " << h.width << ", " << h.routing_layers << " routing + "
    << h.layers << " field layers, " << h.heads << " heads, feed-forward " << h.feedforward << "\n";
  for (const auto& [k, v] : s.head_blocks) o << "    " << k << ": " << human_count(v) << "\n";
  o << "  head params      " << human_count(s.head_params) << " (" << s.head_params << ")\n";
  o << "\ntotal params     " << human_count(s.text_params + s.vision_params + s.head_params) << " (backbone "
    << human_count(s.text_params) << " + vision " << human_count(s.vision_params) << " + head "
    << human_count(s.head_params) << ")\n";
  o << "dtypes       backbone: " << dtype_mix(r.weights->bytes_by_dtype())
    << "\n             head: " << dtype_mix(r.head_weights->bytes_by_dtype()) << "\n";
  if (r.model.ignored_tensors) {
    o << "ignored      " << r.model.ignored_tensors << " tensors ("
      << (r.gguf.empty() ? "mtp.*" : "MTP blocks of " + r.gguf_info.architecture + ".nextn_predict_layers")
      << " multi-token prediction)\n";
  }
  const auto& k = r.tokenizer;
  o << "\ntokenizer    " << k.model_type << ", " << k.vocab_entries << " vocab entries, " << k.merges << " merges ("
    << k.merges_form << "), normalizer " << k.normalizer << ", " << k.added.size() << " added tokens ("
    << k.added_in_tokenizer_json << " in tokenizer.json + " << k.added_in_config_only << " config-only)"
    << (k.ignore_merges ? ", ignore_merges" : "") << "\n  split regex      "
    << (k.split_regex.empty() ? "(none)" : k.split_regex) << "\n";
  if (r.random_weights && !r.random_weights->tokenizer.empty())
    o << "  provenance       " << r.random_weights->tokenizer << "\n";
  if (r.preprocessor) {
    const auto& p = *r.preprocessor;
    o << "preprocessor " << (p.image_processor_type.empty() ? "?" : p.image_processor_type) << ": pixels ["
      << p.min_pixels << ", " << p.max_pixels << "], patch " << p.patch_size << ", merge " << p.merge_size
      << "\n  image settings   from " << r.preprocessor_source << "\n";
  } else if (r.config.vision) {
    o << "preprocessor none: neither processor_config.json (image_processor) nor preprocessor_config.json; images "
         "are refused\n";
  }
  const auto ctx = static_cast<std::uint64_t>(context);
  o << "\nmemory       weights (mmapped, shared page cache): " << human_bytes(s.weight_file_bytes)
    << " backbone+vision, " << human_bytes(s.head_file_bytes) << " head\n"
    << "             per sequence (fp32): " << human_bytes(s.state_fixed_bytes) << " recurrent+conv state + "
    << human_bytes(s.state_bytes_per_token) << "/token (KV cache, hidden and head memory rows)\n"
    << "             activations: "
    << human_bytes(s.activation_bytes_per_chunk_token * static_cast<std::uint64_t>(chunk)) << " per " << chunk
    << "-token prefill chunk\n"
    << "             at " << context << " tokens: about "
    << human_bytes(s.weight_file_bytes + s.head_file_bytes + s.state_fixed_bytes + s.state_bytes_per_token * ctx +
                   s.activation_bytes_per_chunk_token * static_cast<std::uint64_t>(chunk))
    << " in total\n";
  if (!r.verified_files.empty())
    o << "verified     sha256 of " << r.verified_files.size() << " files match the manifest\n";
  o << "\nthis machine kernels " << ops::isa_description() << " (CLEF_ISA forces a lower level)\n"
    << "             GEMM " << ops::gemm_backend_name() << "\n";
  return o.str();
}

nlohmann::ordered_json inspect_json(const ReleaseFolder& r, const ModelSummary& s, std::int64_t chunk,
                                    std::int64_t context) {
  nlohmann::ordered_json j;
  const auto& t = r.config.text;
  j["model"] = r.model_name;
  j["random_weights"] = r.random_weights.has_value();
  if (r.gguf.empty()) {
    j["gguf"] = nullptr;
  } else {
    j["gguf"] = {{"file", std::filesystem::path(r.gguf).filename().string()},
                 {"version", r.weights->gguf()->header().version},
                 {"architecture", r.gguf_info.architecture},
                 {"name", printable(r.gguf_info.name)},
                 {"layout", r.gguf_info.layout},
                 {"tensor_types", gguf_tensor_types(*r.weights->gguf())},
                 {"tokenizer", r.tokenizer_source},
                 {"head", r.gguf_info.layout == "clef"
                              ? "inside the GGUF (dequantized to fp32)"
                              : "joint_head.safetensors + joint_head_config.json beside the GGUF"},
                 {"head_f32_bytes", r.gguf_info.layout == "clef" ? head_f32_bytes(r) : 0}};
    if (r.mmproj.empty()) {
      j["gguf"]["mmproj"] = nullptr;
    } else {
      const auto& m = *r.mmproj_info;
      j["gguf"]["mmproj"] = {{"file", printable(std::filesystem::path(r.mmproj).filename().string())},
                             {"projector_type", m.projector_type},
                             {"name", printable(m.name)},
                             {"file_type", m.file_type},
                             {"tensor_types", gguf_tensor_types(*r.vision_weights->gguf())}};
    }
  }
  j["model_type"] = r.config.model_type;
  j["composite"] = r.config.composite;
  std::string pattern;
  for (auto lt : t.layer_types) pattern.push_back(lt == LayerType::kFullAttention ? 'F' : 'L');
  j["layer_pattern"] = pattern;
  j["hidden_size"] = t.hidden_size;
  j["num_hidden_layers"] = t.num_hidden_layers;
  j["tied_lm_head"] = r.model.text.tied;
  auto blocks = [](const std::vector<std::pair<std::string, std::int64_t>>& b) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    for (const auto& [k, v] : b) o[k] = v;
    return o;
  };
  j["params"] = {{"text", s.text_params},
                 {"vision", s.vision_params},
                 {"head", s.head_params},
                 {"linear_attention_layer", s.linear_layer_params},
                 {"full_attention_layer", s.full_layer_params},
                 {"text_blocks", blocks(s.text_blocks)},
                 {"vision_blocks", blocks(s.vision_blocks)},
                 {"head_blocks", blocks(s.head_blocks)}};
  j["head_config"] = {{"hidden_size", r.head_config.hidden_size},
                      {"width", r.head_config.width},
                      {"routing_layers", r.head_config.routing_layers},
                      {"layers", r.head_config.layers},
                      {"heads", r.head_config.heads},
                      {"feedforward", r.head_config.feedforward}};
  j["dtypes"] = {{"backbone", r.weights->bytes_by_dtype()}, {"head", r.head_weights->bytes_by_dtype()}};
  j["ignored_tensors"] = r.model.ignored_tensors;
  const auto& k = r.tokenizer;
  j["tokenizer"] = {{"model", k.model_type},
                    {"vocab_entries", k.vocab_entries},
                    {"merges", k.merges},
                    {"added_tokens", k.added.size()},
                    {"config_only_added_tokens", k.added_in_config_only},
                    {"normalizer", k.normalizer},
                    {"split_regex", k.split_regex}};
  if (r.preprocessor) {
    j["image_settings"] = {{"source", r.preprocessor_source},
                           {"min_pixels", r.preprocessor->min_pixels},
                           {"max_pixels", r.preprocessor->max_pixels},
                           {"patch_size", r.preprocessor->patch_size},
                           {"merge_size", r.preprocessor->merge_size}};
  } else {
    j["image_settings"] = nullptr;
  }
  j["memory"] = {{"weight_file_bytes", s.weight_file_bytes},
                 {"head_file_bytes", s.head_file_bytes},
                 {"state_fixed_bytes", s.state_fixed_bytes},
                 {"state_bytes_per_token", s.state_bytes_per_token},
                 {"activation_bytes_per_chunk_token", s.activation_bytes_per_chunk_token},
                 {"chunk", chunk},
                 {"context", context}};
  j["verified_files"] = r.verified_files;
  j["runtime"] = {{"isa", ops::isa_name(ops::active_isa())},
                  {"isa_description", ops::isa_description()},
                  {"isa_supported", ops::supported_isa_list()},
                  {"gemm", ops::gemm_backend_name()}};
  return j;
}

}  // namespace clef::cli
