// SPDX-License-Identifier: MIT
// A Qwen3.5 model in a GGUF file as llama.cpp's convert_hf_to_gguf.py writes it (architecture
// "qwen35", llama.cpp 3f545becc): the hyper-parameters from the metadata, and the tokenizer from the
// tokenizer.ggml.* keys. Key names and meanings are facts read from llama.cpp's
// conversion/qwen.py, gguf-py/gguf/constants.py and src/llama-arch.cpp (nothing copied).
#pragma once

#include <cstdint>
#include <string>

#include "io/gguf.h"
#include "io/hf_config.h"
#include "io/tokenizer_files.h"

namespace clef {

/// What the GGUF says about itself besides the model configuration.
struct GgufModelInfo {
  std::string architecture;  ///< general.architecture ("qwen35" or "clef")
  /// Which of the two layouts clef reads (gguf_layout): "qwen35" (backbone only, the head in
  /// joint_head.safetensors beside the file) or "clef" (backbone + head in one file).
  std::string layout;
  std::string name;               ///< general.name ("" when absent)
  std::int64_t block_count = 0;   ///< qwen35.block_count (decoder layers + MTP layers)
  std::int64_t nextn_layers = 0;  ///< qwen35.nextn_predict_layers (MTP blocks, ignored), 0 when absent
};

/// The layout of a GGUF model file, from its metadata and tensor names (docs/GGUF.md "Layouts"):
///   "qwen35"  general.architecture "qwen35", no head: llama.cpp's convert_hf_to_gguf.py of the
///             backbone (bartowski's files); the head comes from joint_head.safetensors beside it.
///   "clef"    general.architecture "clef" with clef.decision.type = "clef": llama.cpp's own Clef
///             conversion (ggml-org's files), backbone keys under "clef.", head tensors inside.
/// Anything else is refused (Unsupported) with what was found and the two layouts read: another
/// architecture (qwen35moe: mixture of experts), "clef" without clef.decision.type = "clef", and
/// "qwen35" with head metadata (qwen35.decision.* or clef.* keys) or head tensors (decision.*,
/// dec.*, clef.*, token_types.*), e.g. a third-party layout that is not documented anywhere. A
/// projector file (architecture "clip") is refused as the wrong file (ModelLoadError) saying to
/// give it with --mmproj.
std::string gguf_layout(const GgufFile& g);

/// The text configuration of a qwen35 or clef GGUF (gguf_layout must accept it), as the flat (text-only,
/// "qwen3_5_text") form of config.json would give it: every field from a metadata key (ARCH = general.architecture):
///   hidden_size ARCH.embedding_length, intermediate_size ARCH.feed_forward_length,
///   num_hidden_layers ARCH.block_count - ARCH.nextn_predict_layers (0 when absent),
///   num_attention_heads / num_key_value_heads ARCH.attention.head_count / head_count_kv,
///   head_dim ARCH.attention.key_length (= value_length), rms_norm_eps
///   ARCH.attention.layer_norm_rms_epsilon (an F32 key; the model uses it as float, as the
///   folder's 1e-6 is), linear_num_key_heads ARCH.ssm.group_count, linear_num_value_heads
///   ARCH.ssm.time_step_rank, linear_key_head_dim ARCH.ssm.state_size, linear_value_head_dim
///   ARCH.ssm.inner_size / time_step_rank, linear_conv_kernel_dim ARCH.ssm.conv_kernel, layer
///   types by ARCH.full_attention_interval (layer i is full attention iff (i+1) % interval == 0),
///   rope_theta ARCH.rope.freq_base, partial_rotary_factor ARCH.rope.dimension_count / head_dim,
///   mrope_section the first three of ARCH.rope.dimension_sections (the fourth must be 0),
///   interleaved M-RoPE (always, for qwen35), max_position_embeddings ARCH.context_length,
///   vocab_size the rows of token_embd.weight (= the length of tokenizer.ggml.tokens when present),
///   tie_word_embeddings iff there is no output.weight. No vision tower (llama.cpp writes it into
///   a separate mmproj file).
/// The values then pass the same checks as config.json (parse_model_config). Throws
/// ModelLoadError naming the key (missing, wrong type, inconsistent), Unsupported for a layout
/// gguf_layout refuses.
ModelConfig model_config_from_gguf(const GgufFile& g, GgufModelInfo* info = nullptr);

/// tokenizer.json text (Hugging Face `tokenizers` format) equivalent to the GGUF's tokenizer, for
/// Tokenizer::from_json: tokenizer.ggml.model must be "gpt2" (byte-level BPE) and
/// tokenizer.ggml.pre "qwen35" or "qwen2" (that split regex, NFC normalizer, ByteLevel
/// pre-tokenizer/decoder, as Qwen3.5's tokenizer.json declares them); tokens of type 1 (normal)
/// form the vocabulary (with their ids), types 3 (control) and 4 (user defined) become
/// added tokens (special iff control; not normalized, no strip: how every Qwen3.5 added token is
/// declared), type 5 (unused: the [PADn] rows up to the embedding size) is skipped; merges
/// "a b" from tokenizer.ggml.merges. Throws ModelLoadError naming the key and index (array
/// length mismatch, a type outside {1, 3, 4, 5}, a non-string token, a token or merge that is not
/// valid UTF-8: "<file>: metadata \"tokenizer.ggml.tokens\": token 7 is not valid UTF-8 ...") and
/// Unsupported for another model or pre-tokenizer.
std::string tokenizer_json_from_gguf(const GgufFile& g);

/// What tokenizer_json_from_gguf's tokenizer holds, for `clef inspect` (added tokens are the
/// control and user-defined ones, counted as "in tokenizer.json"). Same checks and errors.
TokenizerSummary tokenizer_summary_from_gguf(const GgufFile& g);

}  // namespace clef
