// SPDX-License-Identifier: MIT
// Per-sequence backbone state (docs/MODEL.md §13): the KV cache of every full-attention layer and
// the conv + recurrent state of every Gated DeltaNet layer, plus the token/position counters.
// It is a plain value: fork = copy, restore = assign. Prefix reuse builds on this.
#pragma once

#include "nn/state.h"

namespace clef {

using SequenceState = nn::ModelState;

/// A deep copy of `s` that evolves independently (prefix reuse: run the shared prefix once,
/// fork, continue each branch).
inline SequenceState fork_state(const SequenceState& s) { return s; }

/// Puts `dst` back to the snapshot `snapshot` (which stays usable).
inline void restore_state(SequenceState& dst, const SequenceState& snapshot) { dst = snapshot; }

}  // namespace clef
