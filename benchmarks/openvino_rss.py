"""Where OpenVINO's resident memory goes, and which settings or loading methods lower its peak RSS.

    python benchmarks/openvino_rss.py sweep MODEL.onnx [--threads 2] [--repeats 3] [--configs a,b,...]
    python benchmarks/openvino_rss.py child CONFIG MODEL.onnx THREADS     (one configuration, this process)
    python benchmarks/openvino_rss.py duel MODEL.onnx BASE VARIANT [--threads 2] [--rounds 30]
    python benchmarks/openvino_rss.py list

`sweep` runs each configuration in a fresh process (one at a time), `--repeats` times, and prints the
median peak RSS (VmHWM, as korch.bench_rss reads it), the resident memory after compiling and after
the runs, and what the process maps at the end grouped by kind (smaps: OpenVINO's libraries, TBB,
onnxruntime's, other libraries, the C heap, anonymous mappings, the model file). Each child loads the
model, runs it 5 times on zeros (korch.bench_rss's RUNS) and reports. `onnxruntime` is the session a
user makes from the file; `ov-korch` is the OpenVINO peer exactly as korch.bench_rss makes it (through
korch.backends.openvino, so with onnx and korch imported); every other `ov-*` configuration uses
openvino alone, with COMPILE_CONFIG (korch.backends.openvino.backend) and one change. `*-tiny`
configurations run a one-Relu model instead of MODEL: the engine's libraries and pools alone.
`*-ext` configurations read MODEL saved again with its weights in MODEL-ext.data (written once beside
MODEL); OpenVINO's ONNX reader maps that file read-only and its Constants keep pointing into the map
after compiling; `-drop` drops this process's pages of the map while compiling and once after.

Measured (efficientvit-b1, 2 threads, median of 3 fresh processes; 2026.4.1, onnxruntime 1.32.0):
onnxruntime 138 MB; OpenVINO with COMPILE_CONFIG 193 (korch.bench_rss's peer, korch imported: 203).
No compile property moved it by more than 1 MB. Weights in a mapped file whose pages are dropped
every 2 ms while compiling: 158 (1.15x), same speed side by side; every 50 ms: 183, the compile's
peak outruns the drops. malloc_trim or MALLOC_ARENA_MAX=1: -6 MB. The floor is OpenVINO's own:
a one-Relu model reads 90 MB against onnxruntime's 60 (its libraries 36-49 MB resident, onnxruntime's 20).

`duel` compiles two configurations in one process and alternates them for `--rounds` rounds: at each
switch a short pause and an untimed warm-up call, then `--calls` timed calls whose mean is that
round's time. Prints the median and p10-p90 of each, and their ratio. Only configurations that
differ in per-model settings or in-process actions can be duelled (not environment variables).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = 5            # as korch.bench_rss
# korch.backends.openvino.backend.COMPILE_CONFIG, written out so that the children need not import korch.
KORCH_CONFIG = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32",
                "ENABLE_CPU_PINNING": False}

# name -> how the child loads the model. Keys: system (onnxruntime / openvino / korch), compile (changes
# to KORCH_CONFIG; None drops a key), core (Core properties), read (file: compile_model(path);
# model: read_model(path) then compile; bytes: read_model(bytes of the file), as korch reads a plan's
# region), drop_model (delete the ov.Model after compiling), release (compiled.release_memory() after
# compiling), trim (malloc_trim(0) after compiling), env (environment of the child), tiny, external (the
# model saved with its weights in a separate file, which OpenVINO's ONNX reader maps read-only), drop_pages
# (while compiling, every 50 ms or the interval given, and once after, drop this process's resident pages
# of that map: see drop_mapped).
CONFIGS: dict[str, dict] = {
    "onnxruntime": {"system": "onnxruntime"},
    "ov-korch": {"system": "korch"},
    "ov-plain": {},
    "ov-read-model": {"read": "model"},
    "ov-read-model-drop": {"read": "model", "drop_model": True},
    "ov-read-bytes": {"read": "bytes"},
    "ov-read-bytes-drop": {"read": "bytes", "drop_model": True},
    "ov-no-mmap": {"core": {"ENABLE_MMAP": False}},
    "ov-rtcache-0": {"compile": {"CPU_RUNTIME_CACHE_CAPACITY": 0}},
    "ov-pin": {"compile": {"ENABLE_CPU_PINNING": True}},
    "ov-no-hint": {"compile": {"PERFORMANCE_HINT": None, "NUM_STREAMS": None}},
    "ov-hint-only": {"compile": {"NUM_STREAMS": None}},
    "ov-threads-0": {"compile": {"INFERENCE_NUM_THREADS": None}},
    "ov-denormals": {"compile": {"CPU_DENORMALS_OPTIMIZATION": True}},
    "ov-no-ht": {"compile": {"ENABLE_HYPER_THREADING": False}},
    "ov-any-core": {"compile": {"SCHEDULING_CORE_TYPE": "ANY_CORE"}},
    "ov-dynquant-0": {"compile": {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}},
    "ov-distribution-none": {"compile": {"MODEL_DISTRIBUTION_POLICY": ""}},
    "ov-release": {"release": True},
    "ov-trim": {"trim": True},
    "ov-release-trim": {"release": True, "trim": True, "drop_model": True, "read": "model"},
    "ov-arena-1": {"env": {"MALLOC_ARENA_MAX": "1"}},
    "ov-arena-2": {"env": {"MALLOC_ARENA_MAX": "2"}},
    "ov-mmap-threshold": {"env": {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}},
    "ov-onednn-cache-0": {"env": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "0"}},
    "onnxruntime-ext": {"system": "onnxruntime", "external": True},
    "ov-ext": {"external": True},
    "ov-ext-drop": {"external": True, "drop_pages": True},
    "ov-ext-drop-trim": {"external": True, "drop_pages": True, "trim": True},
    "ov-ext-drop-10ms": {"external": True, "drop_pages": 0.01},
    "ov-ext-drop-2ms": {"external": True, "drop_pages": 0.002},
    "ov-ext-drop-2ms-trim": {"external": True, "drop_pages": 0.002, "trim": True},
    "onnxruntime-tiny": {"system": "onnxruntime", "tiny": True},
    "ov-plain-tiny": {"tiny": True},
    "ov-import-only": {"import_only": True},
}
DEFAULT_SWEEP = ["onnxruntime", "ov-korch", "ov-plain", "ov-read-model", "ov-read-model-drop", "ov-read-bytes",
                 "ov-no-mmap", "ov-rtcache-0", "ov-pin", "ov-no-hint", "ov-threads-0", "ov-denormals", "ov-no-ht",
                 "ov-dynquant-0", "ov-release", "ov-trim", "ov-release-trim", "ov-arena-1", "ov-arena-2",
                 "ov-mmap-threshold", "ov-onednn-cache-0", "onnxruntime-tiny", "ov-plain-tiny", "ov-import-only"]


# ---------------------------------------------------------------------------------------------- memory

def status_mb(key: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def group_of(path: str) -> str:
    name = os.path.basename(path)
    if not path:
        return "anonymous"
    if path == "[heap]":
        return "heap"
    if path.startswith("["):
        return "anonymous"          # [stack], [vvar], [vdso]: small
    if name.startswith(("libtbb", "libhwloc")):
        return "tbb/hwloc libs"
    if name.startswith("libopenvino") or "/openvino/" in path:
        return "openvino libs"
    if "onnxruntime" in path:
        return "onnxruntime libs"
    if name.endswith((".onnx", ".data")):
        return "model file"
    if "python3" in name or "libpython" in name or "/lib/python3" in path and "site-packages" not in path:
        return "python"
    return "other libs"


def smaps_breakdown() -> dict[str, dict[str, float]]:
    """Rss and Private (clean + dirty) MB of this process's mappings, by group_of."""
    groups: dict[str, dict[str, float]] = {}
    current = None
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if not parts[0].endswith(":") and "-" in parts[0]:      # a mapping's header line
                current = groups.setdefault(group_of(parts[5] if len(parts) >= 6 else ""), {"rss": 0.0, "private": 0.0})
            elif parts[0] == "Rss:":
                current["rss"] += int(parts[1]) / 1024.0
            elif parts[0] in ("Private_Clean:", "Private_Dirty:"):
                current["private"] += int(parts[1]) / 1024.0
    return {k: {m: round(v, 1) for m, v in g.items()} for k, g in sorted(groups.items(), key=lambda kv: -kv[1]["rss"])}


def malloc_trim() -> None:
    ctypes.CDLL("libc.so.6").malloc_trim(0)


MADV_DONTNEED = 4


def drop_mapped(suffix: str) -> None:
    """madvise(DONTNEED) every read-only shared map of a file whose name ends with `suffix`: its resident
    pages leave this process (they stay in the page cache) and a later read faults them back unchanged."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and parts[5].endswith(suffix) and parts[1] in ("r--s", "r--p"):
                start, end = (int(x, 16) for x in parts[0].split("-"))
                libc.madvise(start, end - start, MADV_DONTNEED)


class DroppingPages:
    """drop_mapped(suffix) every `interval` seconds on a thread while the block runs, and once after."""

    def __init__(self, suffix: str, interval: float = 0.05) -> None:
        import threading

        self.suffix, self.interval = suffix, interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        while not self.stop.wait(self.interval):
            drop_mapped(self.suffix)

    def __enter__(self) -> "DroppingPages":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        drop_mapped(self.suffix)


# ---------------------------------------------------------------------------------------------- loading

EXTERNAL_SUFFIX = "-ext.data"


def external_model(model: Path) -> Path:
    """MODEL saved again with its weights in MODEL-ext.data beside it (written once, with onnx, in the parent)."""
    path = model.with_name(model.stem + "-ext.onnx")
    if not path.exists():
        import onnx

        onnx.save(onnx.load(str(model)), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=model.stem + EXTERNAL_SUFFIX, size_threshold=1024)
    return path


def tiny_model(directory: Path) -> Path:
    """A one-Relu ONNX model (1x64x56x56), written once with onnx in the parent."""
    path = directory / "tiny_relu.onnx"
    if not path.exists():
        from onnx import TensorProto, helper, save

        value = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 64, 56, 56])  # noqa: E731
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny", [value("x")], [value("y")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 9
        save(model, str(path))
    return path


def ov_config(spec: dict, threads: int) -> dict:
    config = {**KORCH_CONFIG, "INFERENCE_NUM_THREADS": threads}
    for key, value in spec.get("compile", {}).items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


def load_openvino(spec: dict, path: str, threads: int, core=None):
    """(a function running the model once, the compiled model); applies the spec's in-process actions."""
    import numpy as np
    import openvino as ov

    core = core or ov.Core()
    for key, value in spec.get("core", {}).items():
        core.set_property({key: value})
    config = ov_config(spec, threads)
    read = spec.get("read", "file")
    model = None
    interval = spec.get("drop_pages")
    interval = 0.05 if interval is True else interval
    dropping = DroppingPages(EXTERNAL_SUFFIX, interval) if interval else contextlib.nullcontext()
    with dropping:
        if read == "file":
            compiled = core.compile_model(path, "CPU", config)
        else:
            model = core.read_model(path) if read == "model" else core.read_model(Path(path).read_bytes())
            compiled = core.compile_model(model, "CPU", config)
    if spec.get("drop_model"):
        del model
    if spec.get("release"):
        compiled.release_memory()
    if spec.get("trim"):
        malloc_trim()
    request = compiled.create_infer_request()
    feeds = [np.zeros(tuple(p.get_shape()), p.get_element_type().to_dtype()) for p in compiled.inputs]
    return (lambda: request.infer(feeds, share_inputs=True)), compiled


def load(spec: dict, path: str, threads: int):
    system = spec.get("system", "openvino")
    if system == "onnxruntime":
        import numpy as np
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        dtypes = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}
        feeds = {i.name: np.zeros(i.shape, dtypes[i.type]) for i in session.get_inputs()}
        return lambda: session.run(None, feeds)
    if system == "korch":          # korch.bench_rss's OpenVINO peer
        import numpy as np

        from korch.backends.openvino import OpenVinoBackend

        kernel, _ = OpenVinoBackend().compile_file(path, threads)
        args = [np.zeros(tuple(p.get_shape()), p.get_element_type().to_dtype()) for p in kernel.compiled.inputs]
        return lambda: kernel.run(args)
    fn, _ = load_openvino(spec, path, threads)
    return fn


def child(name: str, path: str, threads: int) -> None:
    spec = CONFIGS[name]
    report: dict[str, object] = {"config": name}
    if spec.get("import_only"):
        import openvino as ov

        ov.Core().get_property("CPU", "FULL_DEVICE_NAME")     # loads the CPU plugin
        fn = lambda: None  # noqa: E731
    else:
        t0 = time.perf_counter()
        fn = load(spec, path, threads)
        report["load_s"] = round(time.perf_counter() - t0, 2)
    report["rss_loaded"] = round(status_mb("VmRSS"), 1)
    report["peak_loaded"] = round(status_mb("VmHWM"), 1)
    report["smaps_loaded"] = smaps_breakdown()
    for _ in range(RUNS):
        fn()
    report["rss_end"] = round(status_mb("VmRSS"), 1)
    report["peak"] = round(status_mb("VmHWM"), 1)
    report["smaps_end"] = smaps_breakdown()
    print(json.dumps(report))


# ---------------------------------------------------------------------------------------------- sweep

def run_child(name: str, model: str, threads: int) -> dict:
    spec = CONFIGS[name]
    env = {**os.environ, **spec.get("env", {})}
    target = str(tiny_model(Path(model).parent)) if spec.get("tiny") else model
    target = str(external_model(Path(model))) if spec.get("external") else target
    out = subprocess.run([sys.executable, __file__, "child", name, target, str(threads)], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        return {"config": name, "error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def sweep(args: argparse.Namespace) -> None:
    names = args.configs.split(",") if args.configs else DEFAULT_SWEEP
    results: dict[str, list[dict]] = {}
    for name in names:
        results[name] = [run_child(name, args.model, args.threads) for _ in range(args.repeats)]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    base = None
    print(f"{'config':22s} {'peak MB (median)':>17s} {'runs':>22s} {'RSS loaded':>11s} {'RSS end':>8s} {'vs ORT':>7s}")
    for name, runs in results.items():
        good = [r for r in runs if "error" not in r]
        if not good:
            print(f"{name:22s} error: {runs[0]['error'][:90]}")
            continue
        peak = statistics.median(r["peak"] for r in good)
        base = peak if name == "onnxruntime" else base
        ratio = f"{peak / base:.2f}x" if base else ""
        each = " ".join(f"{r['peak']:.0f}" for r in good)
        print(f"{name:22s} {peak:17.1f} {each:>22s} "
              f"{statistics.median(r['rss_loaded'] for r in good):11.1f} {statistics.median(r['rss_end'] for r in good):8.1f} {ratio:>7s}")
    if args.smaps:
        for name in args.smaps.split(","):
            if name in results and "error" not in results[name][0]:
                print(f"\nsmaps of {name} (first run), MB Rss / Private, after loading -> after {RUNS} runs:")
                loaded, end = results[name][0]["smaps_loaded"], results[name][0]["smaps_end"]
                for group, g in end.items():
                    at_load = loaded.get(group, {"rss": 0.0, "private": 0.0})
                    print(f"  {group:18s} {at_load['rss']:7.1f} / {at_load['private']:7.1f}  ->  {g['rss']:7.1f} / {g['private']:7.1f}")


# ---------------------------------------------------------------------------------------------- duel

def duel(args: argparse.Namespace) -> None:
    import openvino as ov

    core = ov.Core()
    fns = {}
    for name in (args.base, args.variant):
        spec = CONFIGS[name]
        if spec.get("system", "openvino") != "openvino" or spec.get("env") or spec.get("core"):
            raise SystemExit(f"{name}: only per-model settings and in-process actions can be duelled")
        target = str(external_model(Path(args.model))) if spec.get("external") else args.model
        fns[name], _ = load_openvino(spec, target, args.threads, core)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            time.sleep(args.pause)
            fn()                                        # untimed warm-up after the switch
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn()
            times[name].append((time.perf_counter() - t0) / args.calls * 1e3)

    def summary(values: list[float]) -> str:
        q = statistics.quantiles(values, n=10)
        return f"{statistics.median(values):8.2f} ms ({q[0]:.2f}-{q[-1]:.2f})"

    for name, values in times.items():
        print(f"{name:22s} {summary(values)}")
    ratios = [v / b for v, b in zip(times[args.variant], times[args.base])]
    print(f"ratio {args.variant}/{args.base}: median {statistics.median(ratios):.3f} "
          f"(p10-p90 {statistics.quantiles(ratios, n=10)[0]:.3f}-{statistics.quantiles(ratios, n=10)[-1]:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("sweep")
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--configs", help="comma-separated names (default: the main sweep; see `list`)")
    p.add_argument("--smaps", default="onnxruntime,ov-plain", help="configurations whose smaps groups to print")
    p.add_argument("--json", help="write every child's report here")
    p = sub.add_parser("child")
    p.add_argument("config")
    p.add_argument("model")
    p.add_argument("threads", type=int)
    p = sub.add_parser("duel")
    p.add_argument("model")
    p.add_argument("base")
    p.add_argument("variant")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--pause", type=float, default=0.05)
    sub.add_parser("list")
    args = parser.parse_args()
    if args.command == "sweep":
        sweep(args)
    elif args.command == "child":
        child(args.config, args.model, args.threads)
    elif args.command == "duel":
        duel(args)
    else:
        for name, spec in CONFIGS.items():
            print(f"{name:22s} {spec}")


if __name__ == "__main__":
    main()
