"""A per-backend cost model: a roofline prior, corrected by gradient-boosted trees learned from profiles.

The prior needs no data: a kernel costs a fixed call overhead, a small cost per primitive it runs
unfused, and its time at the roofline: arithmetic at the machine's peak against memory traffic at the
machine's bandwidth (both measured once by `MachinePeaks.measure`). An engine that runs primitives
one by one (onnxruntime) pays the linear ones' roofline plus the rest's; a fusing code generator
(Inductor) or an engine fusing elementwise chains as post-ops (OpenVINO), the larger of the kernel's
arithmetic and its boundary traffic. It ranks a brand-new machine's
candidates sensibly but knows nothing of how each engine tiles a convolution or fuses a chain.

The correction is learned: LightGBM regression of log(measured / prior) on the candidate's features
(korch/costmodel/features.py, log-scaled) and the thread count, trained on every timed kernel of that
backend in the profile database on this machine. Predictions are prior x exp(correction). With fewer
than `min_rows` timed kernels there is no correction, only the prior.

It learns only from profiles of the engine as korch runs it now (`current_rows`). A trained model
is saved per machine and backend next to the profile database and retrained once
the database holds `retrain_growth` times the kernels it was trained on. A file that cannot be read,
was written for another machine, backend, feature set or prior, is ignored with a warning and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from korch.costmodel.features import FEATURE_INDEX, FEATURE_NAMES, FEATURES_VERSION, Features
from korch.errors import OutputError
from korch.io import atomic_write_bytes
from korch.profile.database import ProfileDB, TimedKernel

log = logging.getLogger("korch.costmodel")

# Bump when the saved file's layout changes; a file of another format is rebuilt.
# 2: the trees' SHA-256 in the header (lightgbm aborts the process on damaged trees, so they are
# checked before it sees them).
MODEL_FORMAT = 2


@dataclass(frozen=True)
class MachinePeaks:
    """What the roofline prior divides by: fp32 flop/s per thread and memory bytes/s; and the fp32
    lanes of a vector register, which an engine vectorising over output channels fills with them."""

    flops_per_s_per_thread: float
    bytes_per_s: float
    lanes: int = 16          # AVX-512's, where a caller gives only the first two (replays, tests)

    @classmethod
    def measure(cls) -> MachinePeaks:
        """numpy's float32 matmul (its BLAS on every core, so divided by the core count) and a copy of
        64 MiB, larger than any last-level cache; the best of a few runs each, ~0.2 s in all."""
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((2, 512, 512), dtype=np.float32)
        src, dst = np.ones(16 << 20, dtype=np.float32), np.empty(16 << 20, dtype=np.float32)
        best_mm = best_copy = math.inf
        for _ in range(5):
            t0 = time.perf_counter()
            a @ b
            t1 = time.perf_counter()
            np.copyto(dst, src)
            t2 = time.perf_counter()
            best_mm, best_copy = min(best_mm, t1 - t0), min(best_copy, t2 - t1)
        return cls(2 * 512**3 / best_mm / (os.cpu_count() or 1), 2 * src.nbytes / best_copy, fp32_lanes())


def fp32_lanes() -> int:
    """fp32 elements per vector register of this CPU: 16 with AVX-512, 8 with AVX, else 4 (x86 SSE, Arm NEON)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    return 16 if "avx512f" in flags else 8 if "avx" in flags else 4


@dataclass(frozen=True)
class BackendPrior:
    """The prior's per-backend constants: a call's fixed cost and the cost of each primitive it runs
    unfused, whether intermediate tensors go through memory (an engine that runs primitives one
    by one) or stay in registers or cache (a fusing code generator, an engine with post-ops), and
    whether its convolutions and matmuls vectorise over output channels (oneDNN's blocked layouts:
    three output channels fill three of sixteen lanes) or over output pixels (onnxruntime's im2col
    GEMM)."""

    call_s: float
    per_node_s: float
    internal_traffic: bool
    channel_lanes: bool


# Starting points, replaced by the learned correction once a backend has data: Inductor's call is
# BENCHMARKS.md's standalone call (12.7 us); onnxruntime's and OpenVINO's calls and every per-node cost
# are estimates, not measurements. (Profiled kernels may cost far more: ~150 us for the smallest
# onnxruntime kernel when it was timed after a cache sweep; within one backend only the ratios rank.)
# OpenVINO's CPU plugin fuses elementwise chains into the convolution or matmul before them (oneDNN
# post-ops) and into one another, so it is priced as a fusing engine: held out of training, on the
# eight zoo models' profiles, its learned PCA rose from 0.90 on 5 models to 7 (efficientvit-b1's
# conv + hardswish kernels had read 3-4x their time) and its prior's on 6 of 8. Guided profiling
# replayed over the same profiles kept the same plans, measuring as many pairs (+-1 point) held out
# and 1-4 points more on seven models by the prior alone (BENCHMARKS.md, 2026-12-07). Not yet safe
# everywhere: it predicts segformer-b0's whole model 2.2x low against its kernels, so guided
# profiling's optimism (floored on the whole-model scale) sits above 53% of that model's OpenVINO
# kernels held out (8% under the summing prior); no plan was lost there. A floor that follows the
# spread sample's median makes it safe but doubled yolov4's guided profiling (BENCHMARKS.md, 2026-12-07).
DEFAULT_PRIORS = {
    "onnxruntime": BackendPrior(call_s=8e-6, per_node_s=1.5e-6, internal_traffic=True, channel_lanes=False),
    "openvino": BackendPrior(call_s=20e-6, per_node_s=1e-6, internal_traffic=False, channel_lanes=True),
    "inductor": BackendPrior(call_s=13e-6, per_node_s=0.2e-6, internal_traffic=False, channel_lanes=True),
}
_FALLBACK_PRIOR = BackendPrior(call_s=10e-6, per_node_s=1.5e-6, internal_traffic=True, channel_lanes=False)


@dataclass(frozen=True)
class CostModelSettings:
    # Below this many timed kernels the trees would fit noise: the prior alone predicts, and guided
    # profiling does not guide that backend (one zoo model gives onnxruntime 700-4,000 kernels, Inductor
    # 44 under its budget: Inductor is guided once about five models have been optimized).
    min_rows: int = 200
    # Retrain once the database holds this many times the kernels the saved model learned from.
    retrain_growth: float = 1.25
    # LightGBM: small trees, many rounds, a slow rate; rows are few (hundreds to tens of thousands).
    rounds: int = 300
    learning_rate: float = 0.05
    leaves: int = 31
    min_leaf_rows: int = 5


def prior_seconds(features: Sequence[Features], threads: int, backend: str, peaks: MachinePeaks) -> np.ndarray:
    """The roofline prior for each feature vector, seconds."""
    p = DEFAULT_PRIORS.get(backend, _FALLBACK_PRIOR)
    x = np.array([f.values for f in features], dtype=np.float64).reshape(len(features), len(FEATURE_NAMES))
    linear_flops = x[:, FEATURE_INDEX["linear_flops"]]
    if p.channel_lanes and peaks.lanes in (8, 16):         # (4 lanes, SSE or NEON: not modelled)
        linear_flops = x[:, FEATURE_INDEX[f"linear_flops_lanes{peaks.lanes}"]]
    flop_s = peaks.flops_per_s_per_thread * max(1, threads)
    nodes = x[:, FEATURE_INDEX["nodes"]] - x[:, FEATURE_INDEX["class_layout"]] * 0.5          # a reshape is often free
    fixed = p.call_s + p.per_node_s * np.maximum(nodes, 1)
    if p.internal_traffic:
        # primitives run one by one, each at its own roofline: the linear ones' (mostly arithmetic)
        # plus the others' (mostly memory), not the larger of the kernel's totals
        linear = np.maximum(linear_flops / flop_s, x[:, FEATURE_INDEX["linear_node_bytes"]] / peaks.bytes_per_s)
        other = np.maximum(x[:, FEATURE_INDEX["elementwise_flops"]] / flop_s,
                           x[:, FEATURE_INDEX["other_node_bytes"]] / peaks.bytes_per_s)
        return fixed + linear + other
    # a fusing code generator: the kernel's arithmetic or its boundary traffic, whichever bounds it
    traffic = x[:, FEATURE_INDEX["bytes_in"]] + x[:, FEATURE_INDEX["bytes_weights"]] + x[:, FEATURE_INDEX["bytes_out"]]
    compute = (linear_flops + x[:, FEATURE_INDEX["elementwise_flops"]]) / flop_s
    return fixed + np.maximum(compute, traffic / peaks.bytes_per_s)


def _design(features: Sequence[tuple[float, ...]], threads: Sequence[int]) -> np.ndarray:
    x = np.log1p(np.maximum(np.array(features, dtype=np.float64).reshape(len(features), len(FEATURE_NAMES)), 0))
    return np.column_stack([x, np.asarray(threads, dtype=np.float64)])


@dataclass
class CostModel:
    """Predicts one backend's kernel times on one machine. `booster`: the learned correction, or None."""

    backend: str
    machine: str
    peaks: MachinePeaks
    trained_rows: int = 0
    booster: object | None = None
    trained_at: float = field(default_factory=time.time)

    def predict(self, features: Sequence[Features], threads: int) -> np.ndarray:
        """Predicted seconds per feature vector."""
        if not features:
            return np.zeros(0)
        prior = prior_seconds(features, threads, self.backend, self.peaks)
        if self.booster is None:
            return prior
        x = _design([f.values for f in features], [threads] * len(features))
        return prior * np.exp(self.booster.predict(x))            # type: ignore[attr-defined]


class SavedBooster:
    """A saved LightGBM model, as korch wrote it (read_model checks its checksum), parsed on its first
    prediction: lightgbm (and the scipy it imports) take 0.6 s to load, which a warm optimize whose
    profiling is finished never needs."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._booster: object | None = None

    def predict(self, x: np.ndarray) -> np.ndarray:
        if self._booster is None:
            import lightgbm

            self._booster = lightgbm.Booster(model_str=self.text)
        return self._booster.predict(x)           # type: ignore[attr-defined]

    def model_to_string(self) -> str:
        return self.text


def per_thread_count(rows: Sequence[TimedKernel],
                     predict: Callable[[Sequence[Features], int], np.ndarray]) -> np.ndarray:
    """predict(features, threads) for each row, one call per thread count among the rows."""
    out = np.zeros(len(rows))
    for threads in {r.threads for r in rows}:
        idx = [k for k, r in enumerate(rows) if r.threads == threads]
        out[idx] = predict([Features(rows[k].features) for k in idx], threads)
    return out


def current_rows(rows: Sequence[TimedKernel], engine_version: str) -> list[TimedKernel]:
    """The rows profiled with the engine as korch runs it now (record versions that start with
    `engine_version`, its Backend.version), the newest per key and thread count. Older ones are
    profiles the profiler itself would take again, not reuse: Inductor's kernels timed with their
    OpenMP workers free (before LOWERING "held") read 1x1 convs up to 20x slow, and a model learning
    from them would keep that until every such key was profiled again."""
    return _newest([r for r in rows if r.backend_version == engine_version
                    or r.backend_version.startswith(f"{engine_version}|")])


def _newest(rows: Sequence[TimedKernel]) -> list[TimedKernel]:
    """One row per key and thread count: the newest."""
    newest: dict[tuple[str, int], TimedKernel] = {}
    for r in sorted(rows, key=lambda r: r.created_at):
        newest[(r.candidate_key, r.threads)] = r
    return list(newest.values())


def train(rows: Sequence[TimedKernel], backend: str, machine: str, peaks: MachinePeaks,
          settings: CostModelSettings = CostModelSettings()) -> CostModel:
    """Learn the correction from timed kernels (one per key and thread count: the newest)."""
    data = _newest(rows)
    model = CostModel(backend, machine, peaks, trained_rows=len(data))
    if len(data) < settings.min_rows:
        return model
    import lightgbm

    threads = [r.threads for r in data]
    prior = per_thread_count(data, lambda fs, t: prior_seconds(fs, t, backend, peaks))
    target = np.log(np.array([r.median_s for r in data])) - np.log(prior)
    params = {"objective": "regression", "learning_rate": settings.learning_rate, "num_leaves": settings.leaves,
              "min_data_in_leaf": settings.min_leaf_rows, "verbose": -1, "seed": 0, "deterministic": True,
              "force_row_wise": True, "num_threads": 1}
    dataset = lightgbm.Dataset(_design([r.features for r in data], threads), label=target)
    model.booster = lightgbm.train(params, dataset, num_boost_round=settings.rounds)
    return model


# ---------------------------------------------------------------------------------------------
# saved per machine and backend next to the profile database


def model_path(cache_dir: Path, backend: str, machine: str) -> Path:
    digest = hashlib.sha1(machine.encode()).hexdigest()[:12]
    return cache_dir / "costmodels" / f"{backend}-{digest}.json"


def save_model(model: CostModel, path: Path) -> None:
    """Atomically: a reader sees the old file or the new one, never half of one."""
    trees = model.booster.model_to_string() if model.booster is not None else None  # type: ignore[attr-defined]
    header = {"format": MODEL_FORMAT, "features": FEATURES_VERSION, "feature_names": list(FEATURE_NAMES),
              "backend": model.backend, "machine": model.machine, "prior": _prior_header(model.backend),
              "peaks": asdict(model.peaks),
              "booster_sha256": hashlib.sha256(trees.encode()).hexdigest() if trees is not None else None,
              "trained_rows": model.trained_rows, "trained_at": model.trained_at,
              "booster": trees}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, json.dumps(header).encode())


def read_model(path: Path, backend: str, machine: str) -> CostModel | None:
    """The saved model, or None (with a warning naming the file and why) if it is unusable."""
    if not path.exists():
        return None
    try:
        header = json.loads(path.read_text())
        problem = _foreign(header, backend, machine)
        if problem is None:
            booster = None
            if header["booster"] is not None:
                # lightgbm aborts the process (SIGABRT) on trees cut short or edited: never hand it any.
                # (Trees as korch wrote them take the features the header names, checked by _foreign.)
                if hashlib.sha256(header["booster"].encode()).hexdigest() != header["booster_sha256"]:
                    raise ValueError("its trees do not match their checksum")
                booster = SavedBooster(header["booster"])
            peaks = MachinePeaks(**{k: (int(v) if k == "lanes" else float(v)) for k, v in header["peaks"].items()})
            return CostModel(backend, machine, peaks, int(header["trained_rows"]), booster,
                             float(header["trained_at"]))
    except Exception as e:               # any damage: say so and rebuild, never trust it
        problem = f"unreadable ({type(e).__name__}: {str(e)[:120]})"
    log.warning("cost model %s: %s; ignoring it and training a new one", path, problem)
    return None


def _prior_header(backend: str) -> dict[str, object]:
    """The backend's prior as a saved model records it: trees learned a correction to this prior, and
    are wrong for any other (a model saved before the file recorded it reads as another prior)."""
    return asdict(DEFAULT_PRIORS.get(backend, _FALLBACK_PRIOR))


def _foreign(header: object, backend: str, machine: str) -> str | None:
    if not isinstance(header, dict):
        return "not a korch cost model"
    expected = {"format": MODEL_FORMAT, "features": FEATURES_VERSION, "feature_names": list(FEATURE_NAMES),
                "backend": backend, "machine": machine, "prior": _prior_header(backend)}
    for name, value in expected.items():
        if header.get(name) != value:
            return f"made for another {name.replace('_', ' ')}"
    return None


def _stale(saved: CostModel, have: int, settings: CostModelSettings) -> bool:
    """Whether the database has grown enough since `saved` was trained to train again."""
    if have < settings.min_rows:
        return False
    if saved.booster is None:
        return True
    return have >= math.ceil(saved.trained_rows * settings.retrain_growth)


def load_or_train(db: ProfileDB, backend: str, machine: str, peaks: MachinePeaks | None = None,
                  settings: CostModelSettings = CostModelSettings(), retrain: bool = True) -> CostModel:
    """The saved model for (backend, machine), retrained if the database has grown enough since
    (`retrain`; without it, any usable saved model as it is: a warm run that predicts nothing need
    not pay for trees it will not ask)."""
    from korch.backends import get_backend

    path = model_path(db.path.parent, backend, machine)
    saved = read_model(path, backend, machine)
    if saved is not None and not retrain:
        return saved
    rows = current_rows(db.timed_with_features(backend, machine, FEATURES_VERSION), get_backend(backend).version)
    have = len({(r.candidate_key, r.threads) for r in rows})
    if saved is not None and not _stale(saved, have, settings):
        return saved
    peaks = peaks or (saved.peaks if saved is not None else MachinePeaks.measure())
    t0 = time.perf_counter()
    model = train(rows, backend, machine, peaks, settings)
    log.info("cost model %s: trained on %d timed kernels in %.1f s", backend, model.trained_rows,
             time.perf_counter() - t0)
    try:
        save_model(model, path)
    except (OSError, OutputError) as e:
        log.warning("cannot save the cost model to %s (%s); it is rebuilt next time", path, e)
    return model
