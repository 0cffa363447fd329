"""electra_tf.flops counts exactly the matmuls the models run: for every objective and
generator topology of pretraining, the counted forward FLOPs equal the MatMul/BatchMatMul FLOPs
of the traced forward graph."""

import numpy as np
import pytest
import tensorflow as tf

from conftest import tiny_config
from electra_tf import flops, pretraining

VOCAB = 300


def _graph_matmul_flops(graph: tf.Graph) -> int:
    """2 x output elements x inner dimension, summed over the graph's MatMul and BatchMatMul."""
    total = 0
    for op in graph.get_operations():
        if op.type not in ("MatMul", "BatchMatMulV2"):
            continue
        transposed = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
        inner = op.inputs[0].shape[-2 if transposed else -1]
        total += 2 * op.outputs[0].shape.num_elements() * inner
    return total


def _features(batch: int, length: int) -> dict[str, tf.Tensor]:
    ids = np.random.default_rng(0).integers(200, VOCAB, (batch, length))
    return {"input_ids": tf.constant(ids, tf.int32),
            "input_mask": tf.ones((batch, length), tf.int32),
            "segment_ids": tf.zeros((batch, length), tf.int32)}


# The tiny model has an embedding projection and a generator narrower than the discriminator,
# as ELECTRA-Small; each case changes the objective or the generator's topology.
PRETRAINING_CASES = {
    "electra": {},
    "mlm": {"electra_objective": False},
    "electric": {"electric_objective": True},
    "electra_15": {"objective": "electra_15"},
    "replace_mlm": {"objective": "replace_mlm"},
    "all_tokens_mlm": {"objective": "all_tokens_mlm"},
    "uniform_generator": {"uniform_generator": True},
    "shared_encoder": {"untied_generator": False, "generator_hidden_size": 1.0},
    "untied_embeddings": {"untied_generator_embeddings": True},
    "no_projection": {"embedding_size": 32},
    "two_tower_electra": {"two_tower_generator": True},
    "two_stage": {"training_algorithm": "two_stage", "generator_hidden_size": 1.0},
}


@pytest.mark.parametrize("case", PRETRAINING_CASES)
def test_counted_matmuls_are_the_pretraining_forward_pass(case):
    config = tiny_config(vocab_size=VOCAB, **PRETRAINING_CASES[case])
    model = pretraining.PretrainingModel(config, pretraining.SpecialIds(),
                                         tf.random.Generator.from_seed(1))
    model.build()  # here, not in the trace: variables made in a trace make TensorFlow trace twice
    features = _features(config.train_batch_size, config.max_seq_length)
    forward = tf.function(lambda f: model(f, training=True)["loss"])
    graph = forward.get_concrete_function(features).graph

    counted = flops.pretraining_matmuls(config)
    assert sum(m.forward_flops for m in counted) == _graph_matmul_flops(graph)
    assert flops.pretraining_step_flops(config) == 3 * _graph_matmul_flops(graph)


def test_objectives_differ_where_their_networks_do():
    electra = tiny_config(vocab_size=VOCAB)
    mlm = tiny_config(vocab_size=VOCAB, electra_objective=False)
    # BERT runs the discriminator-sized encoder with the MLM head; ELECTRA adds the generator
    # and the replaced-token head, so it costs more per step at the same size.
    assert flops.pretraining_step_flops(mlm) < flops.pretraining_step_flops(electra)
    names = {m.name for m in flops.pretraining_matmuls(electra)}
    assert {"discriminator head", "generator MLM output layer"} <= names
    assert not any("discriminator" in m.name for m in flops.pretraining_matmuls(mlm))


def test_unknown_objective_names_the_known_ones():
    config = tiny_config(vocab_size=VOCAB)
    object.__setattr__(config, "objective", "nonsense")
    with pytest.raises(ValueError, match="known: electra, electra_15, mlm, replace_mlm, all_tokens_mlm, electric"):
        flops.pretraining_matmuls(config)
