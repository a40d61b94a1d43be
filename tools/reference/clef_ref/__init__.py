# SPDX-License-Identifier: MIT
"""clef_ref: Python reference toolkit for clef.cpp (encoder, joint schema head, SystemOne response).

Modules: ``render`` (docs/PROTOCOL.md §3.3), ``validate`` (§5.3), ``record`` (§3), ``head`` (§4),
``response`` (§2.1), ``presets`` / ``weights`` (random-weight release folders), ``tokenizer_build``
(reconstructed Qwen3.5 tokenizer.json, docs/TOKENIZER.md §1).
"""
