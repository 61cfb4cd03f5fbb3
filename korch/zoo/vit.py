"""Vision Transformer (ViT) classifier: patch conv, cls token, learned positions, pre-norm encoder."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from korch.zoo._layers import init_transformer, trunc_normal_
from korch.zoo.registry import InputSpec, ZooModel, register
from korch.zoo.transformer import EncoderLayer


@dataclass(frozen=True)
class ViTConfig:
    """Image and patch size, width, depth, heads, MLP size and class count."""

    image: int
    patch: int
    hidden: int
    layers: int
    heads: int
    mlp: int
    classes: int


class ViT(nn.Module):
    """Patchify, prepend cls token, add position embedding, encode, classify the cls token."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        tokens = (cfg.image // cfg.patch) ** 2 + 1
        self.patch = nn.Conv2d(3, cfg.hidden, cfg.patch, cfg.patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.hidden))
        self.pos_embed = nn.Parameter(torch.zeros(1, tokens, cfg.hidden))
        self.layers = nn.ModuleList(
            EncoderLayer(cfg.hidden, cfg.heads, cfg.mlp, eps=1e-6, pre_norm=True) for _ in range(cfg.layers)
        )
        self.norm = nn.LayerNorm(cfg.hidden, eps=1e-6)
        self.head = nn.Linear(cfg.hidden, cfg.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x)[:, 0])


def build(cfg: ViTConfig) -> nn.Module:
    """Randomly initialised ViT: truncated normal(0.02) linears/tokens/positions, LeCun-normal patch conv."""
    net = ViT(cfg)
    init_transformer(net, std=0.02)
    for p in (net.cls_token, net.pos_embed):
        trunc_normal_(p, 0.02)
    fan_in = 3 * cfg.patch * cfg.patch
    nn.init.normal_(net.patch.weight, std=fan_in**-0.5)
    nn.init.zeros_(net.patch.bias)
    return net


def _spec(name: str, cfg: ViTConfig, mini: bool, desc: str) -> ZooModel:
    return ZooModel(
        name=name,
        description=desc,
        inputs=(InputSpec("pixel_values", (1, 3, cfg.image, cfg.image), "float32"),),
        outputs=("logits",),
        build=partial(build, cfg),
        mini=mini,
    )


B16 = ViTConfig(image=224, patch=16, hidden=768, layers=12, heads=12, mlp=3072, classes=1000)
MINI = ViTConfig(image=32, patch=8, hidden=32, layers=2, heads=2, mlp=64, classes=10)

register(_spec("vit-b16", B16, False, "ViT-B/16 classifier (12x768, 12 heads), 1000 classes, 1x3x224x224"))
register(_spec("vit-mini", MINI, True, "Tiny ViT (patch 8, 2x32) for tests, 10 classes, 1x3x32x32"))
