"""The pretraining benchmark's model FLOPs, which docs/performance.md quotes, are the matmuls
the model really runs; the benchmarks say what they ran on; the memory benchmark measures."""

import sys

import numpy as np
import tensorflow as tf

from conftest import REPO, tiny_config
from electra_tf import pretraining

sys.path.insert(0, str(REPO / "benchmarks"))
import pretrain_throughput  # noqa: E402


def _graph_matmul_flops(graph: tf.Graph) -> int:
    """2 x output elements x inner dimension, summed over the graph's MatMul and BatchMatMul."""
    flops = 0
    for op in graph.get_operations():
        if op.type not in ("MatMul", "BatchMatMulV2"):
            continue
        transposed = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
        inner = op.inputs[0].shape[-2 if transposed else -1]
        flops += 2 * op.outputs[0].shape.num_elements() * inner
    return flops


def test_counted_matmuls_are_the_models_forward_pass():
    # The tiny model has an embedding projection in both encoders and a generator narrower
    # than the discriminator, as ELECTRA-Small.
    config = tiny_config(vocab_size=300)
    batch, length = config.train_batch_size, config.max_seq_length
    model = pretraining.PretrainingModel(config, pretraining.SpecialIds(),
                                         tf.random.Generator.from_seed(1))
    ids = np.random.default_rng(0).integers(200, 300, (batch, length))
    features = {"input_ids": tf.constant(ids, tf.int32),
                "input_mask": tf.ones((batch, length), tf.int32),
                "segment_ids": tf.zeros((batch, length), tf.int32)}
    forward = tf.function(lambda f: model(f, training=True)["loss"])
    graph = forward.get_concrete_function(features).graph

    counted = pretrain_throughput.step_matmuls(config, batch, length,
                                               config.max_predictions_per_seq)
    assert sum(m.forward_flops for m in counted) == _graph_matmul_flops(graph)


def test_electra_small_step_flops_are_the_documented_ones():
    config = pretrain_throughput.electra_small_config(128, 128, "float32")
    ours = pretrain_throughput.pretraining_step_flops(config, 128, 128,
                                                      config.max_predictions_per_seq)
    peer = pretrain_throughput.pretraining_step_flops(config, 128, 128, 128)
    assert (round(ours / 1e9), round(peer / 1e9)) == (1150, 1478)  # docs/performance.md


def test_reports_say_what_they_ran_on():
    lines = pretrain_throughput.machine_report((1.5, 1.0, 0.5))
    text = "\n".join(lines)
    assert lines[0].startswith("- CPU: ") and "oneDNN o" in lines[0]
    assert "ISA flags" in text and "tensorflow 2." in text
    assert "load average at start (1, 5, 15 min): 1.50, 1.00, 0.50" in text


def test_memory_table_pairs_each_electra_step_with_bert_mlm(tmp_path):
    import memory

    results = [{"implementation": "electra_tf", "objective": objective, "seq_length": 128,
                "batch_size": 16, "step_peak_mb": peak, "resting_mb": 300.0}
               for objective, peak in (("electra", 660.0), ("bert_mlm", 600.0))]
    row = memory.table(results).splitlines()[-1]
    assert row == "| electra_tf | 128 | 16 | 660 | 600 | 1.10x | 300 | 300 |"
    memory.plot(results, str(tmp_path / "memory.png"))
    assert (tmp_path / "memory.png").stat().st_size > 0


def test_memory_of_a_training_step_is_measured():
    import memory

    result = memory.measure("electra_tf", "bert_mlm", seq_length=16, batch_size=2)
    assert result["step_peak_mb"] > 0 and result["resting_mb"] > 0
    assert result["objective"] == "bert_mlm" and "loss" in result["loss"]
