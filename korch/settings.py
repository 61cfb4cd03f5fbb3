"""Every tuning number of an optimize run, in one frozen object passed down the stages.

Nothing downstream reads a module global for these: a test or a user who wants faster, rougher
timings passes `OptimizeSettings(profile=ProfileSettings(min_seconds=0), ...)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from korch.candidates import CandidateLimits, RegionLimits
from korch.costmodel.model import CostModelSettings
from korch.profile.boundaries import CalibrationSettings


@dataclass(frozen=True)
class ProfileSettings:
    """How each candidate kernel is timed, and which candidates the expensive backends see."""

    # Median over at least `repeats` runs and `min_seconds` (wall time, the cache sweep before each
    # call included): small kernels get a dozen runs from the time floor; a whole-model region of
    # yolov4 (~0.4 s) gets warmup + repeats runs. Timing was most of a cold optimize (yolov4: 216 of
    # 469 s on onnxruntime). A floor of 20 ms profiles as repeatably as 50 ms, for 0.58x the time:
    # second pass against first, PCA 0.981 against 0.983 (yolox-nano, onnxruntime) and 0.981 against
    # 0.983 (efficientvit-b1, OpenVINO), medians 0.994-0.997x the 50 ms ones. 10 ms read 1.4-4.4%
    # slower than 50 ms (benchmarks/profile_repeatability.py --min-seconds, BENCHMARKS.md).
    warmup: int = 2
    repeats: int = 5
    min_seconds: float = 0.02
    # ... unless the median is pinned within +-precision sooner (timing.median_known: a 90% interval
    # from order statistics), after `repeats` runs. On a quiet machine most kernels stop at a handful
    # of runs; a noisy one still gets min_seconds. Profiles repeat within ~4% of each other at this
    # setting and at none (benchmarks/profile_repeatability.py), for a fraction of the timing.
    precision: float | None = 0.03
    # A whole model (0.02-0.4 s a call) fills min_seconds at once and stopped at `repeats` runs, min to
    # max whatever the spread: gpt2-small's OpenVINO model profiled at 393 ms (p10-p90 348-417) against
    # 305 in the bench, which kept it out of selection's duels (BENCHMARKS.md, the AMD host). Its
    # timing goes on until the median is pinned within `precision`, for at most this long (None: as
    # any other kernel). Three engines' whole models cost a cold optimize at most ~9 s more.
    whole_model_max_seconds: float | None = 3.0
    # Time every kernel but a whole model after a sweep of the last-level cache (timing.CacheSweep)
    # instead of back to back. Off: in a plan a kernel's inputs were just written by the kernel before
    # it and its engine's code is hot, which a sweep evicts too, and a sweep leaves the other cores idle
    # long enough that waking them is timed. On the AMD host, kernels timed after the 32 MiB sweep
    # summed to 1.31-1.58x the same kernels' time inside plans of 20-40 onnxruntime regions
    # (yolox-nano, efficientvit-b1), back to back to 0.99-1.08x; with large kernels (candy, bert-base)
    # both were within 4% (benchmarks/profile_protocols.py, BENCHMARKS.md). Where small kernels follow
    # large ones, back to back reads low (efficientvit-b1's first split plan: 0.86x its time in
    # the plan); measured selection's start cost accounts for that (select/measured.py). Part of the
    # profile records' key, so records timed one way are never read as the other.
    cold_cache: bool = False
    # Inductor compiles cost ~1.3 s each: this many unique small candidates keeps a cold optimize in minutes.
    # Profiled after the other backends, it measures the fused candidates a split-plan solve would choose at
    # their floors (profile/guided.py: profile_last), `inductor_batch` a round (each round starts the compile
    # workers again: ~20 s a round of 10 on yolox-nano), until the solve is stable or the budget is spent.
    inductor_budget: int = 40
    inductor_batch: int = 20
    # Regions compiled by Inductor take seconds to a minute each: at most this many, the whole graph
    # first, then an even tiling of it (pipeline.inductor_regions).
    inductor_region_budget: int = 4
    # ... but only the whole model if it profiles beyond this factor of the fastest other engine's
    # whole model, where that whole model is compiled in place (its constants too large for a
    # compile worker), so profiled first at no cost; within it, the tiling is chosen by solving at its
    # floors, as the small candidates are (profile/guided.py profile_last). In the zoo on the Intel host, on the five models
    # whose Inductor whole model was 1.09-1.73x the fastest, 13 of its 15 tiles profiled slower than
    # OpenVINO or onnxruntime on the same region (one, a 0.2 ms piece of segformer-b0, faster; one
    # had no other profile). Where the whole models tied (bert-base, vit-b16, gpt2-small) its tiles
    # were 0.96-1.17x the others'. Beyond 1.25x: yolov4 (1.55x; its tiles took 21 s to compile),
    # yolox-nano (1.73x) and efficientvit-b1 (1.34x), whose whole models a worker compiles
    # (BENCHMARKS.md).
    tiles_within: float = 1.25
    # A whole model profiled with the core link moving or far, where the run has read it near, is timed
    # once more and keeps the faster profile (profile/guided.py `_unsettled`): it sets the bar every
    # split plan must beat. OpenVINO's whole yolov4 and segformer-b0, profiled so at 291.99 and 80.99
    # ms, benched 227.74 and 63.13 ms (BENCHMARKS.md, 2026-12-06).
    settle_whole_models: bool = True
    # A kernel accepted and timed is kept compiled in the cache (plan/store.py) if it is a whole model,
    # was compiled ahead in a worker (profile/ahead.py) or compiling it took at least this long, so
    # that selection loads it when a split plan uses it.
    # vit-b16's first split plan held two Inductor tiles profiled minutes before: compiling them again
    # took 12 of the 53 s its selection ran. A small kernel compiles in about a second and is rarely in
    # a split plan; keeping one costs a save of its code.
    keep_compiled_s: float = 2.0
    # Guided profiling (korch/profile/guided.py): a backend whose cost model has learned from this
    # machine's profiles is profiled only where the BLP, given each unmeasured kernel its predicted
    # time x `guide_optimism`, would choose it; the budgets above then do not apply to it.
    guided: bool = True
    # Which backends may be guided. Inductor is left out until its compiles are cheap: guided, it
    # compiled 249 kernels (247 s) on yolox-nano and 609 (990 s, not finished) on segformer-b0,
    # against its budget of 44 (BENCHMARKS.md). Add "inductor" to let it see every fused candidate.
    guided_backends: tuple[str, ...] = ("onnxruntime", "openvino")
    # A guided backend whose cost model has not learned yet (an empty database: a new machine, or
    # fewer than CostModelSettings.min_rows timed kernels) is guided by its roofline prior alone,
    # rescaled by the random sample below. False: such a backend profiles every candidate of its pool,
    # the first model's profiles then being its training set. With each kernel's start charged
    # (profile/boundaries.py), replays over exhaustive zoo profiles at 2 threads settle after 20-38% of
    # the pairs within 1.2% of the exhaustive split optimum (BENCHMARKS.md, guided_replay.py).
    guide_by_prior: bool = True
    # How far below its (rescaled) prediction a kernel may measure and still be found. Held out of
    # training, 65-98% of a zoo model's onnxruntime kernels and 92-100% of its OpenVINO regions measure
    # above half their prediction (benchmarks/costmodel_quality.py, BENCHMARKS.md); those below matter
    # only if they would enter the plan, which the regret benchmark measures (guided_regret.py).
    guide_optimism: float = 0.5
    # ... unless the model's spread says it can be less optimistic: `guide_spread_sample` random pairs
    # per guided backend are measured first, and its factor is the `guide_spread_quantile` of their
    # measured / rescaled predicted, within [guide_optimism, 1] (profile/guided.py: _spread_optimism;
    # quantile 0: the lowest of them, which about 1 in 17 kernels falls below). 0 pairs: off. Replayed
    # over all eight zoo models' exhaustive profiles, held out of the cost models' training: 3-56% of
    # the pairs measured instead of 3-60%, the split plans kept within 0.9% of the exhaustive optimum;
    # the quantile 0.1 measured less but missed it by up to 3.7% (BENCHMARKS.md, guided_replay.py --spread).
    guide_spread_sample: int = 16
    guide_spread_quantile: float = 0.0
    # A budget of uncertainty (profile/guided.py): the loop's LP prices each unmeasured kernel at what
    # the spread sample's median expects of it, and lets at most this many of a plan's fall to their
    # optimistic costs. 0: every unmeasured kernel at its optimistic cost at once (a plan of many then
    # reads about half its expected cost, where independent errors would largely cancel). Replayed over
    # the eight zoo models' exhaustive profiles (benchmarks/guided_replay.py --uncertainty, BENCHMARKS.md):
    # with the roofline prior alone, 8 measured 4-70% of the pairs against 4-73% at 0 (yolov4 13%
    # against 33%, candy 49% against 67%); learned, held out, 3-48% against 3-56%; the split plans kept
    # as close to the exhaustive optimum as at 0 (within 0.08%, and vit-b16's 0.9% learned). Its LP costs
    # about 3x as much (bert-base: 22 s of solving against 8). 2 measured less still, but missed
    # vit-b16's optimum by 3.7% (learned) and ran into guide_rounds on gpt2-small (prior).
    guide_uncertainty: int = 8
    # Rounds at most. A round solves once and measures the unmeasured kernels chosen plus, up to
    # `guide_batch` in all, their cheapest rivals over the same primitives. After an LP relaxation, rivals
    # do not save rounds: replayed over exhaustive zoo profiles (benchmarks/guided_replay.py --batch), a
    # batch of 40 measured 29-34% of the legal pairs and one of 1 (the chosen kernels alone) 8-12%, to the
    # same plans within 0.3%, in 37 rounds instead of 21 on yolox-nano, 22 instead of 18 on
    # efficientvit-b1 and 49 instead of 38 on segformer-b0; the LP, formulated once and warm-started,
    # costs 0.05-0.3 s. A round whose kernels an exact solve (a MILP) chose measures up to
    # `guide_batch_exact`: a cold segformer-b0 at guide_batch 1 spent 220 s in 17 exact solves of 8-39 s,
    # twelve of them in a row that each chose 3-4 new kernels.
    guide_rounds: int = 100
    guide_batch: int = 1
    guide_batch_exact: int = 40
    # A guided loop also stops once no split plan still to be found could beat the best whole model
    # by more than this fraction: once the LP's bound on every split plan is at least the best whole
    # model's time / (1 + guide_regret) (profile/guided.py `_stop_gap`). The bar alone (the best whole
    # model times SelectionSettings.multi_kernel_margin, 0.98) already lets a split plan up to 2% faster
    # go unkept; 0.03 lowers that stop from 0.980 to 0.971 of the whole model: issue 12's regret target.
    # 0: the bar alone. Where split plans tie the whole model (bert-base's best within 0.05% of its
    # bar) the bar alone measured half the legal pairs to prove the tie. Replayed over exhaustive
    # profiles of six zoo models (benchmarks/guided_replay.py --regret 0 0.03, BENCHMARKS.md):
    # gpt2-small 600 -> 336 pairs, bert-base 247 -> 192, vit-b16 403 -> 389, the same plans; the conv
    # nets, whose split optima lie far from their bars, unchanged.
    guide_regret: float = 0.03
    # The winner's curse: of a thousand kernels each timed once on a noisy machine, the solve chooses
    # those whose one timing read low (yolov4's first split plan: its 18 kernels ran 1.20x their
    # profiles when selection timed them alone again). So once the loop is stable, the kernels of the
    # best split plan over measured costs are timed once more, and that second timing,
    # which no solve chose them for, becomes their record; the loop then goes on from the new costs.
    # At most this many times (0: never); a kernel is timed again once per optimize.
    guide_confirm_rounds: int = 3
    # ... and that second timing is of each call as the kernel runs inside the plan: after a sweep of
    # what the plan's other kernels touch (their inputs, weights, outputs and intermediates), at most
    # this many times the last-level cache (timing.PlanEviction; None: back to back, as first timed).
    # On the model-167 Xeon host (480 MiB reported, and a kernel's working set kept in it from one
    # call to the next) the second timing back to back read the first's 1.003x while a split plan ran
    # 1.16x its kernels' profiles. Summed over the kernels of segformer-b0's first split plan, as
    # given and rewritten, over their sum inside the plan: back to back 0.937 and 0.889, after
    # sweeps of 480 MiB 1.001 and 0.959, of 640 MiB 1.021 and 0.976, of 1 GiB 1.028 and 0.993
    # (benchmarks/plan_eviction.py). Capped at guide_confirm_evict_max_bytes (a 640 MiB sweep takes
    # 45 ms here; its buffer is mapped only while timing again).
    guide_confirm_evict: float | None = 1.33
    guide_confirm_evict_max_bytes: int = 1 << 30
    # Every other split kernel is priced at its profile plus its refill (profile/refill.py): the
    # median refill (after the same sweep - back to back) of the `refill_neighbours` kernels of its
    # backend nearest in bytes touched and evicted, among those the profile database holds for this
    # machine and threads. Until it holds `guide_refill_sample` of a guided backend, that many of the
    # random kernels the loop measured first are timed again after the sweep (spread over the bytes
    # they touch; 7 calls after a 640 MiB sweep of 45 ms each: about 0.3 s a kernel). Needs
    # guide_confirm_evict (None: no refill, kernels priced at their back-to-back profiles).
    guide_refill_sample: int = 8
    refill_neighbours: int = 5
    # A guided backend's predictions are rescaled to the machine's speed now by its whole model:
    # measured / predicted (profile/guided.py: _whole_scale). A backend without an accepted whole model,
    # or with this off, measures `guide_sample` random kernels first and takes the median of theirs.
    # Replayed over exhaustive zoo profiles, that median moved with the sample drawn (onnxruntime on
    # segformer-b0: 0.48-0.98 across seeds, 12-58% of the pairs then measured; BENCHMARKS.md).
    guide_scale_by_whole: bool = True
    guide_sample: int = 12
    # The machine's speed while profiling (korch/profile/speed.py): a small kernel already timed is timed
    # again this often (seconds; None: not watched), and the kernels timed between two readings of
    # which one is more than `watch_tolerance` slower than the run's fastest are timed again at the
    # end. A burst of this VM ran every kernel 1.4-1.6x slower; its drift over half an hour is 10-15%.
    watch_interval_s: float | None = 5.0
    watch_tolerance: float = 0.25
    # When more kernels than this are suspect, this many of them, at random, are timed again first:
    # the rest are timed again only if the sample's second profiles are faster than its first by more
    # than half the tolerance (a median under 1/sqrt(1 + watch_tolerance)). If not, the sentinel ran
    # slow alone, or the machine is slow still and a second profile would gain nothing. On the AMD
    # host whole passes of 2,300-2,500 kernels were timed again for a median 0.98-1.32x their first
    # profile (BENCHMARKS.md).
    watch_check: int = 32
    # A reading times the sentinel for this long (its median over the runs): steadier than a profile.
    watch_read_seconds: float = 0.05
    # The sentinel is the first kernel whose profile falls in this range (seconds): long enough that a
    # reading (tens of runs) has a steady median, short enough that it gets them, and found early (from
    # 1 ms, yolox-nano's was found 90 s into its profiling, and the watch was blind until then).
    watch_sentinel_s: tuple[float, float] = (3e-4, 2e-2)
    # Kernels of a backend that compiles slowly (Inductor) are compiled ahead, before any kernel is
    # timed, by this many worker processes, and loaded where the profiler would compile them
    # (korch/profile/ahead.py): from an empty Inductor cache two workers took 0.79x the time of
    # compiling in place on yolox-nano's 44 Inductor kernels, 0.82x on segformer-b0's
    # (benchmarks/compile_ahead.py). Fewer than 2: each is compiled where it is timed, as before.
    compile_workers: int = 2
    # ... when at least this much is to be compiled, in one-primitive kernels (profiler.job_work: a region of
    # 476 primitives counts 22): a worker takes seconds to start (importing torch), and Inductor's 4 largest
    # regions of yolox-nano, profiled alone after the other backends, took 94.6 s compiled in place.
    compile_ahead_min_work: float = 6.0
    # A kernel with more constant bytes than this is compiled where it is timed: a worker holds its
    # own copy of them while compiling, and two such copies would raise the optimize's peak memory.
    compile_ahead_max_bytes: int = 64 << 20
    # Kernels of a backend whose compiles run beside each other in threads (Backend.compiles_in_threads:
    # OpenVINO) are compiled this many at a time, a window of up to `compile_window` kernels (holding
    # at most `compile_window_bytes` of constants between them) before any of the window is timed, so
    # nothing compiles while a kernel is timed. 1: each is compiled where it is timed, as before.
    compile_threads: int = 2
    compile_window: int = 16
    compile_window_bytes: int = 128 << 20


@dataclass(frozen=True)
class SelectionSettings:
    """Measured selection: solve, compile and time plans end to end; compare with whole-model kernels."""

    # Timing one whole plan: few repeats separate plans that differ by more than noise.
    plan_warmup: int = 2
    plan_repeats: int = 7
    plan_min_seconds: float = 0.3
    # A second look (measured.py `_second_look`) only asks whether a whole model's profile beyond
    # `contender_factor` was a slow spell (one read 3.2x its time), not which of two close plans is
    # faster: one warm-up call and this many timed calls of it and of the champion settle that. At
    # plan_repeats, yolov4's two looks spent 11 of their 22 s timing.
    look_repeats: int = 3
    # A plan of several kernels is kept only if it runs in at most this fraction of the time of the
    # fastest whole-model kernel, side by side; otherwise that one kernel is the plan.
    multi_kernel_margin: float = 0.98
    # Whole-model kernels that join the comparison: the cheapest, and any whose profile is within
    # this factor of the faster of the split plan's measured time and the cheapest whole model's
    # profile (close enough that profiling noise may order them wrong); one beyond it is timed again
    # once beside the champion (measured.py `_second_look`).
    contender_factor: float = 1.25
    # The split plan is compiled and timed only if its predicted time (profiles, or in-plan times once
    # it ran, plus boundary costs) is within this factor of the cheapest whole model's profile. Its
    # prediction errs low: in plans, its kernels ran at 1.04-1.12x their profiles (the solver picks the
    # profiles that read low), and side by side split plans ran at 0.997-1.35x the best whole model in
    # 15 selections of one session (BENCHMARKS.md, 2c8155e) and 1.015-1.033x in the zoo runs of
    # 743e0ce. A cold yolov4 optimize compiled one predicted at 1.003x, timed it in a plan twice and
    # side by side (45 of its 52 s of selection) to lose by 3.5%.
    split_within: float = 1.0
    # Rounds of the side-by-side comparison (0: none), each running every contender as `korch bench` does.
    duel_rounds: int = 15
    # Each contender's turn in a round times calls for at least this long (one call of a model slower
    # than it), after the 60 ms settling pause. One timed call per turn left a 15-20 ms model's verdict
    # to one call's noise: onnxruntime against OpenVINO on efficientvit-b1, the paired ratio's sd
    # over 8 duels was 0.078 with one call per turn, 0.037 with four (1.5x the duel's time); between
    # identical contenders 0.033 against 0.014 (benchmarks/duel_round_length.py, BENCHMARKS.md).
    duel_round_seconds: float = 0.06
    # An engine's whole model replaces the champion whole model (the cheaper by profile) only if it
    # runs in at most this fraction of its time, side by side. Between two identical contenders, 18
    # duels of 124 called a 2% win (benchmarks/duel_noise.py). segformer-b0 kept Inductor's whole
    # model after duels won by 4% and by 1% over OpenVINO's, whose profile was 12% faster, and ran at
    # 0.73x the best peer in the bench (BENCHMARKS.md): this margin stops the second, not the first.
    switch_margin: float = 0.98
    # A side-by-side comparison that ran with the core link far or moving, where profiling read it
    # near (at 2 threads and more), is run again up to this many times, and the verdict taken from the
    # one nearest the near state (measured._LINK_RANK): the far state slows engines unequally
    # (yolox-nano: OpenVINO's whole model won by 1.196x far, and benched 0.93x onnxruntime's).
    duel_link_retries: int = 1
    solver_time_limit_s: float = 60.0
    # In-plan costs (korch/select/measured.py): the split plan runs `refine_runs` times with each kernel
    # timed, those times replace the kernels' profiles, and the BLP is solved again, until it chooses
    # only kernels already timed in a plan or `refine_rounds` re-solves are done (0: profiles only).
    refine_rounds: int = 4
    refine_runs: int = 7
    # The machine's speed in those runs is read from a whole model alone (InPlanTimes), held between
    # the plan's kernels' own slowdown and that over `luck_max`: the most by which the solver's
    # choice is believed to have picked profiles that read low. Chosen kernels profiled again ran a
    # weighted 1.19-1.91x their profiles relative to the whole models, single kernels up to 2.05x
    # (p90; benchmarks/winners_curse.py, BENCHMARKS.md).
    luck_max: float = 2.0
    # The final split plan is also timed side by side with that whole model for this many rounds, to
    # give its time at the profiles' speed beside its prediction (the log; 0: not timed).
    paired_rounds: int = 5
    # A split plan that fails the accuracy check, though each of its kernels passed alone (their errors
    # add up): up to this many times, its kernels farthest from the reference, given the reference's
    # inputs, are excluded and the BLP solved again (0: the split plan is dropped at once). Excluded:
    # each kernel whose own error is at least `blame_fraction` of the worst kernel's.
    check_rounds: int = 3
    blame_fraction: float = 0.5


@dataclass(frozen=True)
class ScheduleSettings:
    """Co-scheduling of a split plan's kernels (korch/select/coschedule.py)."""

    enabled: bool = True
    # Runs of the plan, each step timed, whose medians cost the schedule (wide and narrow alike).
    step_runs: int = 7
    # A step that nothing could run beside still gets a narrow kernel if it takes less than this on all
    # threads: waking a parked pool costs ~10-20 us a call here, so small kernels ran faster on one
    # thread than on two (a 32-channel 20x20 conv: 47 against 53 us; benchmarks/lane_pair.py, BENCHMARKS.md).
    small_step_s: float = 2e-4
    # Ready steps tried as seeds of two lanes, pairwise: the first few in plan order (a stage rarely
    # has more independent branches; each pair costs a greedy growth over the remaining steps).
    ready_pairs: int = 4
    # The schedule is kept only if the plan, scheduled, runs in at most this fraction of its time run
    # one step after another, side by side: a tie keeps the simpler plan.
    margin: float = 0.99


@dataclass(frozen=True)
class AccuracyPolicy:
    """When a computed fp32 result counts as correct: one rule for kernels and for whole plans.

    The error of a value is max |actual - expected| over max |expected| (finite entries), per output;
    NaN matches NaN and an infinity matches the same infinity (IEEE semantics). A result is accepted
    within `rtol`, or within `fp32_factor` times the error that onnxruntime itself shows against
    korch's float64-accumulating reference on the same model and inputs, whichever is larger: on a
    deep model (yolov4) fp32 rounding alone puts every engine ~3e-4 from exact, and refusing that
    would refuse the engines themselves.

    The factor is where correct fp32 engines land: over the eight zoo models, OpenVINO's and
    Inductor's whole models measured 0.6-2.9x onnxruntime's own error (candy 2.9x, segformer-b0
    2.2x, yolov4 up to 2.04x on the check's inputs; benchmarks/engine_accuracy.py, BENCHMARKS.md,
    2026-11-25). At 2 every non-onnxruntime engine was refused on yolov4; 4 accepts that spread with
    room, and a semantic mistake shows as errors orders of magnitude larger.

    A kernel's error is taken against that reference; a plan output's against onnxruntime, and
    against the reference when it misses `rtol` there (verify.OutputCheck says why).
    """

    rtol: float = 1e-4
    fp32_factor: float = 4.0
    # The final plan check runs this many fresh random inputs through the plan and onnxruntime.
    check_inputs: int = 3

    def tolerance(self, fp32_error: float = 0.0) -> float:
        """The error allowed, given an fp32 engine's own error on the same computation."""
        return max(self.rtol, self.fp32_factor * fp32_error)


@dataclass(frozen=True)
class OptimizeSettings:
    threads: int = 1
    backends: tuple[str, ...] = ("onnxruntime", "inductor")
    limits: CandidateLimits = CandidateLimits()
    regions: RegionLimits | None = RegionLimits()     # None: small candidates only
    seed: int = 0
    strict: bool = False            # refuse models with nodes korch cannot fission, instead of keeping them opaque
    rewrites: bool = True           # algebraic rewrites that remove flops first (frontend/rewrites.py), checked
    # Choose among each backend's whole-model kernel only (of the rewritten model): no smaller
    # candidates, no boundary calibration, so no split plan. What korch keeps on a machine where no
    # split plan pays (every zoo plan on the AMD host), at a fraction of a full optimize's time.
    whole_models: bool = False
    profile: ProfileSettings = field(default_factory=ProfileSettings)
    selection: SelectionSettings = field(default_factory=SelectionSettings)
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    accuracy: AccuracyPolicy = field(default_factory=AccuracyPolicy)
    calibration: CalibrationSettings = field(default_factory=CalibrationSettings)
    cost_model: CostModelSettings = field(default_factory=CostModelSettings)
    # Compiled kernels kept in the cache (plan/store.py), and prepared models (frontend/prepared.py),
    # unused for this long are removed when another is kept: those of an older korch, torch or model
    # are never found again.
    kept_kernel_days: float = 30.0


# Timings good enough to exercise the mechanics, for tests and quick looks (never for a plan you ship):
# kernels timed hot, without the cache sweep before each call (default settings exercise the sweep).
QUICK_PROFILE = ProfileSettings(warmup=1, repeats=2, min_seconds=0.0, cold_cache=False, whole_model_max_seconds=None)
QUICK_CALIBRATION = CalibrationSettings(sides=(16,), blocks=3, rounds=2, start_rounds=5, start_side=96)
# (split_within: the mini models' split plans are timed even when predicted slower, so that tests
# exercise the whole selection)
QUICK_SELECTION = SelectionSettings(plan_warmup=1, plan_repeats=2, plan_min_seconds=0.0, duel_rounds=3,
                                    duel_round_seconds=0.002, refine_rounds=2, refine_runs=2, split_within=1.25)
