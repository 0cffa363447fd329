"""Where a pretraining run's two losses meet, measured on its latest checkpoint: the gradient
of the generator's loss and that of the objective's loss, taken apart, over the variables only
the generator uses, those only the discriminator-sized model uses, and those both use (the
tied embeddings), and what the training step's global-norm clipping and Adam's epsilon make of
their weighted sum at each objective weight (disc_weight) asked for.

  python experiments/gradient_split.py --data_dir DATA_DIR --model_name NAME
      [--model_dir DIR] [--recipe NAME] [--num_batches 16] [--disc_weights 1,50]
      --results experiments/results/LADDER/gradients.jsonl

Why: under Adam a loss's weight changes nothing for the parameters only that loss reaches,
except through (a) the tables both losses share, where the weight sets their mix, (b) the
clipping of the summed gradient's global norm at 1.0, which scales every gradient by the same
factor, and (c) epsilon (1e-6), which outweighs a clipped gradient small enough
(docs/reproduction.md, "The weighting runs, judged"). For each weight w the record gives all
three at the checkpoint's weights: the shared tables' gradient norms from each loss and their
cosine, the clip factor min(1, 1 / global norm) of each batch, and per group the share of
entries whose clipped gradient's root mean square over the batches is below epsilon. Beside
them, the share of entries whose Adam second moment (the checkpoint's, at the weight the run
trained with) has a root below epsilon.

The batches are the first num_batches of train_batch_size examples of the run's
eval_tfrecords (the training files unless the run set others), read in order, with dropout on
and the run's own masking and sampling streams as the checkpoint left them, so every
checkpoint of a corpus is measured on the same text. The gradients are of the single-device
loss, in float32, the only precision measured (unscaled half-precision gradients would
underflow into "below epsilon"); nothing is written into the run's directory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Any, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (REPO, os.path.join(REPO, "experiments")):
    if path not in sys.path:
        sys.path.insert(0, path)

import numpy as np  # noqa: E402

import records  # noqa: E402

GROUPS = ("generator", "shared", "discriminator")


def global_norm(batch: dict[str, dict[str, float]], gen_weight: float,
                disc_weight: float) -> float:
    """The global norm of gen_weight * g_gen + disc_weight * g_objective over every group, from
    one batch's per-group norms of the two gradients and their dot product there.

    >>> global_norm({"shared": {"gen": 3.0, "objective": 4.0, "dot": 0.0}}, 1.0, 1.0)
    5.0
    """
    return sum(max(gen_weight ** 2 * n["gen"] ** 2 + disc_weight ** 2 * n["objective"] ** 2
                   + 2 * gen_weight * disc_weight * n["dot"], 0.0)
               for n in batch.values()) ** 0.5


def clip_factor(norm: float, clip_norm: float) -> float:
    """The factor tf.clip_by_global_norm applies to gradients of global norm `norm`.

    >>> clip_factor(5.0, 1.0)
    0.2
    """
    return min(1.0, clip_norm / norm) if norm > 0 else 1.0


def below_epsilon(mean_squares: Sequence[np.ndarray], group_of: Sequence[str],
                  sizes: dict[str, int], epsilon: float) -> dict[str, float]:
    """Per group, the share of entries whose root of `mean_squares` (a clipped gradient's mean
    square over the batches, or Adam's v) is below epsilon.

    >>> below_epsilon([np.array([1e-14, 1.0]), np.array([0.0])], ["shared", "generator"],
    ...               {"shared": 2, "generator": 1, "discriminator": 0}, 1e-6)
    {'generator': 1.0, 'shared': 0.5}
    """
    below = {group: 0 for group in GROUPS}
    for group, x in zip(group_of, mean_squares):
        below[group] += int(np.sum(np.sqrt(x) < epsilon))
    return {group: below[group] / sizes[group] for group in GROUPS if sizes[group]}


def measure(data_dir: str, model_name: str, model_dir: str | None, num_batches: int,
            disc_weights: Sequence[float], recipe: str | None = None) -> dict[str, Any]:
    """Restores the run's latest checkpoint and returns the record (see the module docstring);
    its `objective` is `recipe` when given (a ladder's name for the run's recipe), else the
    run's objective hparam."""
    import electra_tf  # noqa: F401  (first: it decides oneDNN before TensorFlow loads)
    import tensorflow as tf

    from electra_tf import config as config_lib
    from electra_tf import data, distribution, objectives, pretraining, resume

    hparams: dict[str, Any] = {"do_train": False, "do_eval": True}  # reads, writes nothing
    if model_dir:
        hparams["model_dir"] = model_dir
    config = config_lib.from_hparams(model_name, data_dir, hparams)
    if objectives.REGISTRY[config.objective].generator_is_model or config.uniform_generator:
        raise SystemExit(f"error: {model_name}: objective {config.objective!r} trains one "
                         "network with one loss; there are no two losses to take apart")
    if config.training_algorithm != "joint":
        raise SystemExit(f"error: {model_name}: training_algorithm {config.training_algorithm!r}"
                         " does not sum the two losses; only joint training is measured")
    if config.precision != "float32":
        raise SystemExit(f"error: {model_name}: precision {config.precision!r}: only float32 "
                         "runs are measured (the model is built in the run's precision, and "
                         "unscaled half-precision gradients would underflow below epsilon)")
    files = data.check_files(config.eval_tfrecords, config.max_seq_length)
    dataset = data.pretraining_dataset(files, config.train_batch_size, config.max_seq_length,
                                       is_training=False).take(num_batches)
    available = sum(1 for _ in dataset)
    if available < num_batches:
        raise SystemExit(f"error: {config.eval_tfrecords} holds {available} batches of "
                         f"{config.train_batch_size}, fewer than --num_batches {num_batches}")
    special = pretraining.SpecialIds.from_vocab(pretraining.load_vocab(config.vocab_file))
    state = pretraining.create_state(config, special, tf.distribute.get_strategy())
    checkpointer = resume.Checkpointer(state.checkpoint(), config.model_dir,
                                       state.optimizer.iterations, None, writable=False)
    if not checkpointer.restored:
        raise SystemExit(f"error: {config.model_dir} holds no checkpoint to measure")
    model, optimizer = state.model, state.optimizer
    variables = model.trainable_variables
    only_generator = {id(v) for v in model.generator_variables()}
    only_discriminator = {id(v) for v in model.discriminator_variables()}
    group_of = ["generator" if id(v) in only_generator else
                "discriminator" if id(v) in only_discriminator else "shared" for v in variables]

    def split(features):
        with tf.GradientTape(persistent=True) as tape:
            out = model(features, training=True)
            # Exact: the gen_loss terms' coefficients cancel at that scalar, so none of its
            # gradient flows back (the generator's own variables get exactly 0).
            objective_loss = (out["loss"] - config.gen_weight * out["gen_loss"]) \
                / config.disc_weight
        # None where a loss cannot reach (UnconnectedGradients.ZERO fails on Keras variables).
        return [[tf.zeros(v.shape) if g is None else tf.convert_to_tensor(g) for g, v in
                 zip(tape.gradient(loss, variables), variables)]
                for loss in (out["gen_loss"], objective_loss)]

    squares = {w: [np.zeros(v.shape, np.float64) for v in variables] for w in disc_weights}
    batches = []
    for features in dataset:
        gen, objective = split(features)
        gen = [g.numpy().astype(np.float64) for g in gen]
        objective = [g.numpy().astype(np.float64) for g in objective]
        batch = {group: {"gen": 0.0, "objective": 0.0, "dot": 0.0} for group in GROUPS}
        for group, g, o in zip(group_of, gen, objective):
            batch[group]["gen"] += float(np.sum(g * g))
            batch[group]["objective"] += float(np.sum(o * o))
            batch[group]["dot"] += float(np.sum(g * o))
        for n in batch.values():
            n["gen"], n["objective"] = n["gen"] ** 0.5, n["objective"] ** 0.5
        batches.append(batch)
        print(f"batch {len(batches)}/{num_batches}", flush=True)
        for w in disc_weights:
            factor = clip_factor(global_norm(batch, config.gen_weight, w),
                                 distribution.CLIP_NORM)
            for total, g, o in zip(squares[w], gen, objective):
                total += (factor * (config.gen_weight * g + w * o)) ** 2

    epsilon = float(optimizer.epsilon)
    sizes = {group: 0 for group in GROUPS}
    for group, v in zip(group_of, variables):
        sizes[group] += int(np.prod(v.shape))

    adam_v = [optimizer.second_moment(v).numpy() for v in variables]
    return {
        "model": model_name, "objective": recipe or config.objective,
        "objective_hparam": config.objective,
        "step": int(optimizer.iterations.numpy()), "checkpoint": os.path.basename(
            checkpointer.restored), "gen_weight": config.gen_weight,
        "disc_weight": config.disc_weight, "embedding_sharing": config.embedding_sharing,
        "batch_size": config.train_batch_size, "num_batches": num_batches,
        "epsilon": epsilon, "clip_norm": distribution.CLIP_NORM, "sizes": sizes,
        "batches": batches,
        "below_epsilon": {str(w): below_epsilon([s / num_batches for s in squares[w]],
                                                group_of, sizes, epsilon)
                          for w in disc_weights},
        "adam_below_epsilon": below_epsilon(adam_v, group_of, sizes, epsilon),
    }


def summary(record: dict[str, Any], disc_weight: float) -> dict[str, float]:
    """Medians over the record's batches at one weight: the clip factor, the global norm, and
    in the shared tables the objective's gradient norm over the generator's (both weighted)
    and the cosine between the two gradients (which the weight does not change)."""
    gen_weight, factors, totals, ratios, cosines = record["gen_weight"], [], [], [], []
    for batch in record["batches"]:
        totals.append(global_norm(batch, gen_weight, disc_weight))
        factors.append(clip_factor(totals[-1], record["clip_norm"]))
        shared = batch["shared"]
        both = shared["gen"] * shared["objective"]  # 0 when nothing is shared (untied tables)
        ratios.append(disc_weight * shared["objective"] / (gen_weight * shared["gen"])
                      if both else float("nan"))
        cosines.append(shared["dot"] / both if both else float("nan"))
    return {"global_norm": statistics.median(totals), "clip_factor": statistics.median(factors),
            "shared_objective_over_generator": statistics.median(ratios),
            "shared_cosine": statistics.median(cosines)}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True,
                        help="the run's DATA_DIR (pretrain_tfrecords/, vocab.txt, models/)")
    parser.add_argument("--model_name", required=True, help="the pretraining run's name")
    parser.add_argument("--model_dir", default=None,
                        help="its checkpoints and pretrain_config.json, when not in "
                             "DATA_DIR/models/NAME (e.g. a ladder's trunk snapshot)")
    parser.add_argument("--recipe", default=None,
                        help="the name the report gives the run's recipe (a ladder's "
                             "objective, e.g. replace_mlm_seed2); default: its objective hparam")
    parser.add_argument("--num_batches", type=int, default=16,
                        help="batches of train_batch_size the gradients are measured on")
    parser.add_argument("--disc_weights", default="1,50",
                        help="comma-separated objective weights to evaluate the sum at")
    parser.add_argument("--results", required=True, help="the JSON Lines file appended to")
    args = parser.parse_args(argv)
    args.data_dir = os.path.abspath(args.data_dir)
    if args.num_batches < 1:
        parser.error(f"--num_batches must be at least 1, got {args.num_batches}")
    try:
        args.disc_weights = [float(w) for w in args.disc_weights.split(",")]
    except ValueError:
        parser.error(f"--disc_weights: {args.disc_weights!r} is not a comma-separated list of "
                     "numbers, e.g. 1,50")
    if any(w <= 0 for w in args.disc_weights):
        parser.error(f"--disc_weights must be positive, got {args.disc_weights}")
    model_dir = args.model_dir or os.path.join(args.data_dir, "models", args.model_name)
    if not os.path.isfile(os.path.join(model_dir, "pretrain_config.json")):
        parser.error(f"{'--model_dir' if args.model_dir else '--model_name'}: {model_dir} "
                     "holds no pretraining run (no pretrain_config.json)")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    record = measure(args.data_dir, args.model_name, args.model_dir, args.num_batches,
                     args.disc_weights, args.recipe)
    records.append(args.results, [record])
    print(f"{record['model']} at step {record['step']} ({record['objective']}, trained at "
          f"disc_weight {record['disc_weight']:g}), {record['num_batches']} batches")
    print(f"shared tables: cosine of the two gradients {summary(record, 1.0)['shared_cosine']:.3f}")
    print("disc_weight  global norm  clip factor  shared: objective/generator  "
          + "  ".join(f"{g} < eps" for g in GROUPS))
    for w in args.disc_weights:
        s, below = summary(record, w), record["below_epsilon"][str(w)]
        print(f"{w:>11g}  {s['global_norm']:>11.3g}  {s['clip_factor']:>11.3g}  "
              f"{s['shared_objective_over_generator']:>27.3g}  "
              + "  ".join(f"{below.get(g, float('nan')):>{len(g) + 6}.3f}" for g in GROUPS))
    adam = record["adam_below_epsilon"]
    print("Adam's second moment, root below eps: "
          + ", ".join(f"{g} {adam[g]:.3f}" for g in GROUPS if g in adam))
    print(f"appended to {args.results}")


if __name__ == "__main__":
    main()
