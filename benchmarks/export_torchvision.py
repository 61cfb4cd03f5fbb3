"""torchvision models exported to ONNX files, for benchmarking korch on models outside its zoo.

    python -m venv /tmp/tv && /tmp/tv/bin/pip install torch==2.14.1 torchvision==0.29.1 onnx onnxscript
    /tmp/tv/bin/python benchmarks/export_torchvision.py OUT_DIR [NAME ...]
    python benchmarks/zoo_bench.py --threads 2 --out RUN OUT_DIR/resnet50.onnx ...

Runs in a virtual environment of its own: torchvision's wheels do not load beside the CPU build of
torch 2.13 that korch pins ("operator torchvision::nms does not exist"), and korch needs no
torchvision. Each model is built with random weights (torch.manual_seed(0)), in eval mode, and
exported by torch.onnx.export's default (dynamo) exporter at opset 18, as a user of torch 2.14
would; the IR version is capped at 10, which onnxruntime reads. A segmentation model's dict output
is reduced to its "out" map.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

OPSET = 18
IR_VERSION = 10


def specs() -> dict[str, tuple[Callable[[], object], tuple[int, ...]]]:
    from torchvision import models as m

    seg = m.segmentation
    return {
        "resnet50": (m.resnet50, (1, 3, 224, 224)),
        "mobilenet_v3_large": (m.mobilenet_v3_large, (1, 3, 224, 224)),
        "efficientnet_b0": (m.efficientnet_b0, (1, 3, 224, 224)),
        "convnext_tiny": (m.convnext_tiny, (1, 3, 224, 224)),
        "regnet_y_800mf": (m.regnet_y_800mf, (1, 3, 224, 224)),
        "shufflenet_v2_x1_0": (m.shufflenet_v2_x1_0, (1, 3, 224, 224)),
        "densenet121": (m.densenet121, (1, 3, 224, 224)),
        "swin_t": (m.swin_t, (1, 3, 224, 224)),
        "maxvit_t": (m.maxvit_t, (1, 3, 224, 224)),
        "deeplabv3_mobilenet": (lambda: seg.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                         aux_loss=False), (1, 3, 256, 256)),
        "lraspp": (lambda: seg.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None), (1, 3, 256, 256)),
        "r3d_18": (m.video.r3d_18, (1, 3, 8, 112, 112)),
    }


def export(name: str, make: Callable[[], object], shape: tuple[int, ...], out: Path) -> Path:
    import onnx
    import torch

    class Main(torch.nn.Module):
        """The model with a dict output reduced to its "out" tensor."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.inner(x)
            return y["out"] if isinstance(y, dict) else y

    torch.manual_seed(0)
    module = Main(make()).eval()
    path = out / f"{name}.onnx"
    with torch.no_grad():
        program = torch.onnx.export(module, (torch.randn(*shape),), dynamo=True, opset_version=OPSET)
    program.save(str(path))
    model = onnx.load(str(path))
    if model.ir_version > IR_VERSION:
        model.ir_version = IR_VERSION
        onnx.save(model, str(path))
    return path


def main() -> int:
    known = specs()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("names", nargs="*", default=list(known), help=f"default: all ({', '.join(known)})")
    args = parser.parse_args()
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; known: {', '.join(known)}")
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.names:
        make, shape = known[name]
        try:
            print(export(name, make, shape, args.out), flush=True)
        except Exception as e:  # one model's exporter failure does not stop the others
            failed += 1
            print(f"{name}: export failed ({type(e).__name__}: {str(e)[:300]})", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
