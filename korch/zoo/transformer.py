"""Shared post-norm/pre-norm transformer encoder layers (explicit attention) used by BERT and ViT."""

from __future__ import annotations

from torch import Tensor, nn

from korch.zoo._layers import attention, merge_heads, split_heads


class SelfAttention(nn.Module):
    """Multi-head self-attention with separate Q/K/V projections and an output projection."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = (split_heads(lin(x), self.heads) for lin in (self.query, self.key, self.value))
        return self.out(merge_heads(attention(q, k, v)))


class FeedForward(nn.Module):
    """Linear -> erf GELU -> Linear."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class EncoderLayer(nn.Module):
    """Transformer encoder layer; post-norm (BERT) or pre-norm (ViT)."""

    def __init__(self, hidden: int, heads: int, ffn: int, eps: float, pre_norm: bool) -> None:
        super().__init__()
        self.attn = SelfAttention(hidden, heads)
        self.norm1 = nn.LayerNorm(hidden, eps=eps)
        self.ffn = FeedForward(hidden, ffn)
        self.norm2 = nn.LayerNorm(hidden, eps=eps)
        self.pre_norm = pre_norm

    def forward(self, x: Tensor) -> Tensor:
        if self.pre_norm:
            x = x + self.attn(self.norm1(x))
            return x + self.ffn(self.norm2(x))
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.ffn(x))
