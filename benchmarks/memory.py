"""Peak memory of one pretraining step: ELECTRA against BERT's masked LM, and the PyTorch peer.

Run from the repository root:

  python benchmarks/memory.py                      # seq 128/256/512, batch 16, plot to --plot
  python benchmarks/memory.py --quick              # smoke run: seq 32/64, batch 2, no peer

ELECTRA-Small (generator + discriminator) and BERT-MLM with the same discriminator
(`electra_objective: false`: the discriminator-sized encoder trained as a masked LM alone), in
electra_tf (run_pretraining's train step) and in the PyTorch + transformers peer
(benchmarks/pretrain_throughput.py's), at each sequence length with one batch size.

How it measures, alike in both frameworks: each configuration runs in a fresh process of its
own, which builds the model and optimizer and runs one warm-up step. Then, for each of
MEASURED_STEPS steps, it resets the kernel's peak-RSS counter (/proc/self/clear_refs) and runs
the step; "step peak" is the largest peak resident set size during a step minus the resident
size just before it: the activations, gradients and temporaries one step needs on top of what
the process holds between steps. "Resting" is that resident size between steps minus the bare
process's after its imports: weights, optimizer slots (both frameworks free the gradients as a
step ends) and what the framework keeps once it has run the step. TensorFlow's first call
builds and keeps over 1 GB whatever the length (the traced graph, its optimised executors, the
XLA-compiled fused kernels), which is why the measured steps come after a warm-up step; tracing
ahead of it (get_concrete_function) builds only part of that.

The resident size follows live memory only if freed tensors leave it. glibc is told to map
every allocation above 64 KB on its own (MALLOC_MMAP_THRESHOLD_), so that a free unmaps it, and
TensorFlow's oneDNN allocator is told to use the system allocator
(TF_ONEDNN_USE_SYSTEM_ALLOCATOR): by default it serves every tensor of 4 KB or more from a BFC
pool that grows to the first step's peak and never shrinks, which hides the steps' working
memory in the resting size. PyTorch's CPU allocator is malloc already. Neither setting changes
the kernels that run.

Results go to --results (JSON lines, one per configuration; configurations already there are
not rerun, so an interrupted run resumes), a Markdown table to stdout, a PNG to --plot.
Linux only (/proc).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from typing import Any

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO_ROOT, os.path.join(REPO_ROOT, "benchmarks")]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from electra_tf import hardware  # noqa: E402  (first: decides oneDNN before TensorFlow loads)
import pretrain_throughput as bench  # noqa: E402

IMPLEMENTATIONS = ("electra_tf", "torch")
OBJECTIVES = ("electra", "bert_mlm")
MMAP_THRESHOLD = 65536
# Peaks differ a little from step to step (TensorFlow's executor orders independent ops as
# its threads free up); the largest of a few is the step's need.
MEASURED_STEPS = 2
TARGET_RATIO = 1.2
CHILD_ENV = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
             "TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}


def status_mb(key: str) -> float:
    """A /proc/self/status memory field (VmRSS, VmHWM) in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(key)


def reset_peak() -> None:
    """Resets VmHWM to the current resident size."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def measure(implementation: str, objective: str, seq_length: int, batch_size: int
            ) -> dict[str, Any]:
    """One configuration in this process (the child's side)."""
    bare = status_mb("VmRSS")
    config = bench.model_config("small", batch_size, seq_length, "float32",
                                electra_objective=objective == "electra")
    batch = bench.random_batch(batch_size, seq_length)
    make_step = bench.make_electra_tf_step if implementation == "electra_tf" \
        else bench.make_torch_step
    step, report, _ = make_step(config, batch)
    built = status_mb("VmRSS")
    step()  # warm-up: what the framework builds on the first call stays, so it is not measured
    peaks, resting = [], []
    for _ in range(MEASURED_STEPS):
        gc.collect()
        before = status_mb("VmRSS")
        reset_peak()
        step()
        peaks.append(status_mb("VmHWM") - before)
        resting.append(before - bare)
    return {"implementation": implementation, "objective": objective,
            "seq_length": seq_length, "batch_size": batch_size,
            "step_peak_mb": max(peaks), "step_peaks_mb": peaks, "resting_mb": max(resting),
            "built_mb": built - bare, "process_peak_mb": status_mb("VmHWM") - bare,
            "onednn": hardware.onednn_enabled(),
            "environment": {k: os.environ.get(k) for k in CHILD_ENV}, "loss": report()}


def run_child(implementation: str, objective: str, seq_length: int, batch_size: int
              ) -> dict[str, Any]:
    env = {**os.environ, **CHILD_ENV}
    result = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", implementation, objective,
         str(seq_length), str(batch_size)],
        env=env, capture_output=True, text=True, check=False)
    if result.returncode:
        raise RuntimeError(f"{implementation} {objective} seq {seq_length} failed:\n"
                           f"{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| implementation | seq | batch | ELECTRA step peak MB | BERT-MLM step peak MB | "
             "ELECTRA / BERT-MLM | ELECTRA resting MB | BERT-MLM resting MB |",
             "|---|---|---|---|---|---|---|---|"]
    for (implementation, seq_length), pair in _pairs(results).items():
        electra, bert = pair["electra"], pair["bert_mlm"]
        lines.append(
            f"| {implementation} | {seq_length} | {electra['batch_size']} | "
            f"{electra['step_peak_mb']:.0f} | {bert['step_peak_mb']:.0f} | "
            f"{electra['step_peak_mb'] / bert['step_peak_mb']:.2f}x | "
            f"{electra['resting_mb']:.0f} | {bert['resting_mb']:.0f} |")
    return "\n".join(lines)


def _pairs(results: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, dict]]:
    pairs: dict[tuple[str, int], dict[str, dict]] = {}
    for r in results:
        pairs.setdefault((r["implementation"], r["seq_length"]), {})[r["objective"]] = r
    return {key: pair for key, pair in sorted(pairs.items()) if len(pair) == 2}


def plot(results: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    styles = {"electra": ("ELECTRA", "-o"), "bert_mlm": ("BERT-MLM", "--s")}
    for implementation in IMPLEMENTATIONS:
        for objective, (label, style) in styles.items():
            points = sorted((r["seq_length"], r["step_peak_mb"]) for r in results
                            if r["implementation"] == implementation
                            and r["objective"] == objective)
            if points:
                ax.plot(*zip(*points), style, label=f"{implementation} {label}")
    batch = results[0]["batch_size"]
    ax.set(xlabel="sequence length", ylabel="step peak memory (MB)",
           title=f"One ELECTRA-Small pretraining step, batch {batch}")
    ax.set_xticks(sorted({r["seq_length"] for r in results}))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", nargs=4, metavar=("IMPL", "OBJECTIVE", "SEQ", "BATCH"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--seq_lengths", type=int, nargs="+", default=[128, 256, 512])
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--skip_torch", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--results", default="/tmp/electra_tf_memory.jsonl")
    parser.add_argument("--plot", default=os.path.join(REPO_ROOT, "docs", "memory.png"))
    args = parser.parse_args(argv)
    if args.child:
        implementation, objective, seq_length, batch_size = args.child
        print(json.dumps(measure(implementation, objective, int(seq_length), int(batch_size))))
        return
    if args.quick:
        args.seq_lengths, args.batch_size, args.skip_torch = [32, 64], 2, True
    load_at_start = os.getloadavg()
    done = []
    if os.path.exists(args.results):
        with open(args.results) as f:
            done = [json.loads(line) for line in f if line.strip()]
    implementations = IMPLEMENTATIONS[:1] if args.skip_torch else IMPLEMENTATIONS
    for implementation in implementations:  # ours at every length first: the target's rows
        for seq_length in args.seq_lengths:
            for objective in OBJECTIVES:
                key = (implementation, objective, seq_length, args.batch_size)
                if any((r["implementation"], r["objective"], r["seq_length"],
                        r["batch_size"]) == key for r in done):
                    continue
                print(f"measuring {' '.join(map(str, key))}", file=sys.stderr, flush=True)
                result = run_child(*key)
                done.append(result)
                with open(args.results, "a") as f:
                    f.write(json.dumps(result) + "\n")
    results = [r for r in done if r["batch_size"] == args.batch_size
               and r["seq_length"] in args.seq_lengths and r["implementation"] in implementations]

    ratios = [pair["electra"]["step_peak_mb"] / pair["bert_mlm"]["step_peak_mb"]
              for (implementation, _), pair in _pairs(results).items()
              if implementation == "electra_tf"]
    print(f"# Peak memory of one ELECTRA-Small pretraining step: ELECTRA / BERT-MLM "
          f"{min(ratios):.2f}-{max(ratios):.2f}x in electra_tf (target <= {TARGET_RATIO}x)\n")
    print("\n".join(bench.machine_report(load_at_start)))
    settings = " ".join(f"{k}={v}" for k, v in CHILD_ENV.items() if k != "TF_CPP_MIN_LOG_LEVEL")
    print(f"- batch {args.batch_size}; float32; step peak = the largest of {MEASURED_STEPS} "
          "steps' peak RSS minus the RSS before it, after a warm-up step; resting = the RSS "
          f"between steps minus the bare process's; one process per configuration, {settings}\n")
    print(table(results))
    plot(results, args.plot)
    print(f"\n- plot: {os.path.relpath(args.plot, REPO_ROOT)}")


if __name__ == "__main__":
    main()
