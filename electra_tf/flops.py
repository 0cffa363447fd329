"""Analytical FLOPs of a pretraining or fine-tuning step, counted from the matmuls it runs.

A step's compute is listed as the matrix multiplications its forward pass performs, each
2 x m x k x n FLOPs (a multiply and an add per product term); training adds the backward pass's
two products of the same size per forward one (dx = dy w^T and dw = x^T dy), so a training
step is 3x its forward matmuls. Softmax, LayerNorm, GELU, dropout and the embedding lookups are
left out: they are O(hidden) per token against the matmuls' O(hidden^2).

This differs from the original's flops_computation.py, which the paper's FLOP figures come
from, in three ways: it counts the backward pass as 1x the forward (we count 2x, which is what
the matmuls cost), it adds the element-wise operations, and it counts the input embedding lookup
as a dense one-hot product (2 x embedding x vocab per token), which dominates for very small
models. Compare our counts with each other, not with the paper's.

Each objective runs different networks and computes the output softmax in different places:

  electra   the generator encoder on the masked input and its MLM head at the
            max_predictions_per_seq masked positions; the discriminator encoder and its
            replaced-token head (dense H x H, then one logit) at every position.
  mlm       BERT: the discriminator-sized encoder on the masked input and the MLM head at the
            masked positions.
  electric  two generator towers (left-to-right, right-to-left) and the cloze head at every
            position; the discriminator as in electra.

and the generator configurations change the generator: `uniform_generator` has none,
`untied_generator: false` runs the discriminator's encoder as the generator, and
`untied_generator_embeddings` gives it embeddings of its own width (no projection).

>>> from electra_tf import config
>>> c = config.from_hparams("x", "/tmp", {"model_size": "small", "vocab_size": 30522})
>>> round(pretraining_step_flops(c) / 1e9)  # batch 128 x seq 128
1150
"""

from __future__ import annotations

import dataclasses
from typing import Any

from electra_tf.config import PretrainingConfig

TRAINING_MULTIPLIER = 3  # forward + the backward pass's two products per forward matmul


@dataclasses.dataclass(frozen=True)
class Matmul:
    """`count` products [batch, m, k] x [k, n] of one step's forward pass (batch 1: a dense
    layer's 2-D GEMM)."""
    name: str
    m: int
    k: int
    n: int
    batch: int = 1
    count: int = 1

    @property
    def forward_flops(self) -> int:
        return 2 * self.count * self.batch * self.m * self.k * self.n


def encoder_matmuls(name: str, bert: dict[str, Any], embedding_size: int, batch_size: int,
                    seq_length: int, cls_only_last_layer: bool = False) -> list[Matmul]:
    """A BERT encoder's matmuls: the projection from the embedding width (when it differs from
    the hidden size), then per layer the query/key/value projection (one [H, 3H] GEMM, as
    modeling.TransformerLayer computes it), the attention scores QK^T and context PV of every
    head, the attention output and the feed-forward pair.

    cls_only_last_layer: the last layer computes position 0 alone (fine-tuning a classifier):
    its query/key/value GEMM still runs at every position (keys and values need them), the rest
    at one position per sequence."""
    hidden, layers = bert["hidden_size"], bert["num_hidden_layers"]
    heads, intermediate = bert["num_attention_heads"], bert["intermediate_size"]
    tokens, head_size, sequences = batch_size * seq_length, hidden // heads, batch_size * heads
    matmuls = ([Matmul(f"{name} embedding projection", tokens, embedding_size, hidden)]
               if embedding_size != hidden else [])
    matmuls.append(Matmul(f"{name} query/key/value", tokens, hidden, 3 * hidden, count=layers))

    def per_position(full_layers: int, queries: int, suffix: str = "") -> list[Matmul]:
        rows = batch_size * queries
        return [
            Matmul(f"{name} attention scores{suffix}", queries, head_size, seq_length, sequences,
                   full_layers),
            Matmul(f"{name} attention context{suffix}", queries, seq_length, head_size,
                   sequences, full_layers),
            Matmul(f"{name} attention output{suffix}", rows, hidden, hidden, count=full_layers),
            Matmul(f"{name} feed-forward in{suffix}", rows, hidden, intermediate,
                   count=full_layers),
            Matmul(f"{name} feed-forward out{suffix}", rows, intermediate, hidden,
                   count=full_layers),
        ]

    if not cls_only_last_layer:
        return matmuls + per_position(layers, seq_length)
    return (matmuls + (per_position(layers - 1, seq_length) if layers > 1 else [])
            + per_position(1, 1, " ([CLS] only)"))


def objective(config: PretrainingConfig) -> str:
    """The config's objective: its `objective` hparam when the config has one, else the
    original's booleans (electric_objective, electra_objective)."""
    name = getattr(config, "objective", None)
    if name:
        return name
    if config.electric_objective:
        return "electric"
    return "electra" if config.electra_objective else "mlm"


def _mlm_head(name: str, positions: int, hidden: int, embedding_size: int,
              vocab_size: int) -> list[Matmul]:
    """modeling.MaskedLMHead at `positions` rows: dense to the embedding width, then the tied
    output layer over the vocabulary (where the softmax's logits are made)."""
    return [Matmul(f"{name} MLM head dense", positions, hidden, embedding_size),
            Matmul(f"{name} MLM output layer", positions, embedding_size, vocab_size)]


def _generator_matmuls(config: PretrainingConfig, batch_size: int, seq_length: int,
                       predictions: int, name: str = "generator") -> list[Matmul]:
    """The MLM generator of the electra objective in the config's topology."""
    if config.uniform_generator:
        return []
    disc = config.bert_config()
    vocab = disc["vocab_size"]
    if not config.untied_generator:  # the discriminator's own encoder, run on the masked input
        embedding = config.resolved_embedding_size()
        return (encoder_matmuls(name, disc, embedding, batch_size, seq_length)
                + _mlm_head(name, predictions, disc["hidden_size"], embedding, vocab))
    gen = config.generator_bert_config()
    embedding = (gen["hidden_size"] if config.untied_generator_embeddings
                 else config.resolved_embedding_size())
    return (encoder_matmuls(name, gen, embedding, batch_size, seq_length)
            + _mlm_head(name, predictions, gen["hidden_size"], embedding, vocab))


def _electric_generator_matmuls(config: PretrainingConfig, batch_size: int,
                                seq_length: int) -> list[Matmul]:
    """Electric's two causal towers on the unmasked input and the cloze head over their
    concatenated outputs at every position."""
    gen = config.generator_bert_config()
    embedding = (gen["hidden_size"] if config.untied_generator_embeddings
                 else config.resolved_embedding_size())
    towers = [m for tower in ("generator_ltr", "generator_rtl")
              for m in encoder_matmuls(tower, gen, embedding, batch_size, seq_length)]
    return towers + _mlm_head("cloze", batch_size * seq_length, 2 * gen["hidden_size"],
                              embedding, gen["vocab_size"])


def _discriminator_matmuls(config: PretrainingConfig, batch_size: int,
                           seq_length: int) -> list[Matmul]:
    """The discriminator encoder on the replaced input and its head at every position."""
    disc = config.bert_config()
    hidden, tokens = disc["hidden_size"], batch_size * seq_length
    return (encoder_matmuls("discriminator", disc, config.resolved_embedding_size(), batch_size,
                            seq_length)
            + [Matmul("discriminator head", tokens, hidden, hidden),
               Matmul("discriminator logit", tokens, hidden, 1)])


def pretraining_matmuls(config: PretrainingConfig, batch_size: int | None = None,
                        seq_length: int | None = None,
                        mlm_positions_per_seq: int | None = None) -> list[Matmul]:
    """The matmuls of one training step's forward pass under the config's objective and
    generator. Defaults: the config's train_batch_size, max_seq_length and
    max_predictions_per_seq (where ours computes the MLM softmax; a model that computes it at
    every position, as Hugging Face's ElectraForMaskedLM, has mlm_positions_per_seq =
    seq_length)."""
    batch_size = batch_size or config.train_batch_size
    seq_length = seq_length or config.max_seq_length
    predictions = batch_size * (mlm_positions_per_seq or config.max_predictions_per_seq)
    name = objective(config)
    if name == "mlm":
        disc = config.bert_config()
        embedding = config.resolved_embedding_size()
        return (encoder_matmuls("masked LM", disc, embedding, batch_size, seq_length)
                + _mlm_head("masked LM", predictions, disc["hidden_size"], embedding,
                            disc["vocab_size"]))
    if name == "electric":
        return (_discriminator_matmuls(config, batch_size, seq_length)
                + _electric_generator_matmuls(config, batch_size, seq_length))
    if name not in ("electra", "electra_15", "replace_mlm", "all_tokens_mlm"):
        raise ValueError(f"flops: no FLOP count for objective {name!r}; known: electra, "
                         "electra_15, mlm, replace_mlm, all_tokens_mlm, electric")
    generator = _generator_matmuls(config, batch_size, seq_length, predictions)
    if name in ("electra", "electra_15"):  # ELECTRA 15% computes every position, weighs 15%
        return _discriminator_matmuls(config, batch_size, seq_length) + generator
    disc = config.bert_config()
    embedding = config.resolved_embedding_size()
    model = encoder_matmuls("discriminator", disc, embedding, batch_size, seq_length)
    if name == "replace_mlm":  # its own MLM head at the drawn positions
        return model + _mlm_head("replace MLM", predictions, disc["hidden_size"], embedding,
                                 disc["vocab_size"]) + generator
    # all_tokens_mlm: the MLM head and the copy probability's DiscriminatorHead at every token
    tokens, hidden = batch_size * seq_length, disc["hidden_size"]
    return (model + _mlm_head("all-tokens MLM", tokens, hidden, embedding, disc["vocab_size"])
            + [Matmul("copy head", tokens, hidden, hidden),
               Matmul("copy logit", tokens, hidden, 1)] + generator)


def pretraining_step_flops(config: PretrainingConfig, batch_size: int | None = None,
                           seq_length: int | None = None,
                           mlm_positions_per_seq: int | None = None) -> float:
    """Matmul FLOPs of one pretraining step, forward and backward (every network of the
    objective trains): 3x the forward pass's. Arguments as pretraining_matmuls'."""
    matmuls = pretraining_matmuls(config, batch_size, seq_length, mlm_positions_per_seq)
    return float(TRAINING_MULTIPLIER * sum(m.forward_flops for m in matmuls))


def finetuning_matmuls(bert: dict[str, Any], embedding_size: int, batch_size: int,
                       seq_length: int, num_outputs: int) -> list[Matmul]:
    """The forward matmuls of a classification or regression fine-tuning step (the
    finetuning.glue.ClassificationHead on [CLS], whose encoder computes the last layer at
    [CLS] alone), with num_outputs classes (1 for regression)."""
    return (encoder_matmuls("encoder", bert, embedding_size, batch_size, seq_length,
                            cls_only_last_layer=True)
            + [Matmul("classifier", batch_size, bert["hidden_size"], num_outputs)])


def finetuning_step_flops(bert: dict[str, Any], embedding_size: int, batch_size: int,
                          seq_length: int, num_outputs: int) -> float:
    """Matmul FLOPs of one classifier fine-tuning step, forward and backward."""
    matmuls = finetuning_matmuls(bert, embedding_size, batch_size, seq_length, num_outputs)
    return float(TRAINING_MULTIPLIER * sum(m.forward_flops for m in matmuls))
