# SPDX-License-Identifier: MIT
"""Joint schema head (docs/PROTOCOL.md §4), written from the §4.4 formulas.

Module/parameter names follow §4.2 so that ``state_dict()`` of :class:`JointSchemaHead` is exactly the
``joint_head.safetensors`` layout (PyTorch-authentic names from ``nn.MultiheadAttention`` and
``nn.TransformerDecoderLayer(norm_first=True, activation="gelu", batch_first=True)``).
All math is fp32; LayerNorm eps 1e-5; GELU is the exact erf form.
"""

from __future__ import annotations

import json
import math
import os
from typing import Dict, List, Sequence

import torch
from torch import nn
import torch.nn.functional as F

LN100 = math.log(100.0)


class EvidenceLayer(nn.Module):
    """One evidence-routing layer (docs/PROTOCOL.md §4.4 step 7): pre-norm cross-attention of option queries
    over the memory, then a GELU feed-forward; no option-option attention, no masks."""

    def __init__(self, width: int, heads: int, feedforward: int, dropout: float = 0.0):
        super().__init__()
        self.query_norm = nn.LayerNorm(width)
        self.memory_norm = nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, dropout=dropout, batch_first=True)
        self.feedforward_norm = nn.LayerNorm(width)
        self.feedforward = nn.Sequential(
            nn.Linear(width, feedforward), nn.GELU(), nn.Dropout(dropout), nn.Linear(feedforward, width), nn.Dropout(dropout)
        )

    def forward(self, z: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """z: [1, N, W] f32 option queries; memory: [1, T, W] f32 → [1, N, W] f32."""
        mn = self.memory_norm(memory)
        z = z + self.attention(self.query_norm(z), mn, mn, need_weights=False)[0]
        return z + self.feedforward(self.feedforward_norm(z))


class JointSchemaHead(nn.Module):
    """Clef joint schema head (docs/PROTOCOL.md §4.1 config, §4.2 tensors, §4.4 forward).

    Args: hidden_size H, width W, routing_layers R, layers L, heads h, feedforward F, dropout (unused at
    inference).
    """

    def __init__(self, hidden_size: int, width: int, routing_layers: int, layers: int, heads: int,
                 feedforward: int, dropout: float = 0.0):
        super().__init__()
        H, W = hidden_size, width
        self.config = dict(hidden_size=H, width=W, routing_layers=routing_layers, layers=layers, heads=heads,
                           feedforward=feedforward)
        self.hidden_norm = nn.LayerNorm(H)
        self.memory_projection = nn.Linear(H, W, bias=False)
        self.question_projection = nn.Linear(H, W, bias=False)
        self.option_question_projection = nn.Linear(H, W, bias=False)
        self.global_projection = nn.Linear(H, W, bias=False)
        self.option_context_projection = nn.Linear(H, W, bias=False)
        self.option_lexical_projection = nn.Linear(H, W, bias=False)
        self.type_embedding = nn.Embedding(3, W)
        self.evidence_layers = nn.ModuleList(
            [EvidenceLayer(W, heads, feedforward, dropout) for _ in range(routing_layers)]
        )
        self.option_summary_norm = nn.LayerNorm(W)
        self.layers = nn.ModuleList(
            [
                nn.TransformerDecoderLayer(W, heads, feedforward, dropout, activation="gelu", batch_first=True,
                                           norm_first=True)
                for _ in range(layers)
            ]
        )
        self.field_norm = nn.LayerNorm(W)
        self.option_norm = nn.LayerNorm(W)
        self.residual_scorer = nn.Sequential(nn.Linear(4 * W, W), nn.GELU(), nn.Dropout(dropout), nn.Linear(W, 1))
        self.prior_logit_scale = nn.Parameter(torch.tensor(math.log(10.0)))
        self.joint_logit_scale = nn.Parameter(torch.tensor(math.log(10.0)))
        self.residual_gate = nn.Parameter(torch.tensor(0.0))

    @staticmethod
    def _normalize(x: torch.Tensor) -> torch.Tensor:
        return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    def forward(
        self,
        hidden: torch.Tensor,
        output_embeddings: torch.Tensor,
        input_ids: torch.Tensor,
        question_spans: Sequence[Sequence[int]],
        question_types: Sequence[int],
        option_spans: Sequence[Sequence[int]],
        option_owner: Sequence[int],
    ) -> torch.Tensor:
        """Option logits of one record (docs/PROTOCOL.md §4.4 steps 1-15).

        Args:
            hidden: [T, H] final-norm hidden states (any float dtype; upcast to f32).
            output_embeddings: [V, H] lm_head (or tied embedding) matrix; only span-token rows are read.
            input_ids: [T] int64.
            question_spans: Q half-open (a, b) spans; question_types: Q ints (0 noul, 1 choice, 2 score).
            option_spans: N half-open (s, e) spans in model order; option_owner: N question indices.
        Returns:
            [N] f32 logits (model order).
        """
        X = self.hidden_norm(hidden.float())  # 1
        M = self.memory_projection(X)  # 2  [T, W]
        g = X[-1]  # 3  [H]
        u = torch.stack([X[a:b].mean(0) for a, b in question_spans])  # 4  [Q, H]
        c = torch.stack([X[s:e].mean(0) for s, e in option_spans])  # [N, H]
        lex = torch.stack([output_embeddings[input_ids[s:e]].float().mean(0) for s, e in option_spans])  # 5
        owner = torch.as_tensor(list(option_owner), dtype=torch.long)
        Z = (self.option_context_projection(c) + self.option_lexical_projection(lex)
             + self.option_question_projection(u)[owner])  # 6  [N, W]
        Zb, Mb = Z.unsqueeze(0), M.unsqueeze(0)
        for layer in self.evidence_layers:  # 7
            Zb = layer(Zb, Mb)
        Z = Zb[0]
        f0 = self.question_projection(u)  # 8  [Q, W]
        W = Z.shape[-1]
        # 9: per-question softmax over its options of (Z_o · f0_q) / sqrt(W)
        att = (Z * f0[owner]).sum(-1) / math.sqrt(W)
        Q = f0.shape[0]
        mask = owner.unsqueeze(0) == torch.arange(Q).unsqueeze(1)  # [Q, N]
        alpha = torch.softmax(att.unsqueeze(0).masked_fill(~mask, float("-inf")), dim=-1)  # [Q, N]
        s = alpha @ Z  # [Q, W]
        types = torch.as_tensor(list(question_types), dtype=torch.long)
        Fq = f0 + self.option_summary_norm(s) + self.global_projection(g) + self.type_embedding(types)  # 10
        Fb = Fq.unsqueeze(0)
        for layer in self.layers:  # 11
            Fb = layer(Fb, Mb)
        Fq = self.field_norm(Fb[0])  # 12
        O = self.option_norm(Z)
        anchor = self._normalize(u + g)  # 13
        P = torch.exp(self.prior_logit_scale.float().clamp(max=LN100))
        prior = P * (self._normalize(lex) * anchor[owner]).sum(-1)
        Fo = Fq[owner]  # 14
        cos = F.cosine_similarity(Fo, O, dim=-1, eps=1e-8)
        r = self.residual_scorer(torch.cat([Fo, O, Fo * O, (Fo - O).abs()], dim=-1)).squeeze(-1)
        J = torch.exp(self.joint_logit_scale.float().clamp(max=LN100))
        joint = J * cos + r
        return prior + torch.sigmoid(self.residual_gate.float()) * joint  # 15


def head_param_count(cfg: Dict[str, int]) -> int:
    """Number of parameters of a head with config ``cfg`` (docs/PROTOCOL.md §4.1), built on the meta device."""
    with torch.device("meta"):
        h = JointSchemaHead(**cfg)
    return sum(p.numel() for p in h.parameters())


def load_head(model_dir: os.PathLike) -> JointSchemaHead:
    """Load ``joint_head_config.json`` + ``joint_head.safetensors`` strictly, as fp32, eval mode (§5.2)."""
    from safetensors.torch import load_file

    with open(os.path.join(model_dir, "joint_head_config.json")) as f:
        cfg = json.load(f)
    head = JointSchemaHead(**cfg)
    sd = load_file(os.path.join(model_dir, "joint_head.safetensors"))
    head.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
    return head.float().eval()


def record_head_inputs(record) -> Dict[str, List]:
    """Span/type/owner lists of a ``record.Record`` in the order ``JointSchemaHead.forward`` expects."""
    qs, qt, os_, ow = [], [], [], []
    for qi, q in enumerate(record.questions):
        qs.append(q.span)
        qt.append(q.type_id)
        for sp in q.option_spans:
            os_.append(sp)
            ow.append(qi)
    return dict(question_spans=qs, question_types=qt, option_spans=os_, option_owner=ow)
