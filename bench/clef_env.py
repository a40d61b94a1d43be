# SPDX-License-Identifier: MIT
"""The environment the benchmark scripts run clef.cpp in (imported by them from this folder)."""

from __future__ import annotations

from typing import MutableMapping


def bf16_steady_state(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Sets CLEF_BF16_PACK=1 in `env` unless it is set, and returns `env`: bf16 weights are packed into the GEMM
    library's layout at their first use instead of their 8th (docs/PERFORMANCE.md "When to pack"), so that
    timed passes and requests are the packed steady state a long-running engine reaches, whatever a script's
    warm-up or repeat count, and never include the one-time packing."""
    env.setdefault("CLEF_BF16_PACK", "1")
    return env
