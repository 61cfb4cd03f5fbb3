"""YOLOX detector (Nano-style: depthwise convs, Focus stem, SiLU, CSPDarknet + PAFPN + decoupled head)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from korch.zoo._layers import ConvBNAct, init_conv_kaiming
from korch.zoo.registry import InputSpec, ZooModel, register


@dataclass(frozen=True)
class YOLOXConfig:
    """Depth/width multipliers, class count and image size."""

    depth: float
    width: float
    classes: int
    image: int


def base_conv(cin: int, cout: int, k: int, stride: int = 1) -> ConvBNAct:
    """Conv + BN + SiLU."""
    return ConvBNAct(cin, cout, k, stride, act=nn.SiLU())


def dw_conv(cin: int, cout: int, k: int, stride: int = 1) -> nn.Sequential:
    """Depthwise k x k BaseConv followed by pointwise 1x1 BaseConv."""
    return nn.Sequential(
        ConvBNAct(cin, cin, k, stride, groups=cin, act=nn.SiLU()), base_conv(cin, cout, 1)
    )


class Focus(nn.Module):
    """Space-to-depth (four pixel-parity slices concatenated on channels) then a 3x3 BaseConv."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = base_conv(4 * cin, cout, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tl, tr = x[..., ::2, ::2], x[..., ::2, 1::2]
        bl, br = x[..., 1::2, ::2], x[..., 1::2, 1::2]
        return self.conv(torch.cat((tl, bl, tr, br), dim=1))


class Bottleneck(nn.Module):
    """1x1 BaseConv + 3x3 depthwise-separable conv, optional identity shortcut."""

    def __init__(self, ch: int, shortcut: bool) -> None:
        super().__init__()
        self.conv1 = base_conv(ch, ch, 1)
        self.conv2 = dw_conv(ch, ch, 3)
        self.shortcut = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv2(self.conv1(x))
        return x + y if self.shortcut else y


class CSPLayer(nn.Module):
    """Cross-stage partial block: two 1x1 branches, bottlenecks on one, concat, 1x1 fuse."""

    def __init__(self, cin: int, cout: int, n: int, shortcut: bool = True) -> None:
        super().__init__()
        hidden = cout // 2
        self.conv1 = base_conv(cin, hidden, 1)
        self.conv2 = base_conv(cin, hidden, 1)
        self.conv3 = base_conv(2 * hidden, cout, 1)
        self.m = nn.Sequential(*[Bottleneck(hidden, shortcut) for _ in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv3(torch.cat((self.m(self.conv1(x)), self.conv2(x)), dim=1))


class SPPBottleneck(nn.Module):
    """1x1 reduce, parallel stride-1 max pools (5/9/13) concatenated with the input, 1x1 fuse."""

    def __init__(self, cin: int, cout: int, kernels: tuple[int, ...] = (5, 9, 13)) -> None:
        super().__init__()
        hidden = cin // 2
        self.conv1 = base_conv(cin, hidden, 1)
        self.pools = nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in kernels)
        self.conv2 = base_conv(hidden * (len(kernels) + 1), cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        return self.conv2(torch.cat([x, *[p(x) for p in self.pools]], dim=1))


class YOLOX(nn.Module):
    """CSPDarknet backbone, PAFPN neck, decoupled heads; returns [1, anchors, 5 + classes]."""

    def __init__(self, cfg: YOLOXConfig) -> None:
        super().__init__()
        c = int(cfg.width * 64)
        n = max(round(cfg.depth * 3), 1)
        self.stem = Focus(3, c)
        self.dark2 = nn.Sequential(dw_conv(c, 2 * c, 3, 2), CSPLayer(2 * c, 2 * c, n))
        self.dark3 = nn.Sequential(dw_conv(2 * c, 4 * c, 3, 2), CSPLayer(4 * c, 4 * c, 3 * n))
        self.dark4 = nn.Sequential(dw_conv(4 * c, 8 * c, 3, 2), CSPLayer(8 * c, 8 * c, 3 * n))
        self.dark5 = nn.Sequential(
            dw_conv(8 * c, 16 * c, 3, 2), SPPBottleneck(16 * c, 16 * c), CSPLayer(16 * c, 16 * c, n, False)
        )
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.lateral_conv0 = base_conv(16 * c, 8 * c, 1)
        self.c3_p4 = CSPLayer(16 * c, 8 * c, n, False)
        self.reduce_conv1 = base_conv(8 * c, 4 * c, 1)
        self.c3_p3 = CSPLayer(8 * c, 4 * c, n, False)
        self.bu_conv2 = dw_conv(4 * c, 4 * c, 3, 2)
        self.c3_n3 = CSPLayer(8 * c, 8 * c, n, False)
        self.bu_conv1 = dw_conv(8 * c, 8 * c, 3, 2)
        self.c3_n4 = CSPLayer(16 * c, 16 * c, n, False)
        head_ch = int(256 * cfg.width)
        self.heads = nn.ModuleList(YOLOXHead(ch, head_ch, cfg.classes) for ch in (4 * c, 8 * c, 16 * c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x3 = self.dark3(self.dark2(self.stem(x)))
        x4 = self.dark4(x3)
        x5 = self.dark5(x4)
        fpn0 = self.lateral_conv0(x5)
        f0 = self.c3_p4(torch.cat((self.up(fpn0), x4), dim=1))
        fpn1 = self.reduce_conv1(f0)
        pan2 = self.c3_p3(torch.cat((self.up(fpn1), x3), dim=1))
        pan1 = self.c3_n3(torch.cat((self.bu_conv2(pan2), fpn1), dim=1))
        pan0 = self.c3_n4(torch.cat((self.bu_conv1(pan1), fpn0), dim=1))
        outs = [head(f).flatten(2) for head, f in zip(self.heads, (pan2, pan1, pan0))]
        return torch.cat(outs, dim=2).permute(0, 2, 1)


class YOLOXHead(nn.Module):
    """Decoupled head for one level: stem, cls and reg towers; emits [reg(4), sigmoid(obj), sigmoid(cls)]."""

    def __init__(self, cin: int, ch: int, classes: int) -> None:
        super().__init__()
        self.stem = base_conv(cin, ch, 1)
        self.cls_convs = nn.Sequential(dw_conv(ch, ch, 3), dw_conv(ch, ch, 3))
        self.reg_convs = nn.Sequential(dw_conv(ch, ch, 3), dw_conv(ch, ch, 3))
        self.cls_pred = nn.Conv2d(ch, classes, 1)
        self.reg_pred = nn.Conv2d(ch, 4, 1)
        self.obj_pred = nn.Conv2d(ch, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        cls_feat = self.cls_convs(x)
        reg_feat = self.reg_convs(x)
        return torch.cat(
            (self.reg_pred(reg_feat), self.obj_pred(reg_feat).sigmoid(), self.cls_pred(cls_feat).sigmoid()),
            dim=1,
        )


def build(cfg: YOLOXConfig) -> nn.Module:
    """Randomly initialised YOLOX (He-normal convs)."""
    net = YOLOX(cfg)
    init_conv_kaiming(net)
    return net


def _spec(name: str, cfg: YOLOXConfig, mini: bool, desc: str, calibration_batch: int) -> ZooModel:
    return ZooModel(
        name=name,
        description=desc,
        inputs=(InputSpec("images", (1, 3, cfg.image, cfg.image), "float32"),),
        outputs=("predictions",),
        build=partial(build, cfg),
        mini=mini,
        calibration_batch=calibration_batch,
    )


NANO = YOLOXConfig(depth=0.33, width=0.25, classes=80, image=416)
MINI = YOLOXConfig(depth=0.33, width=0.125, classes=4, image=64)

register(
    _spec("yolox-nano", NANO, False, "YOLOX-Nano, 80 classes, raw head output [1, 3549, 85], 1x3x416x416", 8)
)
register(_spec("yolox-mini", MINI, True, "Tiny YOLOX (width 0.125) for tests, 4 classes, 1x3x64x64", 32))
