"""EfficientViT (MIT) classifier: DSConv/MBConv stages + multi-scale ReLU linear attention (LiteMLA)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from korch.zoo._layers import ConvBNAct, init_conv_kaiming
from korch.zoo.registry import InputSpec, ZooModel, register


@dataclass(frozen=True)
class EfficientViTConfig:
    """Stage widths/depths, attention head dim, MBConv expansion, head widths, classes, image size."""

    widths: tuple[int, int, int, int, int]
    depths: tuple[int, int, int, int, int]
    head_dim: int
    expand: int
    head_widths: tuple[int, int]
    classes: int
    image: int


class DSConv(nn.Module):
    """Depthwise 3x3 (BN, Hardswish) + pointwise 1x1 (BN)."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.depth = ConvBNAct(cin, cin, 3, stride, groups=cin, act=nn.Hardswish())
        self.point = ConvBNAct(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.point(self.depth(x))


class MBConv(nn.Module):
    """Inverted residual: 1x1 expand (Hardswish), depthwise 3x3 (Hardswish), 1x1 project (BN only).

    With fewer_norm, the first two convs carry a bias and no BN (as in EfficientViT's later stages).
    """

    def __init__(self, cin: int, cout: int, stride: int, expand: int, fewer_norm: bool = False) -> None:
        super().__init__()
        mid = cin * expand
        if fewer_norm:
            self.inverted: nn.Module = nn.Sequential(nn.Conv2d(cin, mid, 1), nn.Hardswish())
            dw = nn.Conv2d(mid, mid, 3, stride, 1, groups=mid)
            self.depth: nn.Module = nn.Sequential(dw, nn.Hardswish())
        else:
            self.inverted = ConvBNAct(cin, mid, 1, act=nn.Hardswish())
            self.depth = ConvBNAct(mid, mid, 3, stride, groups=mid, act=nn.Hardswish())
        self.point = ConvBNAct(mid, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.point(self.depth(self.inverted(x)))


class Residual(nn.Module):
    """x + f(x)."""

    def __init__(self, fn: nn.Module) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fn(x)


class LiteMLA(nn.Module):
    """Multi-scale linear attention: qkv 1x1, 5x5 depthwise + grouped 1x1 aggregation, ReLU kernel."""

    # The reference uses eps=1e-15, but onnxscript's "x + 0 -> x" rewrite matches constants with
    # abs_tol=1e-8 and would silently delete the Add, turning 0/0 rows into NaN in the exported graph.
    def __init__(self, ch: int, head_dim: int, scales: tuple[int, ...] = (5,), eps: float = 1e-6) -> None:
        super().__init__()
        heads = ch // head_dim
        total = heads * head_dim
        self.head_dim = head_dim
        self.eps = eps
        self.qkv = nn.Conv2d(ch, 3 * total, 1, bias=False)
        self.aggreg = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(3 * total, 3 * total, s, padding=s // 2, groups=3 * total, bias=False),
                nn.Conv2d(3 * total, 3 * total, 1, groups=3 * heads, bias=False),
            )
            for s in scales
        )
        self.proj = ConvBNAct(total * (1 + len(scales)), ch, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        qkv = self.qkv(x)
        qkv = torch.cat([qkv, *[op(qkv) for op in self.aggreg]], dim=1)
        qkv = qkv.reshape(b, -1, 3 * self.head_dim, h * w).transpose(-1, -2)
        q, k, v = qkv.split(self.head_dim, dim=-1)
        q, k = F.relu(q), F.relu(k)
        v = F.pad(v, (0, 1), mode="constant", value=1.0)
        out = torch.matmul(q, torch.matmul(k.transpose(-1, -2), v))
        out = out[..., :-1] / (out[..., -1:] + self.eps)
        out = out.transpose(-1, -2).reshape(b, -1, h, w)
        return self.proj(out)


class EfficientViTBlock(nn.Module):
    """Residual LiteMLA (context) followed by residual MBConv (local)."""

    def __init__(self, ch: int, head_dim: int, expand: int) -> None:
        super().__init__()
        self.context = Residual(LiteMLA(ch, head_dim))
        self.local = Residual(MBConv(ch, ch, 1, expand, fewer_norm=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.local(self.context(x))


class EfficientViT(nn.Module):
    """Stem + 2 conv stages + 2 attention stages + classification head."""

    def __init__(self, cfg: EfficientViTConfig) -> None:
        super().__init__()
        w, d = cfg.widths, cfg.depths
        layers: list[nn.Module] = [ConvBNAct(3, w[0], 3, 2, act=nn.Hardswish())]
        layers += [Residual(DSConv(w[0], w[0])) for _ in range(d[0])]
        cin = w[0]
        for i in (1, 2):
            for j in range(d[i]):
                block = MBConv(cin if j == 0 else w[i], w[i], 2 if j == 0 else 1, cfg.expand)
                layers.append(block if j == 0 else Residual(block))
            cin = w[i]
        for i in (3, 4):
            layers.append(MBConv(cin, w[i], 2, cfg.expand, fewer_norm=True))
            layers += [EfficientViTBlock(w[i], cfg.head_dim, cfg.expand) for _ in range(d[i])]
            cin = w[i]
        self.backbone = nn.Sequential(*layers)
        h0, h1 = cfg.head_widths
        self.head_conv = ConvBNAct(cin, h0, 1, act=nn.Hardswish())
        self.head_fc = nn.Sequential(nn.Linear(h0, h1, bias=False), nn.LayerNorm(h1), nn.Hardswish())
        self.classifier = nn.Linear(h1, cfg.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head_conv(self.backbone(x))
        x = torch.mean(x, dim=(2, 3))
        return self.classifier(self.head_fc(x))


def build(cfg: EfficientViTConfig) -> nn.Module:
    """Randomly initialised EfficientViT (He-normal convs, default linears)."""
    net = EfficientViT(cfg)
    init_conv_kaiming(net)
    return net


def _spec(name: str, cfg: EfficientViTConfig, mini: bool, desc: str, calibration_batch: int) -> ZooModel:
    return ZooModel(
        name=name,
        description=desc,
        inputs=(InputSpec("input", (1, 3, cfg.image, cfg.image), "float32"),),
        outputs=("logits",),
        build=partial(build, cfg),
        mini=mini,
        calibration_batch=calibration_batch,
    )


B1 = EfficientViTConfig(
    widths=(16, 32, 64, 128, 256), depths=(1, 2, 3, 3, 4), head_dim=16, expand=4,
    head_widths=(1536, 1600), classes=1000, image=224,
)
MINI = EfficientViTConfig(
    widths=(8, 8, 16, 16, 32), depths=(1, 2, 2, 1, 1), head_dim=8, expand=2,
    head_widths=(32, 32), classes=10, image=64,
)

register(_spec("efficientvit-b1", B1, False, "EfficientViT-B1 (LiteMLA), 1000 classes, 1x3x224x224", 16))
register(_spec("efficientvit-mini", MINI, True, "Tiny EfficientViT for tests, 10 classes, 1x3x64x64", 32))
