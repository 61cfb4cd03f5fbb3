"""Peak resident memory of one system running a model, in a fresh process (used by korch bench).

    python -m korch.bench_rss korch PLAN_DIR THREADS
    python -m korch.bench_rss onnxruntime MODEL.onnx THREADS [SHAPES]
    python -m korch.bench_rss torch_compile ZOO_NAME THREADS
    python -m korch.bench_rss openvino MODEL.onnx THREADS [SHAPES]

SHAPES (`input_ids=1x32,mask=1x32`) gives inputs with symbolic dims their shape (a bucket's).
"""

from __future__ import annotations

import resource
import sys

# Runs after loading: enough to reach the steady-state working set.
RUNS = 5


def main(system: str, target: str, threads: int, shapes: dict[str, tuple[int, ...]] | None = None) -> None:
    shapes = shapes or {}
    if system == "korch":
        import numpy as np

        import korch.runtime as runtime

        session = runtime.load(target)
        # Zeros, as for the peers below (korch.verify's random feeds would import onnx and the reference).
        feeds = {name: np.zeros(t.shape, t.dtype.numpy) for name, t in session.get_inputs()}
        fn = lambda: session.run(None, feeds)  # noqa: E731
    elif system == "onnxruntime":
        import numpy as np
        import onnxruntime as ort

        # A session as a user makes it, from the file (no Python copy of the model), with nothing of korch
        # imported (korch.backends.onnxruntime would add onnx and korch's IR: 18 MB).
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(target, options, providers=["CPUExecutionProvider"])
        # Values do not change memory use; zeros are valid for index inputs.
        dtypes = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
                  "tensor(bool)": np.bool_, "tensor(double)": np.float64}
        feeds = {i.name: np.zeros(shapes.get(i.name, i.shape), dtypes[i.type]) for i in session.get_inputs()}
        fn = lambda: session.run(None, feeds)  # noqa: E731
    elif system == "openvino":
        import numpy as np

        from korch.backends.openvino import OpenVinoBackend

        kernel, _ = OpenVinoBackend().compile_file(target, threads)      # from the file, like the bench's peer
        ports = kernel.compiled.inputs
        args = [np.zeros(shapes.get(port.get_any_name()) or tuple(port.get_shape()), port.get_element_type().to_dtype())
                for port in ports]
        fn = lambda: kernel.run(args)  # noqa: E731
    elif system == "torch_compile":
        import torch

        from korch import zoo

        torch.set_num_threads(threads)
        args = [torch.from_numpy(v) for v in zoo.example_inputs(target).values()]
        fn = zoo.torch_compiled(zoo.build_module(target), args, freezing=True)
    else:
        raise SystemExit(f"unknown system {system!r}")
    for _ in range(RUNS):
        fn()
    print(peak_rss_mb())


def peak_rss_mb() -> float:
    """This process's peak resident memory. VmHWM belongs to the address space made by exec;
    ru_maxrss does not: it keeps the high-water mark of the parent that forked us."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def parse_shapes(text: str) -> dict[str, tuple[int, ...]]:
    """`a=1x32,b=1x32` -> {"a": (1, 32), "b": (1, 32)} (written by korch.bench, not by users)."""
    pairs = (item.split("=") for item in text.split(",") if item)
    return {name: tuple(int(d) for d in dims.split("x") if d) for name, dims in pairs}


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), parse_shapes(sys.argv[4]) if len(sys.argv) > 4 else None)
