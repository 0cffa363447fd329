"""The pretraining benchmark's model FLOPs are the ones docs/performance.md quotes (that they
are the matmuls the model really runs is tests/test_flops.py's check); the benchmarks say what
they ran on; the memory benchmark measures."""

import os
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import pretrain_throughput  # noqa: E402
import step_profile  # noqa: E402


def test_electra_small_step_flops_are_the_documented_ones():
    config = pretrain_throughput.model_config("small", 128, 128, "float32")
    ours = pretrain_throughput.pretraining_step_flops(config, 128, 128,
                                                      config.max_predictions_per_seq)
    peer = pretrain_throughput.pretraining_step_flops(config, 128, 128, 128)
    assert (round(ours / 1e9), round(peer / 1e9)) == (1150, 1478)  # docs/performance.md


@pytest.mark.parametrize("model, ladder_name", [("miniature", "full"), ("wide", "mixed_wide")])
def test_the_benchmarks_models_are_the_ladders(model, ladder_name):
    sys.path.insert(0, str(REPO / "experiments"))
    import ladder
    from electra_tf import config as config_lib

    budget = ladder.LADDERS[ladder_name].budget  # the ladder's model, batch and vocabulary size
    theirs = config_lib.from_hparams("ladder", "/tmp/nodata", {
        **ladder.efficiency_plan.pretraining_hparams(budget, "electra", 1, 1),
        "vocab_size": budget.vocab_size})
    ours = pretrain_throughput.model_config(
        model, pretrain_throughput.BATCH_SIZES[model], budget.seq_length, "float32")
    for read in (config_lib.PretrainingConfig.bert_config,
                 config_lib.PretrainingConfig.generator_bert_config,
                 config_lib.PretrainingConfig.resolved_embedding_size):
        assert read(ours) == read(theirs)
    assert (ours.train_batch_size, ours.max_seq_length) == (budget.batch_size, budget.seq_length)


@pytest.mark.parametrize("name, kind", [
    ("encoder/layer_0/attention/MatMul:_MklMatMul", "matmul (oneDNN)"),
    ("gradients/BatchMatMulV2_grad:_MklBatchMatMulV2", "matmul (oneDNN)"),
    ("dot.2", "matmul (XLA dot)"),
    ("dropout/StatelessRandomUniformV2:StatelessRandomUniformV2", "random numbers"),
    ("transpose:_MklTranspose", "layout (transpose, copy)"),
    ("add_multiply_fusion", "XLA kernels (element-wise, reductions)"),
    ("reduce-window.1", "XLA kernels (element-wise, reductions)"),
    ("ThreadpoolListener::StartRegion", "executor, between ops"),
    ("while/Less:Less", "other TensorFlow ops"),
])
def test_the_step_profile_sorts_each_event_by_kind(name, kind):
    assert step_profile.kind(name) == kind


def test_the_step_profile_counts_self_times():
    """An event's time less the events nested in it; the kinds' and ops' tables per step."""
    Event = step_profile.Event
    events = step_profile.self_times([
        Event("ThreadpoolListener::StartRegion", 0, 100),  # the region holds two ops
        Event("a/MatMul:_MklMatMul", 10, 50), Event("add_fusion", 70, 20),
        Event("b/MatMul:_MklMatMul", 200, 30),  # after the region
        Event("ParallelFor", 205, 20)])  # the matmul's work on its threads: the matmul's
    assert sorted(events) == [("ThreadpoolListener::StartRegion", 30), ("a/MatMul:_MklMatMul", 50),
                              ("add_fusion", 20), ("b/MatMul:_MklMatMul", 30)]
    table = step_profile.tables([(n, t * 10**9) for n, t in events], steps=2, top=2)
    assert "| matmul (oneDNN) | 40.0 | 61.5% |" in table
    assert "| executor, between ops | 15.0 | 23.1% |" in table
    assert "| _MklMatMul | 40.0 | 61.5% | 1 |" in table
    assert "add_fusion" not in table.split("| op")[1]  # only the top 2 ops


def test_the_onednn_log_is_summed_per_primitive_and_shape():
    """ONEDNN_VERBOSE=1's lines as oneDNN 3 writes them: its header lines and other programs'
    output skipped; a matmul's FLOPs from its shape, batch dimensions included."""
    log = [
        "onednn_verbose,v1,primitive,info,template:operation,engine,primitive,implementation,"
        "prop_kind,memory_descriptors,attributes,auxiliary,problem_desc,exec_time\n",
        "onednn_verbose,v1,primitive,exec,cpu,gemm_api,,undef,src_f32::blocked:ab:f0 "
        "wei_f32::blocked:ab:f0 dst_f32::blocked:ab:f0,,,100x200:200x50,2\n",
        "step 3 of 4\n",
        "onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core,undef,src_f32::"
        "blocked:abcd::f0,,,2x3x10x20:2x3x20x5,0.5\n",
        "onednn_verbose,v1,primitive,exec,cpu,gemm_api,,undef,x,,,100x200:200x50,2\n",
        "onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,x,,,32x128x3x2x64,1.5\n"]
    calls = step_profile.onednn_calls(log)
    assert [c.kind for c in calls] == ["gemm_api", "matmul", "gemm_api", "reorder"]
    assert [step_profile.matmul_flops(c) for c in calls] == [2e6, 2 * 6 * 10 * 20 * 5, 2e6, 0]
    table = step_profile.onednn_tables(calls, steps=2, top=5)
    assert "- oneDNN: 3.0 ms a step; its matmuls 0.00 GFLOP a step" in table
    assert "| gemm_api | 2.0 | 66.7% | 1 | 1.0 |" in table  # 4e6 FLOP in 4 ms
    assert "| reorder | 0.8 | 25.0% | 0.5 |  |" in table
    assert "| gemm_api | 100x200:200x50 | 2.0 | 1 | 1.0 |" in table


@pytest.mark.parametrize("flags, message", [
    (["--steps", "0"], "--steps and --top must be positive"),
    (["--processes", "99"], "--processes must be between 1 and the"),
])
def test_the_step_profile_refuses_bad_flags(flags, message, capsys):
    with pytest.raises(SystemExit):
        step_profile.parse_args(flags)
    assert message in capsys.readouterr().err


def test_processes_side_by_side_add_their_rates():
    # One process at a median of 1 s a batch, one at 0.5 s: together 3 batches a second.
    assert pretrain_throughput.together([[1.0, 1.0, 3.0], [0.5]]) == pytest.approx(1 / 3)
    args = pretrain_throughput.parse_args(["--model", "miniature"])
    assert (args.batch_size, args.steps, args.processes) == (32, 30, 1)
    with pytest.raises(SystemExit):
        pretrain_throughput.parse_args(["--processes", str(os.cpu_count() + 1)])


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


@pytest.mark.slow
def test_memory_of_a_training_step_is_measured():
    import memory

    result = memory.measure("electra_tf", "bert_mlm", seq_length=16, batch_size=2)
    assert result["step_peak_mb"] == max(result["step_peaks_mb"]) > 0
    assert len(result["step_peaks_mb"]) == memory.MEASURED_STEPS
    assert result["resting_mb"] > result["built_mb"] > 0  # the first call's graph stays
    assert result["objective"] == "bert_mlm" and "loss" in result["loss"]


def test_finetune_benchmark_refuses_an_unknown_task(monkeypatch, capsys):
    import finetune_throughput  # in this process: the check needs no interpreter of its own

    monkeypatch.setattr(sys, "argv", ["finetune_throughput.py", "--tasks", "sst,cola"])
    with pytest.raises(SystemExit) as exited:
        finetune_throughput.main()
    assert exited.value.code == 2
    assert "--tasks 'sst,cola': choose from sst, squad" in capsys.readouterr().err
