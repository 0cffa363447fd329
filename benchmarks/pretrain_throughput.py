"""Training throughput of one pretraining step (ELECTRA-Small, or the reproduction's
miniature): electra_tf against PyTorch.

Run from the repository root:

  python benchmarks/pretrain_throughput.py               # batch 128 x seq 128, 3 timed steps
  python benchmarks/pretrain_throughput.py --also_bf16   # plus a mixed_bfloat16 row for ours
  python benchmarks/pretrain_throughput.py --quick       # smoke run: batch 8 x seq 32, 1 step
  python benchmarks/pretrain_throughput.py --kernels reference --skip_torch  # the plain path
  python benchmarks/pretrain_throughput.py --model miniature --processes 2  # as the ladder runs
  python benchmarks/pretrain_throughput.py --model miniature --jit_compile on  # XLA on the CPU

What it measures, in one process on this machine:
  * electra_tf: run_pretraining.py's train step (forward and backward under a GradientTape,
    XLA as distribution.use_xla decides, then distribution.apply_gradients and the metrics update),
    driven by host_calls.run_steps on the default strategy, one step per call.
  * the peer: transformers' ElectraForMaskedLM (generator) and ElectraForPreTraining
    (discriminator) of the same sizes with tied embeddings, the same masking, sampling and loss,
    torch.optim.AdamW and clip_grad_norm_(1.0). Its generator computes vocabulary logits at
    every position, as HF's model does; the MLM loss only reads the masked ones.
  * the fp32 matmul peak of tf.matmul and torch.matmul at square sizes and of the step's own
    matmuls (the machine's peak is the best of them), plus tf's bfloat16 matmul peak for
    reference.
  * every float32 matmul of our step at its shapes (forward, dx and dw), each alone through
    the ops our model uses: their sum is the time of a step that did nothing but its matmuls,
    about the best a float32 step built on TensorFlow's matmuls can do. It has its own row.
  * with --processes P, each implementation's step in P processes side by side, each of
    cpu_count / P threads, timed together once all are warm: the arrangement the experiments
    train in (experiments/efficiency.py, --workers). The row's step time is one batch over
    the processes' summed rates; each process's times are listed below the table.
The report opens with the ratio to the peer and what the run ran on (CPU, vector ISA, cores,
oneDNN's state, versions, the load average at the start; see machine_report).
Both models train on one fixed random batch with dropout on and random weights (nothing is
downloaded). Each step time is the median of --steps timed steps after one warm-up step (which
includes tracing). Model FLOPs are counted analytically (electra_tf.flops); the
utilization column is model FLOPs / step time / fp32 matmul peak.

A benchmark, not a test: run it on an otherwise idle machine, as timings are noisy.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import glob
import importlib.metadata
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TF is imported: no C++ chatter
os.environ["KERAS_BACKEND"] = "tensorflow"  # electra_tf is TensorFlow-only

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from electra_tf import hardware  # noqa: E402  (first: decides oneDNN before TensorFlow loads)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from electra_tf import config as config_lib  # noqa: E402
from electra_tf import distribution, fused, host_calls, pretraining  # noqa: E402
from electra_tf.flops import Matmul, pretraining_matmuls, pretraining_step_flops  # noqa: E402

SPECIAL = pretraining.SpecialIds()  # [PAD]=0, [CLS]=101, [SEP]=102, [MASK]=103
# Random "word" ids: clear of the special tokens and inside every model's vocabulary (the
# miniature's 8,192 is the smallest).
TOKEN_RANGE = (1000, 8000)
SEED = 1234
MATMUL_SIZES = (1024, 2048, 4096)
QUICK_MATMUL_SIZES = (512, 1024)
ONEDNN_BF16_FALLBACK = re.compile(r"oneDNN supports DT_BFLOAT16 only on platforms with AVX-512")


@dataclasses.dataclass
class Row:
    """One line of the results table."""
    implementation: str
    precision: str
    step_times: list[float]
    batch_size: int
    model_flops: float  # the ELECTRA step's useful matmul FLOPs (ours)
    executed_flops: float  # the matmul FLOPs this implementation actually performs

    @property
    def seconds(self) -> float:
        return statistics.median(self.step_times)

    @property
    def examples_per_second(self) -> float:
        return self.batch_size / self.seconds


# ----------------------------------------------------------------------------- helpers

def time_calls(fn: Callable[[], Any], warmup: int, reps: int) -> list[float]:
    """Wall-clock seconds of `reps` calls of a synchronous `fn` after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    gc.collect()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def progress(message: str) -> None:
    """Progress goes to stderr, so stdout is only the report."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def random_batch(batch_size: int, seq_length: int, seed: int = SEED) -> dict[str, np.ndarray]:
    """Full-length sequences [CLS] w1 ... wn [SEP] of random ids, no padding, one segment."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(*TOKEN_RANGE, size=(batch_size, seq_length), dtype=np.int32)
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    return {"input_ids": ids, "input_mask": np.ones_like(ids),
            "segment_ids": np.zeros_like(ids)}


# The models this benchmark times: ELECTRA-Small at its paper's batch, and the reproduction's
# miniature (experiments/efficiency_plan.BUDGETS["full"]) and wide ladder's model
# (experiments/ladder.LADDERS["mixed_wide"]), the shapes most of this machine's pretraining
# time goes to (tests/test_benchmarks.py checks that they agree).
MINIATURE = {"model_size": "small", "vocab_size": 8192, "embedding_size": 128,
             "generator_hidden_size": 0.25,
             "model_hparam_overrides": {"hidden_size": 128, "num_hidden_layers": 4,
                                        "num_attention_heads": 2, "intermediate_size": 512}}
MODELS = {
    "small": {"model_size": "small", "vocab_size": 30522},
    "miniature": MINIATURE,
    "wide": {**MINIATURE, "model_hparam_overrides": {
        "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
        "intermediate_size": 1024}},
}
BATCH_SIZES = {"small": 128, "miniature": 32, "wide": 128}


def model_config(model: str, batch_size: int, seq_length: int, precision: str,
                 **hparams: Any) -> config_lib.PretrainingConfig:
    """The pretraining config of MODELS[model] (plus `hparams`); data_dir need not exist
    (nothing is read)."""
    return config_lib.from_hparams("bench", "/tmp/nodata", {
        **MODELS[model], "train_batch_size": batch_size, "max_seq_length": seq_length,
        "precision": precision, "seed": SEED, **hparams})


def machine_report(load_at_start: tuple[float, float, float]) -> list[str]:
    """What a benchmark ran on, as Markdown list items: the CPU, its vector ISA and cores,
    oneDNN's state and who decided it, the versions, and the load average when it started."""
    cpu = hardware.read_cpu()
    flags = " ".join(cpu.isa_flags) or "none"
    return [f"- {hardware.banner()}",
            f"- ISA flags that matter (of {', '.join(hardware.ISA_FLAGS)}): {flags}",
            f"- versions: python {platform.python_version()}, tensorflow {version('tensorflow')}, "
            f"keras {version('keras')}, torch {version('torch')}, "
            f"transformers {version('transformers')}",
            "- load average at start (1, 5, 15 min): "
            + ", ".join(f"{x:.2f}" for x in load_at_start)
            + f" on {os.cpu_count()} CPUs: compare rows of this run only"]


def threads() -> int:
    """The threads this process computes with: TF_NUM_INTRAOP_THREADS when a side-by-side
    arrangement set it, else one per core."""
    return int(os.environ.get("TF_NUM_INTRAOP_THREADS", os.cpu_count() or 1))


def import_torch():
    """torch, limited to this process's threads() (imported only when used)."""
    import torch

    torch.set_num_threads(threads())
    return torch


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# ----------------------------------------------------------------------------- matmul peaks

def tf_matmul_gflops(n: int, dtype: tf.DType, reps: int) -> float:
    """Best GFLOP/s of an n x n x n tf.matmul inside a tf.function."""
    a = tf.cast(tf.random.normal([n, n], seed=1), dtype)
    b = tf.cast(tf.random.normal([n, n], seed=2), dtype)
    matmul = tf.function(tf.matmul)
    best = min(time_calls(lambda: matmul(a, b).numpy(), warmup=1, reps=reps))
    return 2.0 * n**3 / best / 1e9


def torch_matmul_gflops(n: int, reps: int) -> float:
    """Best GFLOP/s of an n x n x n float32 torch.matmul."""
    torch = import_torch()
    a, b = torch.randn(n, n), torch.randn(n, n)
    with torch.inference_mode():
        best = min(time_calls(lambda: torch.matmul(a, b), warmup=1, reps=reps))
    return 2.0 * n**3 / best / 1e9


def tf_matmul_seconds(matmul: Matmul, reps: int) -> float:
    """Median seconds of one Matmul's forward and backward products in float32, through the
    ops our model uses (fused.matmul for dense layers, whose weight gradient takes the faster
    orientation; tf.matmul for the attention's), `count` times in a tf.while_loop (so that
    TensorFlow cannot merge the repeats), with nothing else around them."""
    lead = [matmul.batch] if matmul.batch > 1 else []
    x = tf.random.normal(lead + [matmul.m, matmul.k], seed=1)
    w = tf.random.normal(lead + [matmul.k, matmul.n], seed=2)
    dy = tf.random.normal(lead + [matmul.m, matmul.n], seed=3)
    product = tf.matmul if lead else fused.matmul

    def body(i: tf.Tensor, total: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = product(x, w)
        dx, dw = tape.gradient(y, [x, w], output_gradients=dy)
        return i + 1, total + tf.add_n([tf.reshape(t, [-1])[0] for t in (y, dx, dw)])

    run = tf.function(lambda: tf.while_loop(lambda i, _: i < matmul.count, body, (0, 0.0))[1])
    return statistics.median(time_calls(lambda: run().numpy(), warmup=1, reps=reps))


# ----------------------------------------------------------------------------- ours

def make_electra_tf_step(config: config_lib.PretrainingConfig, batch: dict[str, np.ndarray]
                         ) -> tuple[Callable[[], None], Callable[[], str], str]:
    """run_pretraining.py's train step on one fixed batch: (step, loss report, XLA
    description). The step returns once the update is applied."""
    strategy = distribution.make_strategy(config.strategy)
    jit = distribution.use_xla(config.jit_compile, strategy)
    state = pretraining.create_state(config, SPECIAL, strategy)
    optimizer, metrics = state.optimizer, state.metrics
    train_step = state.make_train_step(strategy.num_replicas_in_sync, jit)  # run_pretraining's

    # One fixed batch, fed as run_pretraining feeds its TFRecords.
    dataset = tf.data.Dataset.from_tensors({k: tf.constant(v) for k, v in batch.items()})
    iterator = iter(strategy.distribute_datasets_from_function(lambda _: dataset.repeat()))
    loop = host_calls.run_steps(strategy, train_step)
    one = tf.constant(1)

    def step() -> None:
        loop(iterator, one)
        int(optimizer.iterations)  # waits for the step's updates

    def report() -> str:
        loss = metrics.results().get("loss", float("nan"))
        return f"mean loss {loss:.3f} over {int(optimizer.iterations)} steps"

    return step, report, f"XLA {'on' if jit else 'off'} (distribution.use_xla)"


# ----------------------------------------------------------------------------- the peer

def make_torch_step(config: config_lib.PretrainingConfig, batch: dict[str, np.ndarray]
                    ) -> tuple[Callable[[], None], Callable[[], str], str]:
    """The PyTorch + transformers peer's training step on one fixed batch: (step, loss report,
    attention kernel). With config.electra_objective false, BERT's: the discriminator-sized
    masked LM alone."""
    torch = import_torch()
    import torch.nn.functional as F
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    torch.manual_seed(SEED)
    disc_bert, gen_bert = config.bert_config(), config.generator_bert_config()

    def hf_config(bert: dict[str, Any]) -> ElectraConfig:
        return ElectraConfig(
            vocab_size=bert["vocab_size"], embedding_size=config.resolved_embedding_size(),
            hidden_size=bert["hidden_size"], num_hidden_layers=bert["num_hidden_layers"],
            num_attention_heads=bert["num_attention_heads"],
            intermediate_size=bert["intermediate_size"], hidden_act=bert["hidden_act"],
            hidden_dropout_prob=bert["hidden_dropout_prob"],
            attention_probs_dropout_prob=bert["attention_probs_dropout_prob"],
            max_position_embeddings=bert["max_position_embeddings"],
            type_vocab_size=bert["type_vocab_size"],
            initializer_range=bert["initializer_range"], layer_norm_eps=1e-12)

    electra = config.electra_objective
    generator = ElectraForMaskedLM(hf_config(gen_bert if electra else disc_bert))
    models = [generator]
    if electra:
        discriminator = ElectraForPreTraining(hf_config(disc_bert))
        # ELECTRA's tying: one embeddings block (word, position, token type, LayerNorm), and
        # the generator's output layer is the word-embedding matrix.
        generator.electra.embeddings = discriminator.electra.embeddings
        generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
        models.append(discriminator)
    for model in models:
        model.train()
    params = list({id(p): p for m in models for p in m.parameters()}.values())  # shared once
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, eps=1e-6,
                                  weight_decay=config.weight_decay_rate)

    input_ids = torch.from_numpy(batch["input_ids"]).long()
    input_mask = torch.from_numpy(batch["input_mask"]).long()
    segment_ids = torch.from_numpy(batch["segment_ids"]).long()
    rows = torch.arange(input_ids.shape[0])[:, None]
    n = config.max_predictions_per_seq

    def mask_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Ours (pretraining.mask) in torch: N draws with replacement per example over the
        maskable tokens; 85% of them become [MASK]. Returns masked ids, positions, original
        ids there, weights."""
        candidates = input_mask.bool()
        for token in (SPECIAL.cls, SPECIAL.sep, SPECIAL.mask):
            candidates &= input_ids != token
        num_to_predict = torch.round(input_mask.sum(-1) * config.mask_prob).long().clamp(1, n)
        weights = (torch.arange(n)[None] < num_to_predict[:, None]).float()
        any_candidate = candidates.any(-1, keepdim=True)
        weights *= any_candidate.float()
        draw_from = (candidates | ~any_candidate).float()  # rows without candidates: dummies
        positions = torch.multinomial(draw_from, n, replacement=True) * weights.long()
        masked_lm_ids = input_ids.gather(1, positions) * weights.long()
        use_mask = (torch.rand(positions.shape) < pretraining.REPLACE_WITH_MASK_PROB).long()
        masked = input_ids.scatter(1, positions * use_mask, SPECIAL.mask)
        masked[:, 0] = input_ids[:, 0]  # unused draws point at position 0: leave it alone
        return masked, positions, masked_lm_ids, weights

    losses: list[float] = []

    def step() -> None:
        masked, positions, masked_lm_ids, weights = mask_batch()
        logits = generator(input_ids=masked, attention_mask=input_mask,
                           token_type_ids=segment_ids).logits  # [B, L, V]
        mlm_logits = logits[rows, positions]  # [B, N, V]
        nll = -F.log_softmax(mlm_logits, -1).gather(-1, masked_lm_ids[..., None]).squeeze(-1)
        gen_loss = (weights * nll).sum() / (weights.sum() + 1e-6)
        if not electra:
            finish(gen_loss)
            return

        with torch.no_grad():  # Gumbel-max sample of the replacements
            uniform = torch.rand(mlm_logits.shape)
            gumbel = -torch.log(-torch.log(uniform + 1e-9) + 1e-9)
            sampled = (mlm_logits / config.temperature + gumbel).argmax(-1)
            fake = input_ids.scatter(1, positions, sampled)
            fake[:, 0] = input_ids[:, 0]
            replaced = torch.zeros_like(input_ids).scatter(1, positions, 1)
            replaced[:, 0] = 0
            labels = (replaced.bool() & (fake != input_ids)).float()

        disc_logits = discriminator(input_ids=fake, attention_mask=input_mask,
                                    token_type_ids=segment_ids).logits  # [B, L]
        real = input_mask.float()
        disc_loss = F.binary_cross_entropy_with_logits(
            disc_logits, labels, weight=real, reduction="sum") / (real.sum() + 1e-6)
        finish(config.gen_weight * gen_loss + config.disc_weight * disc_loss)

    def finish(loss: torch.Tensor) -> None:
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        # Freed as the step ends, as TensorFlow's step frees its gradients: between steps both
        # hold weights and optimizer state alone (benchmarks/memory.py measures from there).
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())

    def report() -> str:
        return f"mean loss {statistics.mean(losses):.3f} over {len(losses)} steps"

    attention = getattr(generator.config, "_attn_implementation", None) or "default"
    return step, report, attention


# ----------------------------------------------------------------------------- either step

# Each implementation's step: run_pretraining.py's train step, and the PyTorch +
# transformers peer's. Each returns (step, report, description: XLA or attention kernel).
STEPPERS = {"electra_tf": make_electra_tf_step, "torch": make_torch_step}


def time_step(implementation: str, config: config_lib.PretrainingConfig,
              batch: dict[str, np.ndarray], steps: int) -> tuple[list[float], str]:
    """Step times of one implementation's step in this process, after one warm-up; returns
    (times, the step's description: XLA or attention kernel)."""
    step, report, detail = STEPPERS[implementation](config, batch)
    times = time_calls(step, warmup=1, reps=steps)
    progress(f"  {implementation} {config.precision}: {report()}")
    return times, detail


# ----------------------------------------------------------------------------- side by side

BARRIER_TIMEOUT = 900  # seconds a process waits for its siblings to finish warming up


def side_by_side(args: argparse.Namespace, implementation: str, precision: str
                 ) -> tuple[list[list[float]], str]:
    """Step times of args.processes copies of one implementation's step, each a process of
    cpu_count / processes threads (TensorFlow's pools, oneDNN's and torch's), timed together
    once all have warmed up: the arrangement experiments/efficiency.py trains its runs in.
    Returns (each process's step times, the step's description: XLA or attention kernel)."""
    env = {**os.environ, **hardware.thread_limits(args.processes)}
    with tempfile.TemporaryDirectory() as barrier:
        command = [sys.executable, os.path.abspath(__file__), "--model", args.model,
                   "--batch_size", str(args.batch_size), "--seq_length", str(args.seq_length),
                   "--steps", str(args.steps), "--precision", precision,
                   "--kernels", args.kernels, "--jit_compile", args.jit_compile,
                   "--processes", str(args.processes), "--worker", barrier,
                   "--worker_implementation", implementation]
        children = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
                    for _ in range(args.processes)]
        outputs = [child.communicate()[0] for child in children]
    failed = [child.returncode for child in children if child.returncode]
    if failed:
        raise RuntimeError(f"a side-by-side {implementation} process failed (exit {failed[0]}); "
                           "its error is above")
    results = [json.loads(out.splitlines()[-1]) for out in outputs]
    return [result["step_times"] for result in results], results[0]["detail"]


def worker(args: argparse.Namespace) -> None:
    """One process of side_by_side: warm up, wait for the siblings, time args.steps steps and
    print them as the last line of stdout."""
    config = model_config(args.model, args.batch_size, args.seq_length, args.precision,
                          kernels=args.kernels, jit_compile=JIT[args.jit_compile])
    step, report, detail = STEPPERS[args.worker_implementation](
        config, random_batch(args.batch_size, args.seq_length))
    step()  # warm-up (tracing), before the others start timing
    open(os.path.join(args.worker, f"ready-{os.getpid()}"), "w").close()
    waited = time.monotonic()
    while len(glob.glob(os.path.join(args.worker, "ready-*"))) < args.processes:
        if time.monotonic() - waited > BARRIER_TIMEOUT:
            raise TimeoutError(f"the other side-by-side processes were not ready after "
                               f"{BARRIER_TIMEOUT} s")
        time.sleep(0.05)
    times = time_calls(step, warmup=0, reps=args.steps)
    progress(f"  {args.worker_implementation} (pid {os.getpid()}): {report()}")
    print(json.dumps({"step_times": times, "detail": detail}))


def together(per_process: Sequence[Sequence[float]]) -> float:
    """The seconds per batch of processes running side by side: one batch over their summed
    rates (each process's rate from its median step)."""
    return 1.0 / sum(1.0 / statistics.median(times) for times in per_process)


# ----------------------------------------------------------------------------- report

def markdown_table(rows: Sequence[Row], peak_gflops: float) -> str:
    header = ("| implementation | precision | step time s | examples/s | model GFLOP/step | "
              "GFLOP/s | % of fp32 matmul peak | executed GFLOP/step | executed % of peak |")
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for row in rows:
        model_rate = row.model_flops / row.seconds / 1e9
        executed_rate = row.executed_flops / row.seconds / 1e9
        lines.append(
            f"| {row.implementation} | {row.precision} | {row.seconds:.3f} | "
            f"{row.examples_per_second:.2f} | {row.model_flops / 1e9:.1f} | {model_rate:.1f} | "
            f"{100 * model_rate / peak_gflops:.1f} | {row.executed_flops / 1e9:.1f} | "
            f"{100 * executed_rate / peak_gflops:.1f} |")
    return "\n".join(lines)


def matmul_table(matmuls: Sequence[Matmul], seconds: Sequence[float]) -> str:
    header = ("| matmul | [batch x] m x k x n | per step | GFLOP (forward + backward) | ms | "
              "GFLOP/s |")
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for matmul, sec in zip(matmuls, seconds):
        shape = f"{matmul.m} x {matmul.k} x {matmul.n}"
        if matmul.batch > 1:
            shape = f"{matmul.batch} x {shape}"
        gflop = 3 * matmul.forward_flops / 1e9
        lines.append(f"| {matmul.name} | {shape} | {matmul.count} | {gflop:.1f} | "
                     f"{1000 * sec:.1f} | {gflop / sec:.0f} |")
    return "\n".join(lines)


def format_peaks(label: str, peaks: dict[int, float]) -> str:
    sizes = ", ".join(f"n={n}: {g:.1f}" for n, g in peaks.items())
    return f"{label}: best {max(peaks.values()):.1f} GFLOP/s ({sizes})"


JIT = {"auto": None, "on": True, "off": False}  # --jit_compile -> the jit_compile hparam
STEPS = {"small": 3, "miniature": 30, "wide": 5}  # timed steps by default: seconds of each
TITLES = {"small": "ELECTRA-Small", "miniature": "The reproduction's miniature",
          "wide": "The wide ladder's model"}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="small", choices=sorted(MODELS),
                        help="small: ELECTRA-Small; miniature: the reproduction's model "
                             "(experiments/efficiency_plan.py, budget full); wide: the wide "
                             "ladder's (experiments/ladder.py, mixed_wide)")
    parser.add_argument("--batch_size", type=int, default=None,
                        help="default: 128 for small and wide, 32 for miniature")
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps after one warm-up step; the median is reported "
                             "(default: 3 for small, 30 for miniature, 5 for wide)")
    parser.add_argument("--precision", default="float32", choices=("float32", "mixed_bfloat16"),
                        help="precision policy of our model")
    parser.add_argument("--also_bf16", action="store_true",
                        help="add a mixed_bfloat16 row for our model")
    parser.add_argument("--skip_torch", action="store_true", help="skip the PyTorch peer")
    parser.add_argument("--kernels", default="auto", choices=("auto", "fused", "reference"),
                        help="our transformer's implementation (the kernels hparam)")
    parser.add_argument("--jit_compile", default="auto", choices=sorted(JIT),
                        help="XLA for our forward and backward pass (the jit_compile hparam; "
                             "auto: distribution.use_xla decides)")
    parser.add_argument("--processes", type=int, default=1,
                        help="run each implementation's step in this many processes side by "
                             "side, each with cpu_count / processes threads, as "
                             "experiments/efficiency.py runs its pretraining")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: batch 8, seq 32, 1 step, small matmuls")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker_implementation", default="electra_tf",
                        choices=sorted(STEPPERS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.batch_size, args.seq_length, args.steps = 8, 32, 1
    args.batch_size = args.batch_size or BATCH_SIZES[args.model]
    args.steps = args.steps or STEPS[args.model]
    if min(args.batch_size, args.seq_length, args.steps) < 1:
        parser.error("--batch_size, --seq_length and --steps must be positive")
    if not 1 <= args.processes <= (os.cpu_count() or 1):
        parser.error(f"--processes must be between 1 and the {os.cpu_count()} CPUs, "
                     f"got {args.processes}")
    return args


def time_rows(args: argparse.Namespace, precisions: Sequence[str], batch: dict[str, np.ndarray],
              ours_flops: float, peer_flops: float) -> tuple[list[Row], list[str], str, str | None]:
    """Our rows (one per precision) and the peer's, in this process or side by side: (rows,
    per-process step times as report lines, our XLA description, the peer's attention
    kernel or None)."""
    rows: list[Row] = []
    lines: list[str] = []
    xla, attention = "", None
    runs = [("electra_tf", p) for p in precisions] + ([] if args.skip_torch else
                                                       [("torch", "float32")])
    for implementation, precision in runs:
        ours = implementation == "electra_tf"
        config = model_config(args.model, args.batch_size, args.seq_length, precision,
                              kernels=args.kernels, jit_compile=JIT[args.jit_compile])
        name = "electra_tf (TF/Keras)" if ours else "PyTorch + transformers"
        progress(f"{name}, {precision}: 1 warm-up + {args.steps} timed steps"
                 + (f", {args.processes} processes side by side" if args.processes > 1 else ""))
        executed = ours_flops if ours else peer_flops
        if args.processes == 1:
            times, detail = time_step(implementation, config, batch, args.steps)
        else:
            per_process, detail = side_by_side(args, implementation, precision)
            times = [together(per_process)]
            each = hardware.threads_per_process(args.processes)
            name += f", {args.processes} processes x {each} thread(s)"
            lines += [f"- step times of {name} {precision}, process {k} (s): "
                      + ", ".join(f"{t:.3f}" for t in process_times)
                      for k, process_times in enumerate(per_process)]
        if ours:
            xla = detail
        else:
            attention = detail
        rows.append(Row(name, precision, times, args.batch_size, ours_flops, executed))
        gc.collect()
    return rows, lines, xla, attention


def main(argv: Sequence[str] | None = None) -> None:
    load_at_start = os.getloadavg()
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return
    precisions = [args.precision]
    if args.also_bf16 and "mixed_bfloat16" not in precisions:
        precisions.append("mixed_bfloat16")
    config = model_config(args.model, args.batch_size, args.seq_length, "float32")
    batch = random_batch(args.batch_size, args.seq_length)
    n_mlm = config.max_predictions_per_seq
    ours_flops = pretraining_step_flops(config, args.batch_size, args.seq_length, n_mlm)
    peer_flops = pretraining_step_flops(config, args.batch_size, args.seq_length,
                                        args.seq_length)

    # Matmul peaks first, on a quiet process.
    sizes = QUICK_MATMUL_SIZES if args.quick else MATMUL_SIZES
    reps = 2 if args.quick else 3
    progress(f"matmul peaks at n = {sizes}")
    tf_fp32 = {n: tf_matmul_gflops(n, tf.float32, reps) for n in sizes}
    # Without AVX-512, TensorFlow logs an error line when oneDNN first meets bfloat16 and runs
    # it on Eigen; the printed peak says so instead.
    with hardware.stderr_without(ONEDNN_BF16_FALLBACK):
        tf_bf16 = {n: tf_matmul_gflops(n, tf.bfloat16, reps) for n in sizes}
    torch_fp32 = {} if args.skip_torch else {n: torch_matmul_gflops(n, reps) for n in sizes}
    matmuls = pretraining_matmuls(config, args.batch_size, args.seq_length, n_mlm)
    progress(f"the step's float32 matmuls, alone: {len(matmuls)} shapes")
    matmul_seconds = [tf_matmul_seconds(matmul, reps) for matmul in matmuls]
    # Some of the step's own shapes can run faster than the square ones; the peak is the best
    # rate any float32 matmul of this run reached.
    step_shapes_best = max(3 * matmul.forward_flops / seconds / 1e9
                           for matmul, seconds in zip(matmuls, matmul_seconds))
    peak = max(list(tf_fp32.values()) + list(torch_fp32.values()) + [step_shapes_best])

    rows, process_lines, xla, attention = time_rows(args, precisions, batch, ours_flops,
                                                    peer_flops)
    rows.append(Row("the step's matmuls alone (a bound, not a step)", "float32",
                    [sum(matmul_seconds)], args.batch_size, ours_flops, ours_flops))

    disc, gen = config.bert_config(), config.generator_bert_config()
    peer = [r for r in rows if r.implementation.startswith("PyTorch")]
    ours = rows[0]
    utilization = 100 * ours.model_flops / ours.seconds / 1e9 / peak
    headline = f"{utilization:.1f}% of this run's fp32 matmul peak"
    if peer:
        speedup = ours.examples_per_second / peer[0].examples_per_second
        headline = f"{speedup:.2f}x the PyTorch peer, {headline}"
    print(f"# {TITLES[args.model]} pretraining step: electra_tf ({ours.precision}) "
          f"{headline}\n")
    print(f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print("\n".join(machine_report(load_at_start)))
    print(f"- model: discriminator H{disc['hidden_size']}/L{disc['num_hidden_layers']}/"
          f"A{disc['num_attention_heads']}/I{disc['intermediate_size']}, generator "
          f"H{gen['hidden_size']}/L{gen['num_hidden_layers']}/A{gen['num_attention_heads']}/"
          f"I{gen['intermediate_size']}, embedding {config.resolved_embedding_size()}, vocab "
          f"{config.vocab_size}, {n_mlm} masked positions per sequence")
    print(f"- batch {args.batch_size} x seq {args.seq_length}; step time = median of "
          f"{args.steps} timed step(s) after 1 warm-up step; dropout on; random weights")
    if args.processes > 1:
        print(f"- {args.processes} processes side by side, "
              f"{hardware.threads_per_process(args.processes)} thread(s) each, timed together "
              "after all warmed up; a row's step time is one batch over their summed rates "
              "(each from its median step)")
    print(f"- electra_tf: run_pretraining's train step (incl. metrics) in host_calls.run_steps, "
          f"default strategy, 1 replica, {xla}, kernels {args.kernels}")
    if attention is not None:
        print(f"- peer: ElectraForMaskedLM + ElectraForPreTraining with tied embeddings, "
              f"attention '{attention}', MLM head at all {args.seq_length} positions, "
              "AdamW + clip_grad_norm_(1.0), torch threads "
              f"{hardware.threads_per_process(args.processes)}")
    print("- model GFLOP/step: ELECTRA's matmul FLOPs (MLM head at the masked positions only), "
          "3x forward; executed: what the implementation computes\n")
    print(markdown_table(rows, peak))
    print("\n## The step's float32 matmuls, each alone (forward, dx and dw)\n")
    print(matmul_table(matmuls, matmul_seconds))
    print()
    print(f"- {format_peaks('tf.matmul float32', tf_fp32)}")
    if torch_fp32:
        print(f"- {format_peaks('torch.matmul float32', torch_fp32)}")
    print(f"- the step's matmuls, each alone: best {step_shapes_best:.1f} GFLOP/s")
    print(f"- machine fp32 matmul peak (best of the above): {peak:.1f} GFLOP/s")
    cpu = hardware.read_cpu()
    on_eigen = cpu.is_x86 and not ("avx512f" in cpu.flags and hardware.onednn_enabled())
    bf16_note = ", on Eigen: oneDNN's bfloat16 needs AVX-512 and oneDNN on" if on_eigen else ""
    print(f"- {format_peaks(f'tf.matmul bfloat16 (informational{bf16_note})', tf_bf16)}")
    for row in rows:
        times = ", ".join(f"{t:.3f}" for t in row.step_times)
        print(f"- step times of {row.implementation} {row.precision} (s): {times}")
    for line in process_lines:
        print(line)
    for row in rows:
        if peer and row.implementation.startswith("electra_tf"):
            print(f"- speedup ours ({row.precision}) / peer (float32): "
                  f"{row.examples_per_second / peer[0].examples_per_second:.2f}x examples/s")


if __name__ == "__main__":
    main()
