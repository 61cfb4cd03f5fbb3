"""BERT encoder (word + position + token-type embeddings, post-norm layers); returns the last hidden state."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from korch.zoo._layers import init_transformer
from korch.zoo.registry import InputSpec, ZooModel, register
from korch.zoo.transformer import EncoderLayer


@dataclass(frozen=True)
class BertConfig:
    """Vocabulary, sequence length, width, depth, heads, FFN size and max positions."""

    vocab: int
    seq: int
    hidden: int
    layers: int
    heads: int
    ffn: int
    max_positions: int


class Bert(nn.Module):
    """Embeddings (token type fixed to 0, positions 0..seq-1) + LayerNorm + encoder stack."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.word = nn.Embedding(cfg.vocab, cfg.hidden)
        self.position = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.token_type = nn.Embedding(2, cfg.hidden)
        self.norm = nn.LayerNorm(cfg.hidden, eps=1e-12)
        self.layers = nn.ModuleList(
            EncoderLayer(cfg.hidden, cfg.heads, cfg.ffn, eps=1e-12, pre_norm=False) for _ in range(cfg.layers)
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq = input_ids.shape[1]
        positions = torch.arange(seq, dtype=torch.int64).unsqueeze(0)
        token_types = torch.zeros_like(input_ids)
        x = self.word(input_ids) + self.position(positions) + self.token_type(token_types)
        x = self.norm(x)
        for layer in self.layers:
            x = layer(x)
        return x


def build(cfg: BertConfig) -> nn.Module:
    """Randomly initialised BERT (truncated normal std 0.02, as in the original)."""
    net = Bert(cfg)
    init_transformer(net, std=0.02)
    return net


def _spec(name: str, cfg: BertConfig, mini: bool, desc: str) -> ZooModel:
    return ZooModel(
        name=name,
        description=desc,
        inputs=(InputSpec("input_ids", (1, cfg.seq), "int64", high=cfg.vocab),),
        outputs=("last_hidden_state",),
        build=partial(build, cfg),
        mini=mini,
    )


BASE = BertConfig(vocab=30522, seq=128, hidden=768, layers=12, heads=12, ffn=3072, max_positions=512)
MINI = BertConfig(vocab=1000, seq=16, hidden=32, layers=2, heads=2, ffn=64, max_positions=64)

register(_spec("bert-base", BASE, False, "BERT-base encoder (12x768, 12 heads), input_ids int64 [1, 128]"))
register(_spec("bert-mini", MINI, True, "Tiny BERT (2x32, vocab 1000) for tests, input_ids int64 [1, 16]"))
