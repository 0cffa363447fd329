"""Fine-tuning throughput of ELECTRA-Small: electra_tf against PyTorch + transformers.

Run from the repository root:

  python benchmarks/finetune_throughput.py            # SST-2 shape (128) and SQuAD shape (512)
  python benchmarks/finetune_throughput.py --quick    # smoke run: batch 4, 1 timed step
  python benchmarks/finetune_throughput.py --tasks sst   # one shape only
  python benchmarks/finetune_throughput.py --also_bf16   # and electra_tf in mixed_bfloat16

In one process on this machine, training examples/s (batch 32, the original's
train_batch_size; float32, and with --also_bf16 electra_tf in mixed_bfloat16 too; random
weights, nothing is downloaded) of:
  * electra_tf: run_finetuning.py's train step (forward, backward, all-reduce, clipping,
    AdamW with layer-wise learning rates) with the original's heads: the [CLS] classifier for
    SST-2 at 128 tokens; for SQuAD at 512 tokens the XLNet-style head (end logits conditioned
    on the gold start through a 512-unit layer) and the answerability classifier;
  * the peer: transformers' ElectraForSequenceClassification and ElectraForQuestionAnswering
    of the same size, torch.optim.AdamW and clip_grad_norm_(1.0), 2 threads. Their heads are
    transformers' own (a 2-layer classifier; independent start/end logits), lighter than the
    original's SQuAD head.
Each time is the median of --steps timed steps after one warm-up step. The report opens with
the ratios to the peer and what the run ran on (CPU, ISA, cores, oneDNN, versions, load).
A benchmark, not a test: run it on an otherwise idle machine, as timings are noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO_ROOT, os.path.join(REPO_ROOT, "benchmarks")]

from electra_tf import hardware  # noqa: E402  (first: decides oneDNN before TensorFlow loads)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from pretrain_throughput import (SEED, import_torch, machine_report, progress,  # noqa: E402
                                 random_batch, time_calls)
from electra_tf import distribution, host_calls  # noqa: E402
from electra_tf.finetuning import config as finetuning_config  # noqa: E402
from electra_tf.finetuning import trainer  # noqa: E402


SEQ_LENGTHS = {"sst": 128, "squad": 512}


def task_batch(task: str, batch_size: int, seq_length: int) -> dict[str, np.ndarray]:
    """A random batch with the task's labels: two segments; SQuAD spans inside segment 1."""
    batch = random_batch(batch_size, seq_length)
    batch["segment_ids"][:, seq_length // 4:] = 1
    rng = np.random.default_rng(SEED)
    batch["task_id"] = np.zeros(batch_size, np.int32)
    if task == "squad":
        start = rng.integers(seq_length // 4, seq_length - 10, batch_size).astype(np.int32)
        batch["start_positions"] = start
        batch["end_positions"] = start + rng.integers(0, 8, batch_size).astype(np.int32)
        batch["is_impossible"] = (rng.random(batch_size) < 0.3).astype(np.int32)
    else:
        batch["label"] = rng.integers(0, 2, batch_size).astype(np.float32)
    return batch


def bench_ours(task: str, batch: dict[str, np.ndarray], steps: int,
               precision: str) -> list[float]:
    seq_length = batch["input_ids"].shape[1]
    config = finetuning_config.from_hparams("bench", "/tmp/nodata", {
        "model_size": "small", "task_names": [task], "max_seq_length": seq_length,
        "train_batch_size": len(batch["input_ids"]), "seed": SEED, "precision": precision})
    strategy = tf.distribute.get_strategy()
    tasks = trainer.make_tasks(config)
    with distribution.precision_policy(precision):  # as run_finetuning.py builds it
        model = trainer.build_model(config, tasks)
    state = trainer.create_train_state(config, model, tasks, strategy, num_steps=1000)
    dataset = tf.data.Dataset.from_tensors({k: tf.constant(v) for k, v in batch.items()})
    iterator = iter(strategy.distribute_datasets_from_function(lambda _: dataset.repeat()))
    loop = host_calls.run_steps(strategy, state.step_fn)
    one = tf.constant(1)

    def step() -> None:
        loop(iterator, one)
        int(state.optimizer.iterations)

    return time_calls(step, warmup=1, reps=steps)


def bench_torch(task: str, batch: dict[str, np.ndarray], steps: int) -> list[float]:
    torch = import_torch()
    from transformers import (ElectraConfig, ElectraForQuestionAnswering,
                              ElectraForSequenceClassification)

    torch.manual_seed(SEED)
    config = ElectraConfig(vocab_size=30522, embedding_size=128, hidden_size=256,
                           num_hidden_layers=12, num_attention_heads=4, intermediate_size=1024,
                           layer_norm_eps=1e-12, num_labels=2)
    model = (ElectraForQuestionAnswering if task == "squad"
             else ElectraForSequenceClassification)(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)
    inputs = {"input_ids": torch.from_numpy(batch["input_ids"]).long(),
              "attention_mask": torch.from_numpy(batch["input_mask"]).long(),
              "token_type_ids": torch.from_numpy(batch["segment_ids"]).long()}
    if task == "squad":
        inputs["start_positions"] = torch.from_numpy(batch["start_positions"]).long()
        inputs["end_positions"] = torch.from_numpy(batch["end_positions"]).long()
    else:
        inputs["labels"] = torch.from_numpy(batch["label"]).long()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(**inputs).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return time_calls(step, warmup=1, reps=steps)


def main() -> None:
    load_at_start = os.getloadavg()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tasks", default="sst,squad", help="comma-separated: sst, squad")
    parser.add_argument("--also_bf16", action="store_true",
                        help="add electra_tf's step in mixed_bfloat16")
    args = parser.parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    if not tasks or set(tasks) - set(SEQ_LENGTHS):
        parser.error(f"--tasks {args.tasks!r}: choose from {', '.join(SEQ_LENGTHS)}")
    batch_size, steps = (4, 1) if args.quick else (32, args.steps)
    precisions = ["float32"] + (["mixed_bfloat16"] if args.also_bf16 else [])
    rows = []
    for task in tasks:
        seq_length = SEQ_LENGTHS[task]
        batch = task_batch(task, batch_size, seq_length)
        ours = {}
        for precision in precisions:
            progress(f"{task}: electra_tf, {precision}")
            ours[precision] = batch_size / statistics.median(
                bench_ours(task, batch, steps, precision))
        progress(f"{task}: PyTorch")
        theirs = batch_size / statistics.median(bench_torch(task, batch, steps))
        rows.append((task, seq_length, ours, theirs))
    ratios = ", ".join(f"{task} {ours['float32'] / theirs:.2f}x"
                       for task, _, ours, theirs in rows)
    print(f"# ELECTRA-Small fine-tuning step: electra_tf is {ratios} the PyTorch peer\n")
    print("\n".join(machine_report(load_at_start)))
    print(f"- batch {batch_size}, median of {steps} timed steps after 1 warm-up step; the "
          "peer and the speedup in float32")
    bf16 = " electra_tf mixed_bfloat16 ex/s | bf16 / float32 |" if args.also_bf16 else ""
    print(f"\n| task | seq | electra_tf ex/s | PyTorch + transformers ex/s | speedup |{bf16}")
    print("|---" * (5 + 2 * args.also_bf16) + "|")
    for task, seq_length, ours, theirs in rows:
        line = (f"| {task} | {seq_length} | {ours['float32']:.1f} | {theirs:.1f} | "
                f"{ours['float32'] / theirs:.2f}x |")
        if args.also_bf16:
            line += (f" {ours['mixed_bfloat16']:.1f} | "
                     f"{ours['mixed_bfloat16'] / ours['float32']:.2f}x |")
        print(line)


if __name__ == "__main__":
    main()
