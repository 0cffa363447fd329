"""Where one pretraining step's time goes: TensorFlow's profiler over a few steps of
run_pretraining.py's train step (the one benchmarks/pretrain_throughput.py times), its op events
summed by kind.

Run from the repository root, on an otherwise idle machine:

  python benchmarks/step_profile.py                    # the miniature at batch 32, all cores
  python benchmarks/step_profile.py --processes 2      # the threads one of 2 side-by-side runs gets
  python benchmarks/step_profile.py --model small      # ELECTRA-Small at batch 128
  python benchmarks/step_profile.py --model wide       # the wide ladder's model at batch 128
  python benchmarks/step_profile.py --precision mixed_bfloat16   # the bfloat16 step
  python benchmarks/step_profile.py --onednn_verbose   # oneDNN's own log instead (below)

It times --steps steps without the profiler, then profiles as many, and reads the trace
(an XSpace: tensorboard --logdir OUT shows it with the profile plugin). Every op event of
TensorFlow's executor threads counts with its self time (its duration less the events nested in
it), summed by KINDS: oneDNN's matmuls, XLA's compiled kernels (the fused element-wise tails
and reductions, the `kernels: fused` path), random numbers (dropout's masks, the masking), layout
ops, and the executor's own time between ops. With intra-op threads an op's event lasts its wall
time on all of them; with inter-op threads events overlap, so the sum can exceed the step.

--onednn_verbose runs the steps with ONEDNN_VERBOSE=1 instead of the profiler: oneDNN logs every
primitive it executes (its kind: `gemm_api` for TensorFlow's MatMul, `matmul` for BatchMatMul,
`reorder`, `softmax`; the shapes; the milliseconds), summed per kind and per kind and shape,
with each matmul shape's GFLOP/s. The matmuls' FLOPs add up to the step's when every matmul of
the step runs in oneDNN.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import glob
import math
import os
import re
import sys
import tempfile
import time
from typing import Iterable, Iterator, NamedTuple, Sequence

# An op event's kind: the first pattern its name matches (TensorFlow's op events are named
# "name:Type"; XLA's compiled kernels by their lower-case HLO names; the executor's own events
# "Class::Method").
KINDS = (
    ("matmul (oneDNN)", re.compile(r":_?(Mkl)?(Fused)?(Batch)?MatMul")),
    ("matmul (XLA dot)", re.compile(r"^dot(\.\d+)?$")),
    ("random numbers", re.compile(r"Random|^rng")),
    ("layout (transpose, copy)", re.compile(r"Transpose|^transpose|^copy")),
    ("softmax (oneDNN)", re.compile(r"Softmax")),
    ("XLA kernels (element-wise, reductions)", re.compile(r"^[a-z][a-z0-9_.\-]*$")),
    ("executor, between ops", re.compile(r"::")),
    ("other TensorFlow ops", re.compile(r"")),
)
EXECUTOR_LINES = "tf_Compute"  # the trace lines of TensorFlow's executor threads
# Events an op's kernel opens inside itself (its work shared out over the intra-op threads):
# their time stays the op's.
INSIDE_AN_OP = ("ParallelFor",)


class Event(NamedTuple):
    name: str
    start: int  # picoseconds
    duration: int


def kind(name: str) -> str:
    return next(label for label, pattern in KINDS if pattern.search(name))


def self_times(events: Iterable[Event]) -> list[tuple[str, int]]:
    """(name, self time) of the events of one thread's line: an event nested in another (it
    starts before the other ends) is subtracted from it, except the INSIDE_AN_OP ones, left
    out with their time in the op's."""
    ordered = sorted((e for e in events if e.name not in INSIDE_AN_OP),
                     key=lambda e: (e.start, -e.duration))
    own = [e.duration for e in ordered]
    open_events: list[int] = []
    for i, event in enumerate(ordered):
        while open_events and (ordered[open_events[-1]].start
                               + ordered[open_events[-1]].duration <= event.start):
            open_events.pop()
        if open_events:
            own[open_events[-1]] -= event.duration
        open_events.append(i)
    return [(e.name, t) for e, t in zip(ordered, own)]


def read_trace(directory: str) -> list[tuple[str, int]]:
    """(name, self time in ps) of every op event on the executor threads of the newest
    profile in `directory`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = sorted(glob.glob(os.path.join(directory, "plugins", "profile", "*", "*.xplane.pb")))
    if not paths:
        raise FileNotFoundError(f"no profile (*.xplane.pb) under {directory}")
    space = xplane_pb2.XSpace()
    with open(paths[-1], "rb") as f:
        space.ParseFromString(f.read())
    out = []
    for plane in space.planes:
        names = plane.event_metadata
        for line in plane.lines:
            if line.name.startswith(EXECUTOR_LINES):
                out += self_times(Event(names[e.metadata_id].name, e.offset_ps, e.duration_ps)
                                  for e in line.events)
    return out


def tables(events: Sequence[tuple[str, int]], steps: int, top: int) -> str:
    """The kinds' and the top ops' milliseconds per step, as Markdown."""
    total = sum(t for _, t in events) or 1
    by_kind, by_op, count = collections.Counter(), collections.Counter(), collections.Counter()
    for name, t in events:
        op = name if "::" in name else name.split(":")[-1]  # an op's type, or the event
        by_kind[kind(name)] += t
        by_op[op] += t
        count[op] += 1
    lines = ["| kind | ms per step | share |", "|---|---|---|"]
    lines += [f"| {label} | {by_kind[label] / steps / 1e9:.1f} | "
              f"{100 * by_kind[label] / total:.1f}% |" for label, _ in KINDS if by_kind[label]]
    lines += ["", "| op (type, or XLA kernel) | ms per step | share | events per step |",
              "|---|---|---|---|"]
    lines += [f"| {op} | {t / steps / 1e9:.1f} | {100 * t / total:.1f}% | "
              f"{count[op] / steps:g} |" for op, t in by_op.most_common(top)]
    return "\n".join(lines)


class OnednnCall(NamedTuple):
    kind: str  # gemm_api, matmul, reorder, softmax, ...
    shape: str  # oneDNN's problem description: "MxK:KxN" for a matmul, batch dims first
    milliseconds: float


def onednn_calls(lines: Iterable[str]) -> list[OnednnCall]:
    """The primitives of ONEDNN_VERBOSE=1's log lines (`onednn_verbose,v1,primitive,exec,cpu,
    KIND,IMPLEMENTATION,...,SHAPE,MS`); other lines are skipped."""
    calls = []
    for line in lines:
        fields = line.rstrip("\n").split(",")
        if fields[0] == "onednn_verbose" and "exec" in fields[:4]:
            at = fields.index("exec")
            calls.append(OnednnCall(fields[at + 2], fields[-2], float(fields[-1])))
    return calls


def matmul_flops(call: OnednnCall) -> int:
    """2 x batch x M x K x N for a matmul's "BxMxK:BxKxN" (0 for other primitives)."""
    if call.kind not in ("gemm_api", "matmul") or ":" not in call.shape:
        return 0
    a, b = ([int(d) for d in side.split("x")] for side in call.shape.split(":"))
    return 2 * math.prod(a[:-2]) * a[-2] * a[-1] * b[-1]


def onednn_tables(calls: Sequence[OnednnCall], steps: int, top: int) -> str:
    """Per kind, then per kind and shape: milliseconds and calls per step, share, GFLOP/s."""
    total = sum(c.milliseconds for c in calls) or 1.0
    flops = sum(matmul_flops(c) for c in calls)
    kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0, 0])
    shapes: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0.0, 0, 0])
    for c in calls:
        for table, key in ((kinds, c.kind), (shapes, (c.kind, c.shape))):
            table[key][0] += c.milliseconds
            table[key][1] += 1
            table[key][2] += matmul_flops(c)

    def rate(ms: float, flop: float) -> str:
        return f"{flop / ms / 1e6:.1f}" if flop else ""

    lines = [f"- oneDNN: {total / steps:.1f} ms a step; its matmuls {flops / steps / 1e9:.2f} "
             "GFLOP a step", "", "| primitive | ms per step | share | calls per step | GFLOP/s |",
             "|---|---|---|---|---|"]
    lines += [f"| {k} | {ms / steps:.1f} | {100 * ms / total:.1f}% | {n / steps:g} | "
              f"{rate(ms, f)} |" for k, (ms, n, f) in sorted(kinds.items(), key=lambda kv:
                                                           -kv[1][0])]
    lines += ["", "| primitive | shape | ms per step | calls per step | GFLOP/s |",
              "|---|---|---|---|---|"]
    lines += [f"| {k} | {shape} | {ms / steps:.1f} | {n / steps:g} | {rate(ms, f)} |"
              for (k, shape), (ms, n, f) in sorted(shapes.items(),
                                                   key=lambda kv: -kv[1][0])[:top]]
    return "\n".join(lines)


@contextlib.contextmanager
def stdout_to(path: str) -> Iterator[None]:
    """File descriptor 1 (where oneDNN's C code prints) into `path`, flushed on the way back."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "w") as out:
        os.dup2(out.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)


@contextlib.contextmanager
def profiled_into(directory: str) -> Iterator[None]:
    """TensorFlow's profiler on, its trace written into `directory` on the way back."""
    import tensorflow as tf

    tf.profiler.experimental.start(directory)
    try:
        yield
    finally:
        tf.profiler.experimental.stop()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="miniature", choices=("miniature", "small", "wide"),
                        help="benchmarks/pretrain_throughput.py's MODELS")
    parser.add_argument("--batch_size", type=int, default=None,
                        help="default: 32 for miniature, 128 for small and wide")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--processes", type=int, default=1,
                        help="profile with the threads one of this many processes side by side "
                             "gets (hardware.thread_limits), as the experiments train")
    parser.add_argument("--kernels", default="auto", choices=("auto", "fused", "reference"))
    parser.add_argument("--precision", default="float32", choices=("float32", "mixed_bfloat16"))
    parser.add_argument("--top", type=int, default=15, help="ops listed")
    parser.add_argument("--out", default=None, help="keep the trace here (default: a temp dir)")
    parser.add_argument("--onednn_verbose", action="store_true",
                        help="oneDNN's log of the steps' primitives instead of the profiler")
    args = parser.parse_args(argv)
    if min(args.steps, args.top) < 1:
        parser.error("--steps and --top must be positive")
    if not 1 <= args.processes <= (os.cpu_count() or 1):
        parser.error(f"--processes must be between 1 and the {os.cpu_count()} CPUs, "
                     f"got {args.processes}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    load = os.getloadavg()
    out = args.out or tempfile.mkdtemp(prefix="step_profile_")
    os.makedirs(out, exist_ok=True)
    log = os.path.join(out, "onednn_verbose.log")
    if args.onednn_verbose:
        os.environ["ONEDNN_VERBOSE"] = "1"  # read by oneDNN at its first primitive
    import pretrain_throughput as bench  # puts the repository on the path, imports electra_tf
    import tensorflow as tf
    from electra_tf import hardware

    threads = hardware.threads_per_process(args.processes)
    tf.config.threading.set_intra_op_parallelism_threads(threads)  # before the first op
    tf.config.threading.set_inter_op_parallelism_threads(threads)

    batch_size = args.batch_size or bench.BATCH_SIZES[args.model]
    config = bench.model_config(args.model, batch_size, 128, args.precision, kernels=args.kernels)
    bench.progress("tracing and warming up")
    with stdout_to(log) if args.onednn_verbose else contextlib.nullcontext():
        step, _, detail = bench.make_electra_tf_step(config, bench.random_batch(batch_size, 128))
        plain = bench.time_calls(step, warmup=2, reps=args.steps)
    # The same steps again, recorded: their primitives in a log of their own, or traced.
    with stdout_to(log) if args.onednn_verbose else profiled_into(out):
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        profiled = (time.perf_counter() - start) / args.steps
    if args.onednn_verbose:
        with open(log) as lines:
            result = onednn_tables(onednn_calls(lines), args.steps, args.top)
    else:
        result = tables(read_trace(out), args.steps, args.top)
    timing = (f"{profiled:.3f} s with ONEDNN_VERBOSE=1, which logs every call (mean of "
              f"{args.steps}); the log: {log}" if args.onednn_verbose else
              f"{min(plain):.3f} s (best of {args.steps}), {profiled:.3f} s under the profiler "
              f"(mean of {args.steps}); the trace: {out}")
    print("\n".join([
        f"# Where a pretraining step goes: {args.model}, batch {batch_size} x seq 128, "
        f"{args.precision}",
        "", *bench.machine_report(load),
        f"- {threads} thread(s) (as one of {args.processes} process(es) side by side), "
        f"kernels {config.kernels}, {detail}", f"- step: {timing}", "", result]))


if __name__ == "__main__":
    main()
