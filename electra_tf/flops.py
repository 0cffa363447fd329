"""Analytical FLOPs of a pretraining step, counted from the matmuls it runs.

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

Each objective runs different networks and computes the output softmax in different places;
its class declares which (objectives.Objective.matmuls, from StepMatmuls' networks), e.g.

  electra   the generator encoder on the masked input and its MLM head at the
            max_predictions_per_seq masked positions; the discriminator encoder and its
            replaced-token head (dense H x H, then one logit) at every position.
  mlm       BERT: the discriminator-sized encoder on the masked input and the MLM head at the
            masked positions.
  electric  two generator towers (left-to-right, right-to-left) and the cloze head at every
            position; the discriminator as in electra.

and the generator configurations change the generator: `uniform_generator` has none,
`untied_generator: false` runs the discriminator's encoder as the generator, and
`embedding_sharing: untied` gives it embeddings of its own width (no projection).

>>> from electra_tf import config
>>> c = config.from_hparams("x", "/tmp", {"model_size": "small", "vocab_size": 30522})
>>> round(pretraining_step_flops(c) / 1e9)  # batch 128 x seq 128
1150
"""

from __future__ import annotations

import dataclasses
from typing import Any

from electra_tf import objectives
from electra_tf.config import OBJECTIVES, PretrainingConfig

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
                    seq_length: int) -> list[Matmul]:
    """A BERT encoder's matmuls: the projection from the embedding width (when it differs from
    the hidden size), then per layer the query/key/value projection (one [H, 3H] GEMM, as
    modeling.TransformerLayer computes it), the attention scores QK^T and context PV of every
    head, the attention output and the feed-forward pair."""
    hidden, layers = bert["hidden_size"], bert["num_hidden_layers"]
    heads, intermediate = bert["num_attention_heads"], bert["intermediate_size"]
    tokens, head_size, sequences = batch_size * seq_length, hidden // heads, batch_size * heads
    matmuls = ([Matmul(f"{name} embedding projection", tokens, embedding_size, hidden)]
               if embedding_size != hidden else [])
    return matmuls + [
        Matmul(f"{name} query/key/value", tokens, hidden, 3 * hidden, count=layers),
        Matmul(f"{name} attention scores", seq_length, head_size, seq_length, sequences, layers),
        Matmul(f"{name} attention context", seq_length, seq_length, head_size, sequences,
               layers),
        Matmul(f"{name} attention output", tokens, hidden, hidden, count=layers),
        Matmul(f"{name} feed-forward in", tokens, hidden, intermediate, count=layers),
        Matmul(f"{name} feed-forward out", tokens, intermediate, hidden, count=layers),
    ]


@dataclasses.dataclass(frozen=True)
class StepMatmuls:
    """The matmuls of the networks a pretraining step of `config` can run, at its shape: what
    each objective (objectives.Objective.matmuls) composes its step from."""
    config: PretrainingConfig
    batch_size: int
    seq_length: int
    predictions: int  # rows of the masked-LM softmax: batch_size x positions per sequence

    @property
    def tokens(self) -> int:
        return self.batch_size * self.seq_length

    def encoder(self, name: str) -> list[Matmul]:
        """The discriminator-sized encoder at every position."""
        return encoder_matmuls(name, self.config.bert_config(),
                               self.config.resolved_embedding_size(), self.batch_size,
                               self.seq_length)

    def mlm_head(self, name: str, positions: int, hidden: int | None = None,
                 embedding_size: int | None = None) -> list[Matmul]:
        """modeling.MaskedLMHead at `positions` rows (of the discriminator-sized encoder unless
        `hidden` and `embedding_size` say otherwise): dense to the embedding width, then the
        tied output layer over the vocabulary (where the softmax's logits are made)."""
        hidden = hidden or self.config.bert_config()["hidden_size"]
        embedding_size = embedding_size or self.config.resolved_embedding_size()
        return [Matmul(f"{name} MLM head dense", positions, hidden, embedding_size),
                Matmul(f"{name} MLM output layer", positions, embedding_size,
                       self.config.bert_config()["vocab_size"])]

    def discriminator_head(self, dense: str, logit: str) -> list[Matmul]:
        """modeling.DiscriminatorHead at every position: dense H x H, then one logit."""
        hidden = self.config.bert_config()["hidden_size"]
        return [Matmul(dense, self.tokens, hidden, hidden), Matmul(logit, self.tokens, hidden, 1)]

    def generator(self) -> list[Matmul]:
        """The generator pretraining.PretrainingModel builds for the config: none (uniform),
        the discriminator's own encoder (untied_generator false), Electric's two towers on the
        unmasked input with the cloze head at every position, or a masked LM of its own."""
        c = self.config
        if c.uniform_generator:
            return []
        if not c.untied_generator:  # the discriminator's own encoder, run on the masked input
            return self.encoder("generator") + self.mlm_head("generator", self.predictions)
        # two_stage's generator is the discriminator's twin, as the model builds it.
        gen = c.bert_config() if c.training_algorithm == "two_stage" else \
            c.generator_bert_config()
        own_width = c.embedding_sharing == "untied" and c.training_algorithm != "two_stage"
        embedding = gen["hidden_size"] if own_width else c.resolved_embedding_size()
        if c.two_tower_generator:
            towers = [m for tower in ("generator_ltr", "generator_rtl")
                      for m in encoder_matmuls(tower, gen, embedding, self.batch_size,
                                               self.seq_length)]
            return towers + self.mlm_head("cloze", self.tokens, 2 * gen["hidden_size"],
                                          embedding)
        return (encoder_matmuls("generator", gen, embedding, self.batch_size, self.seq_length)
                + self.mlm_head("generator", self.predictions, gen["hidden_size"], embedding))


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
    if config.objective not in objectives.REGISTRY:
        raise ValueError(f"flops: no FLOP count for objective {config.objective!r}; known: "
                         f"{', '.join(OBJECTIVES)}")
    return objectives.REGISTRY[config.objective].matmuls(
        StepMatmuls(config, batch_size, seq_length, predictions))


def pretraining_step_flops(config: PretrainingConfig, batch_size: int | None = None,
                           seq_length: int | None = None,
                           mlm_positions_per_seq: int | None = None) -> float:
    """Matmul FLOPs of one pretraining step, forward and backward (every network of the
    objective trains): 3x the forward pass's. Arguments as pretraining_matmuls'."""
    matmuls = pretraining_matmuls(config, batch_size, seq_length, mlm_positions_per_seq)
    return float(TRAINING_MULTIPLIER * sum(m.forward_flops for m in matmuls))
