"""YOLOv4 detector: CSPDarknet53 (Mish) backbone, SPP (5/9/13 max pools), PANet neck, three YOLO heads."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from korch.zoo._layers import ConvBNAct, init_conv_kaiming
from korch.zoo.registry import InputSpec, ZooModel, register


@dataclass(frozen=True)
class YOLOv4Config:
    """Base width (32 in YOLOv4), residual blocks per CSP stage, head channels and image size."""

    base: int
    blocks: tuple[int, int, int, int, int]
    head_out: int
    image: int


def mish(cin: int, cout: int, k: int, stride: int = 1) -> ConvBNAct:
    """Conv + BN + Mish (backbone)."""
    return ConvBNAct(cin, cout, k, stride, act=nn.Mish())


def leaky(cin: int, cout: int, k: int, stride: int = 1) -> ConvBNAct:
    """Conv + BN + LeakyReLU(0.1) (neck and heads)."""
    return ConvBNAct(cin, cout, k, stride, act=nn.LeakyReLU(0.1))


class ResBlock(nn.Module):
    """1x1 then 3x3 Mish convs with identity shortcut."""

    def __init__(self, ch: int, hidden: int) -> None:
        super().__init__()
        self.body = nn.Sequential(mish(ch, hidden, 1), mish(hidden, ch, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class CSPStage(nn.Module):
    """Stride-2 downsample, split into a shortcut 1x1 and a residual branch, concat, 1x1 fuse."""

    def __init__(self, cin: int, cout: int, blocks: int, first: bool) -> None:
        super().__init__()
        part = cout if first else cout // 2
        self.down = mish(cin, cout, 3, 2)
        self.split0 = mish(cout, part, 1)
        self.split1 = mish(cout, part, 1)
        self.blocks = nn.Sequential(*[ResBlock(part, cout // 2 if first else part) for _ in range(blocks)])
        self.post = mish(part, part, 1)
        self.fuse = mish(2 * part, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.down(x)
        y = self.post(self.blocks(self.split1(x)))
        return self.fuse(torch.cat((y, self.split0(x)), dim=1))


def five_convs(cin: int, ch: int) -> nn.Sequential:
    """Alternating 1x1 (ch) / 3x3 (2*ch) leaky convs, five in total, ending at ch channels."""
    layers = [leaky(cin, ch, 1)]
    for _ in range(2):
        layers += [leaky(ch, 2 * ch, 3), leaky(2 * ch, ch, 1)]
    return nn.Sequential(*layers)


class SPP(nn.Module):
    """Three-conv bottleneck, concat of stride-1 max pools (13, 9, 5) with the input, three convs."""

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.pre = nn.Sequential(leaky(2 * ch, ch, 1), leaky(ch, 2 * ch, 3), leaky(2 * ch, ch, 1))
        self.pools = nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in (13, 9, 5))
        self.post = nn.Sequential(leaky(4 * ch, ch, 1), leaky(ch, 2 * ch, 3), leaky(2 * ch, ch, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre(x)
        return self.post(torch.cat([*[p(x) for p in self.pools], x], dim=1))


class YOLOv4(nn.Module):
    """Returns the three raw head maps at strides 8, 16 and 32."""

    def __init__(self, cfg: YOLOv4Config) -> None:
        super().__init__()
        b = cfg.base
        self.stem = mish(3, b, 3)
        chans = (b, 2 * b, 4 * b, 8 * b, 16 * b, 32 * b)
        self.stages = nn.ModuleList(
            CSPStage(chans[i], chans[i + 1], cfg.blocks[i], first=i == 0) for i in range(5)
        )
        self.spp = SPP(16 * b)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.td1_reduce, self.td1_lateral = leaky(16 * b, 8 * b, 1), leaky(16 * b, 8 * b, 1)
        self.td1 = five_convs(16 * b, 8 * b)
        self.td2_reduce, self.td2_lateral = leaky(8 * b, 4 * b, 1), leaky(8 * b, 4 * b, 1)
        self.td2 = five_convs(8 * b, 4 * b)
        self.head8 = nn.Sequential(leaky(4 * b, 8 * b, 3), nn.Conv2d(8 * b, cfg.head_out, 1))
        self.bu1_down, self.bu1 = leaky(4 * b, 8 * b, 3, 2), five_convs(16 * b, 8 * b)
        self.head16 = nn.Sequential(leaky(8 * b, 16 * b, 3), nn.Conv2d(16 * b, cfg.head_out, 1))
        self.bu2_down, self.bu2 = leaky(8 * b, 16 * b, 3, 2), five_convs(32 * b, 16 * b)
        self.head32 = nn.Sequential(leaky(16 * b, 32 * b, 3), nn.Conv2d(32 * b, cfg.head_out, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        feats = []
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        c3, c4, c5 = feats[2], feats[3], feats[4]
        p5 = self.spp(c5)
        p4 = self.td1(torch.cat((self.td1_lateral(c4), self.up(self.td1_reduce(p5))), dim=1))
        p3 = self.td2(torch.cat((self.td2_lateral(c3), self.up(self.td2_reduce(p4))), dim=1))
        n4 = self.bu1(torch.cat((self.bu1_down(p3), p4), dim=1))
        n5 = self.bu2(torch.cat((self.bu2_down(n4), p5), dim=1))
        return self.head8(p3), self.head16(n4), self.head32(n5)


def build(cfg: YOLOv4Config) -> nn.Module:
    """Randomly initialised YOLOv4 (He-normal convs)."""
    net = YOLOv4(cfg)
    init_conv_kaiming(net)
    return net


def _spec(name: str, cfg: YOLOv4Config, mini: bool, desc: str, calibration_batch: int) -> ZooModel:
    return ZooModel(
        name=name,
        description=desc,
        inputs=(InputSpec("images", (1, 3, cfg.image, cfg.image), "float32"),),
        outputs=("head_s8", "head_s16", "head_s32"),
        build=partial(build, cfg),
        mini=mini,
        calibration_batch=calibration_batch,
    )


FULL = YOLOv4Config(base=32, blocks=(1, 2, 8, 8, 4), head_out=255, image=416)
MINI = YOLOv4Config(base=4, blocks=(1, 1, 2, 1, 1), head_out=21, image=64)

register(
    _spec("yolov4", FULL, False, "YOLOv4 (CSPDarknet53-Mish, SPP, PANet), 3 heads x 255 ch, 1x3x416x416", 2)
)
register(
    _spec("yolov4-mini", MINI, True, "Tiny YOLOv4 (base width 4) for tests, 3 heads x 21 ch, 1x3x64x64", 32)
)
