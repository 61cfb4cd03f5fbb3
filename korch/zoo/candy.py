"""Fast neural style transfer network (Johnson et al.), the architecture of the ONNX zoo 'candy' model."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from korch.zoo._layers import init_conv_kaiming
from korch.zoo.registry import InputSpec, ZooModel, register


@dataclass(frozen=True)
class CandyConfig:
    """Channel widths of the three encoder convs, residual block count and image size."""

    widths: tuple[int, int, int]
    res_blocks: int
    image: int


class ReflectConv(nn.Module):
    """Reflection padding of k // 2 followed by a strided conv."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1) -> None:
        super().__init__()
        self.pad = nn.ReflectionPad2d(k // 2)
        self.conv = nn.Conv2d(cin, cout, k, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.pad(x))


class ConvINReLU(nn.Module):
    """ReflectConv + InstanceNorm (affine) + ReLU, with optional nearest x2 upsample in front."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, upsample: bool = False) -> None:
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="nearest") if upsample else nn.Identity()
        self.conv = ReflectConv(cin, cout, k, stride)
        self.norm = nn.InstanceNorm2d(cout, affine=True)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.conv(self.up(x))))


class ResidualBlock(nn.Module):
    """conv-IN-ReLU-conv-IN with identity shortcut."""

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.conv1 = ReflectConv(ch, ch, 3)
        self.in1 = nn.InstanceNorm2d(ch, affine=True)
        self.conv2 = ReflectConv(ch, ch, 3)
        self.in2 = nn.InstanceNorm2d(ch, affine=True)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.in1(self.conv1(x)))
        return x + self.in2(self.conv2(y))


class StyleTransferNet(nn.Module):
    """9x9 conv, two stride-2 convs, residual blocks, two upsample convs, 9x9 output conv."""

    def __init__(self, cfg: CandyConfig) -> None:
        super().__init__()
        c1, c2, c3 = cfg.widths
        self.encoder = nn.Sequential(
            ConvINReLU(3, c1, 9), ConvINReLU(c1, c2, 3, stride=2), ConvINReLU(c2, c3, 3, stride=2)
        )
        self.res = nn.Sequential(*[ResidualBlock(c3) for _ in range(cfg.res_blocks)])
        self.decoder = nn.Sequential(
            ConvINReLU(c3, c2, 3, upsample=True), ConvINReLU(c2, c1, 3, upsample=True), ReflectConv(c1, 3, 9)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.res(self.encoder(x)))


def build(cfg: CandyConfig) -> nn.Module:
    """Randomly initialised style-transfer network."""
    net = StyleTransferNet(cfg)
    init_conv_kaiming(net)
    return net


def _spec(name: str, cfg: CandyConfig, mini: bool, desc: str) -> ZooModel:
    return ZooModel(
        name=name,
        description=desc,
        inputs=(InputSpec("input", (1, 3, cfg.image, cfg.image), "float32"),),
        outputs=("output",),
        build=partial(build, cfg),
        mini=mini,
    )


FULL = CandyConfig(widths=(32, 64, 128), res_blocks=5, image=224)
MINI = CandyConfig(widths=(4, 8, 16), res_blocks=2, image=32)

register(
    _spec("candy", FULL, False, "Fast neural style transfer (Johnson et al., ONNX-zoo candy), 1x3x224x224")
)
register(_spec("candy-mini", MINI, True, "Tiny candy style-transfer net for tests, 1x3x32x32"))
