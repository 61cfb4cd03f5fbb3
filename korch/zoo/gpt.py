"""GPT-2-style decoder: token + learned position embeddings, pre-norm causal blocks, tied output projection.

The causal mask comes in the two forms exported language models use, chosen by MaskStyle:
- NEG_INF: scores.masked_fill(blocked, -inf) (nanoGPT and many hand-written decoders); ONNX: Where
  of a constant bool mask and a -inf constant.
- LOWEST: scores + additive mask holding finfo(float32).min above the diagonal (Hugging Face's
  additive 4-D causal mask); ONNX: Add of a constant. Masked scores stay finite.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace
from functools import partial

import torch
from torch import Tensor, nn

from korch.zoo._layers import merge_heads, split_heads
from korch.zoo.registry import InputSpec, ZooModel, register

# GPT-2's LayerNorm epsilon and weight std.
LAYER_NORM_EPS = 1e-5
INIT_STD = 0.02


class MaskStyle(enum.Enum):
    """The value written into masked attention scores before the softmax."""

    NEG_INF = "neg-inf"
    LOWEST = "lowest"


@dataclass(frozen=True)
class GPTConfig:
    """Vocabulary, sequence length, width, depth, heads, MLP size, max positions and mask style."""

    vocab: int
    seq: int
    hidden: int
    layers: int
    heads: int
    mlp: int
    max_positions: int
    mask: MaskStyle


def causal_mask(seq: int, style: MaskStyle) -> Tensor:
    """The [seq, seq] mask a block applies to its scores: bool 'blocked' for NEG_INF (True above the
    diagonal: key after query), an additive float mask for LOWEST (finfo(float32).min there, else 0).

    Built by comparing position ranges, as Hugging Face's causal-mask helpers do, rather than with
    torch.tril: the exporter folds the comparison of two small ranges into one constant at any
    length, whereas an op on a [seq, seq] tensor (tril, Not) stays in the ONNX graph once seq * seq
    exceeds onnxscript's folding limit (8192 input elements: seq > 90). So the NEG_INF mask is one
    constant at every length; the LOWEST one is too at the mini length, and past 90 tokens would
    keep a Where of constants (korch's fission folds it), which no registered model does.
    """
    position = torch.arange(seq)
    blocked = position.unsqueeze(0) > position.unsqueeze(1)
    if style is MaskStyle.NEG_INF:
        return blocked
    return torch.where(blocked, torch.finfo(torch.float32).min, 0.0)


def masked_scores(scores: Tensor, mask: Tensor, style: MaskStyle) -> Tensor:
    """Apply causal_mask(...) to [B, heads, N, N] scores in the given style."""
    if style is MaskStyle.NEG_INF:
        return scores.masked_fill(mask, float("-inf"))
    return scores + mask


class CausalSelfAttention(nn.Module):
    """Fused QKV projection (as GPT-2's c_attn), explicit masked softmax attention, output projection."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.style = cfg.mask
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        q, k, v = (split_heads(t, self.heads) for t in self.qkv(x).split(x.shape[-1], dim=-1))
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        probs = torch.softmax(masked_scores(scores, mask, self.style), dim=-1)
        return self.proj(merge_heads(torch.matmul(probs, v)))


class MLP(nn.Module):
    """Linear -> tanh-approximated GELU (GPT-2's gelu_new) -> Linear."""

    def __init__(self, hidden: int, mlp: int) -> None:
        super().__init__()
        self.fc = nn.Linear(hidden, mlp)
        self.act = nn.GELU(approximate="tanh")
        self.proj = nn.Linear(mlp, hidden)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    """Pre-norm decoder block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.hidden, eps=LAYER_NORM_EPS)
        self.attn = CausalSelfAttention(cfg)
        self.norm2 = nn.LayerNorm(cfg.hidden, eps=LAYER_NORM_EPS)
        self.mlp = MLP(cfg.hidden, cfg.mlp)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x), mask)
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """Embeddings (positions 0..seq-1), decoder blocks, final LayerNorm, logits tied to the token embedding."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.style = cfg.mask
        self.token = nn.Embedding(cfg.vocab, cfg.hidden)
        self.position = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.hidden, eps=LAYER_NORM_EPS)

    def forward(self, input_ids: Tensor) -> Tensor:
        seq = input_ids.shape[1]
        positions = torch.arange(seq, dtype=torch.int64).unsqueeze(0)
        mask = causal_mask(seq, self.style)
        x = self.token(input_ids) + self.position(positions)
        for block in self.blocks:
            x = block(x, mask)
        return torch.matmul(self.norm(x), self.token.weight.t())


def build(cfg: GPTConfig) -> nn.Module:
    """Randomly initialised GPT, initialised as GPT-2: normal(0.02) linear and embedding weights, zero
    biases, unit LayerNorms, and the projections that write into the residual stream (attention and
    MLP output) scaled down by sqrt(2 * layers) so the residual's variance does not grow with depth."""
    net = GPT(cfg)
    for m in net.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=INIT_STD)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    for block in net.blocks:
        for proj in (block.attn.proj, block.mlp.proj):
            nn.init.normal_(proj.weight, std=INIT_STD / math.sqrt(2 * cfg.layers))
    return net


def _spec(name: str, cfg: GPTConfig, mini: bool, desc: str) -> ZooModel:
    return ZooModel(
        name=name,
        description=desc,
        inputs=(InputSpec("input_ids", (1, cfg.seq), "int64", high=cfg.vocab),),
        outputs=("logits",),
        build=partial(build, cfg),
        mini=mini,
    )


# GPT-2 small's width and vocabulary at distilgpt2's depth (6 of 12 layers) so the zoo benchmark stays
# affordable; 128 tokens, like bert-base.
SMALL = GPTConfig(vocab=50257, seq=128, hidden=768, layers=6, heads=12, mlp=3072, max_positions=1024,
                  mask=MaskStyle.NEG_INF)
MINI = GPTConfig(vocab=1000, seq=16, hidden=32, layers=2, heads=2, mlp=128, max_positions=64, mask=MaskStyle.NEG_INF)
MINI_LOWEST = replace(MINI, mask=MaskStyle.LOWEST)

register(_spec("gpt2-small", SMALL, False,
               "GPT-2-small-width decoder (6x768, 12 heads, -inf causal mask, tied logits), input_ids int64 [1, 128]"))
register(_spec("gpt-mini", MINI, True, "Tiny GPT (2x32, vocab 1000, -inf causal mask) for tests, input_ids [1, 16]"))
register(_spec("gpt-mini-lowest", MINI_LOWEST, True,
               "Tiny GPT with an additive finfo(float32).min causal mask, for tests, input_ids [1, 16]"))
