"""Two classic CNNs with wide 3x3 convolutions, as a user's ONNX files, built with korch's own torch.

    python benchmarks/plain_convnets.py OUT_DIR [resnet50] [vgg16]
    python benchmarks/zoo_bench.py --threads 2 --out RUN OUT_DIR/resnet50.onnx OUT_DIR/vgg16.onnx

ResNet-50 (v1.5: the stride on the bottleneck's 3x3 convolution) and VGG-16 (configuration D), their
layers written out here in torch (torchvision does not load beside the CPU build of torch 2.13 that
korch pins; benchmarks/export_torchvision.py needs a venv of its own and a newer torch). Random
weights from torch.manual_seed(0), batch norm statistics drawn too (so that folding them is not the
identity), eval mode, exported by torch.onnx.export's TorchScript exporter at opset 18, which folds
each batch norm into its convolution as a user's export does; the IR version is capped at 9, which
onnxruntime reads. Input [1, 3, 224, 224] named "x", output "logits" [1, 1000].
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

OPSET = 18
IR_VERSION = 9


def resnet50() -> object:
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = 4 * width
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            return (self.body(x) + self.skip(x)).relu()

    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = 4 * width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000))


def vgg16() -> object:
    from torch import nn

    layers: list[nn.Module] = []
    cin = 3
    for v in (64, 64, "pool", 128, 128, "pool", 256, 256, 256, "pool", 512, 512, 512, "pool", 512, 512, 512, "pool"):
        if v == "pool":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU()]
            cin = v
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Linear(4096, 4096),
                         nn.ReLU(), nn.Linear(4096, 1000))


MODELS: dict[str, Callable[[], object]] = {"resnet50": resnet50, "vgg16": vgg16}


def export(name: str, out: Path) -> Path:
    import onnx
    import torch

    torch.manual_seed(0)
    module = MODELS[name]()
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
    module.eval()
    path = out / f"{name}.onnx"
    with torch.no_grad():
        torch.onnx.export(module, (torch.randn(1, 3, 224, 224),), str(path), input_names=["x"], output_names=["logits"],
                          opset_version=OPSET, dynamo=False)
    model = onnx.load(str(path))
    model.ir_version = min(model.ir_version, IR_VERSION)
    onnx.save(model, str(path))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("names", nargs="*", default=list(MODELS), help=f"default: all ({', '.join(MODELS)})")
    args = parser.parse_args()
    if unknown := sorted(set(args.names) - set(MODELS)):
        parser.error(f"unknown model(s) {', '.join(unknown)}: choose from {', '.join(MODELS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        print(export(name, args.out))


if __name__ == "__main__":
    main()
