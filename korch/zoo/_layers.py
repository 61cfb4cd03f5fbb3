"""Small building blocks and weight-init helpers shared by the zoo model definitions."""

from __future__ import annotations

import math

import torch
from torch import nn


def init_conv_kaiming(module: nn.Module) -> None:
    """He-normal init (fan_in, ReLU gain) for every conv; zero conv biases."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)


@torch.no_grad()
def trunc_normal_(tensor: torch.Tensor, std: float) -> torch.Tensor:
    """Normal(0, std) truncated to +-2 std via the inverse CDF (much faster than torch's rejection loop)."""
    bound = math.erf(2.0 / math.sqrt(2.0))  # 2 * Phi(2) - 1
    tensor.uniform_(-bound, bound).erfinv_().mul_(std * math.sqrt(2.0))
    return tensor.clamp_(-2 * std, 2 * std)


def init_transformer(module: nn.Module, std: float = 0.02) -> None:
    """BERT/ViT-style init: truncated normal(std) for linear/embedding weights, zero biases, unit norms."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            trunc_normal_(m.weight, std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Explicit scaled dot-product attention on [B, heads, N, d] tensors (no fused SDPA)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, N, C] -> [B, heads, N, C // heads]."""
    b, n, c = x.shape
    return x.reshape(b, n, heads, c // heads).permute(0, 2, 1, 3)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, heads, N, d] -> [B, N, heads * d]."""
    b, h, n, d = x.shape
    return x.permute(0, 2, 1, 3).reshape(b, n, h * d)


class ConvBNAct(nn.Module):
    """Conv2d (no bias) + BatchNorm2d + optional activation, 'same' padding for odd kernels."""

    def __init__(
        self,
        cin: int,
        cout: int,
        k: int = 1,
        stride: int = 1,
        groups: int = 1,
        act: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = act if act is not None else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))
