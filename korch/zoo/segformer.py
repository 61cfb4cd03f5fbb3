"""SegFormer semantic segmentation: Mix Transformer (MiT) encoder + all-MLP decoder."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from korch.zoo._layers import attention, init_transformer, merge_heads, split_heads
from korch.zoo.registry import InputSpec, ZooModel, register


@dataclass(frozen=True)
class SegFormerConfig:
    """Per-stage dims/depths/heads/spatial-reduction ratios, decoder width, classes and image size."""

    dims: tuple[int, ...]
    depths: tuple[int, ...]
    heads: tuple[int, ...]
    sr_ratios: tuple[int, ...]
    mlp_ratio: int
    decoder_dim: int
    classes: int
    image: int


def _to_image(x: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """[B, H*W, C] -> [B, C, H, W]."""
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], h, w)


class OverlapPatchEmbed(nn.Module):
    """Strided conv with overlapping windows, flattened to tokens, then LayerNorm."""

    def __init__(self, cin: int, dim: int, k: int, stride: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(cin, dim, k, stride, k // 2)
        self.norm = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        x = self.proj(x)
        h, w = x.shape[2], x.shape[3]
        return self.norm(x.flatten(2).transpose(1, 2)), h, w


class EfficientSelfAttention(nn.Module):
    """Multi-head attention whose keys/values come from a spatially reduced (strided conv + LN) map."""

    def __init__(self, dim: int, heads: int, sr: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)
        self.sr = nn.Conv2d(dim, dim, sr, sr) if sr > 1 else None
        self.sr_norm = nn.LayerNorm(dim, eps=1e-5) if sr > 1 else None

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        q = split_heads(self.q(x), self.heads)
        kv_in = x
        if self.sr is not None and self.sr_norm is not None:
            kv_in = self.sr_norm(self.sr(_to_image(x, h, w)).flatten(2).transpose(1, 2))
        k, v = self.kv(kv_in).chunk(2, dim=-1)
        out = attention(q, split_heads(k, self.heads), split_heads(v, self.heads))
        return self.proj(merge_heads(out))


class MixFFN(nn.Module):
    """Linear -> depthwise 3x3 conv on the token image -> GELU -> Linear."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.dwconv = nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        x = self.fc1(x)
        x = self.dwconv(_to_image(x, h, w)).flatten(2).transpose(1, 2)
        return self.fc2(self.act(x))


class MiTBlock(nn.Module):
    """Pre-norm transformer block: efficient self-attention + Mix-FFN, both residual."""

    def __init__(self, dim: int, heads: int, sr: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = EfficientSelfAttention(dim, heads, sr)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.ffn = MixFFN(dim, dim * mlp_ratio)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), h, w)
        return x + self.ffn(self.norm2(x), h, w)


class MiTStage(nn.Module):
    """Patch embed, transformer blocks, final LayerNorm; returns a [B, C, H, W] feature map."""

    def __init__(self, cin: int, dim: int, k: int, stride: int, cfg: SegFormerConfig, i: int) -> None:
        super().__init__()
        self.embed = OverlapPatchEmbed(cin, dim, k, stride)
        self.blocks = nn.ModuleList(
            MiTBlock(dim, cfg.heads[i], cfg.sr_ratios[i], cfg.mlp_ratio) for _ in range(cfg.depths[i])
        )
        self.norm = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, h, w = self.embed(x)
        for blk in self.blocks:
            x = blk(x, h, w)
        return _to_image(self.norm(x), h, w)


class SegFormer(nn.Module):
    """MiT encoder (4 stages) + all-MLP decoder producing 1/4-resolution class logits."""

    def __init__(self, cfg: SegFormerConfig) -> None:
        super().__init__()
        cins = (3, *cfg.dims[:-1])
        geometry = ((7, 4), (3, 2), (3, 2), (3, 2))
        self.stages = nn.ModuleList(
            MiTStage(cins[i], cfg.dims[i], *geometry[i], cfg, i) for i in range(len(cfg.dims))
        )
        self.linears = nn.ModuleList(nn.Linear(d, cfg.decoder_dim) for d in cfg.dims)
        self.fuse = nn.Sequential(
            nn.Conv2d(len(cfg.dims) * cfg.decoder_dim, cfg.decoder_dim, 1, bias=False),
            nn.BatchNorm2d(cfg.decoder_dim),
            nn.ReLU(),
        )
        self.classifier = nn.Conv2d(cfg.decoder_dim, cfg.classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        size = feats[0].shape[2:]
        ups = []
        for feat, lin in zip(feats, self.linears):
            y = _to_image(lin(feat.flatten(2).transpose(1, 2)), feat.shape[2], feat.shape[3])
            if y.shape[2:] != size:
                y = F.interpolate(y, size=size, mode="bilinear", align_corners=False)
            ups.append(y)
        return self.classifier(self.fuse(torch.cat(ups[::-1], dim=1)))


def build(cfg: SegFormerConfig) -> nn.Module:
    """Randomly initialised SegFormer (truncated-normal linears, fan-out normal convs)."""
    net = SegFormer(cfg)
    init_transformer(net)
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels // m.groups
            nn.init.normal_(m.weight, std=(2.0 / fan_out) ** 0.5)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return net


def _spec(name: str, cfg: SegFormerConfig, mini: bool, desc: str, calibration_batch: int) -> ZooModel:
    return ZooModel(
        name=name,
        description=desc,
        inputs=(InputSpec("pixel_values", (1, 3, cfg.image, cfg.image), "float32"),),
        outputs=("logits",),
        build=partial(build, cfg),
        mini=mini,
        calibration_batch=calibration_batch,
    )


B0 = SegFormerConfig(
    dims=(32, 64, 160, 256), depths=(2, 2, 2, 2), heads=(1, 2, 5, 8), sr_ratios=(8, 4, 2, 1),
    mlp_ratio=4, decoder_dim=256, classes=150, image=512,
)
MINI = SegFormerConfig(
    dims=(8, 16, 24, 32), depths=(1, 1, 1, 1), heads=(1, 2, 2, 4), sr_ratios=(8, 4, 2, 1),
    mlp_ratio=2, decoder_dim=16, classes=10, image=64,
)

register(
    _spec("segformer-b0", B0, False, "SegFormer-B0 (MiT-B0 + all-MLP decoder), 150 classes, 1x3x512x512", 4)
)
register(_spec("segformer-mini", MINI, True, "Tiny SegFormer for tests, 10 classes, 1x3x64x64", 32))
