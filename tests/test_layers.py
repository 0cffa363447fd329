"""Layers only look down: the model, the objectives and what they stand on never import the
training loop (not even through another module), the checkpoint formats' modules import only
those below them, the TFRecord builders stand on modules that import none of them, and the
experiments import each other without a circle. Read from the import statements, at module
level and inside functions alike."""

import ast
import pathlib

from conftest import REPO

# What the model and the objectives must never import: the loop (README's layering paragraph)
# and the two services only the loop uses, which themselves import nothing of ours.
LOOP = {"training", "distribution", "host_calls", "preemption", "progress"}
BELOW_THE_LOOP = ("hardware", "hparam_parsing", "model_shape", "shared_hparams", "config",
                  "tokenization", "files", "fused", "modeling", "masking", "generators",
                  "objectives", "flops", "health", "optimization", "data")
# What both configs (config and finetuning's) stand on: neither of them is reached from here.
BELOW_THE_CONFIGS = ("hparam_parsing", "model_shape", "shared_hparams")
# The checkpoint formats: the canonical names and a model's files at the bottom, a module per
# format above them, the registry and front door (checkpoints) on top.
CHECKPOINT_BOTTOM = {"checkpoint_names", "model_files"}
CHECKPOINT_FORMATS = {"tf1_checkpoint", "hf_checkpoint", "keras_saving", "keras_hub_preset"}


def _imported(path: pathlib.Path, package: str | None, names: set[str]) -> set[str]:
    """The modules of `names` that the file imports: `package.name` modules (`from package
    import name`, `from package.name import ...`), or top-level ones when package is None."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if package is None and parts[0] in names:
                    found.add(parts[0])
                elif package is not None and parts[0] == package and len(parts) > 1:
                    found.add(parts[1])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            parts = node.module.split(".")
            if package is None and parts[0] in names:
                found.add(parts[0])
            elif package is not None and parts[0] == package:
                found.update([parts[1]] if len(parts) > 1 else
                             [alias.name for alias in node.names])
    return found & names


def _graph(directory: pathlib.Path, package: str | None) -> dict[str, set[str]]:
    modules = {p.stem: p for p in directory.glob("*.py") if p.stem != "__init__"}
    return {name: _imported(path, package, set(modules)) - {name}
            for name, path in modules.items()}


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_nothing_below_the_loop_imports_it():
    graph = _graph(REPO / "electra_tf", "electra_tf")
    assert LOOP <= set(graph)
    for name in BELOW_THE_LOOP:
        assert not _reach(graph, name) & LOOP, (name, _reach(graph, name) & LOOP)


def test_what_both_configs_share_imports_neither():
    graph = _graph(REPO / "electra_tf", "electra_tf")
    for name in BELOW_THE_CONFIGS:
        for module in {name} | _reach(graph, name):
            configs = _imported(REPO / "electra_tf" / f"{module}.py", "electra_tf",
                                {"config", "finetuning"})
            assert not configs, (name, module, configs)


def test_the_loop_modules_import_each_other_without_a_circle():
    graph = _graph(REPO / "electra_tf", "electra_tf")
    for name in LOOP:
        assert name not in _reach(graph, name), name


def test_the_checkpoint_modules_only_look_down():
    graph = _graph(REPO / "electra_tf", "electra_tf")
    everything = CHECKPOINT_BOTTOM | CHECKPOINT_FORMATS | {"checkpoints"}
    assert everything <= set(graph)
    for name in CHECKPOINT_BOTTOM:
        assert not _reach(graph, name) & (everything - CHECKPOINT_BOTTOM), name
    for name in CHECKPOINT_FORMATS:
        assert "checkpoints" not in _reach(graph, name), name
    for name in BELOW_THE_LOOP:  # the model and what it stands on never read checkpoints
        assert not _reach(graph, name) & everything, (name, _reach(graph, name) & everything)


def test_the_experiments_import_each_other_without_a_circle():
    graph = _graph(REPO / "experiments", None)
    assert {"efficiency", "efficiency_plan", "report"} <= set(graph)
    for name in graph:
        assert name not in _reach(graph, name), (name, graph[name])


def test_the_builders_stand_on_their_reading_and_publishing_modules():
    graph = _graph(REPO / "pretrain_data", "pretrain_data")
    for name in ("text_lines", "shard_files"):
        assert not graph[name], (name, graph[name])
    assert {"text_lines", "shard_files"} <= graph["build_pretraining_dataset"]
