"""The README's first hour: the fine-tuning commands the README and docs/finetuning.md show are
accepted as written for the model quickstart.sh pretrains, and (slow) quickstart.sh runs end to
end, after which docs/finetuning.md's classification example runs on its fine-tuned model."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import BERT_VOCAB, REPO, save_discriminator

QUICKSTART_HPARAMS = REPO / "configs" / "hparams" / "quickstart.json"
DOCS = ("README.md", "docs/finetuning.md")
SAVED_MODEL = "demo_data/models/quickstart/finetuning_models/sst_model_1/saved_model"


def _documented_finetuning_commands() -> list[tuple[str, list[str]]]:
    """(document, argv) of every `python run_finetuning.py ...` line in the documents' code
    blocks, continuation lines joined and comments dropped."""
    commands = []
    for name in DOCS:
        text = (REPO / name).read_text(encoding="utf-8").replace("\\\n", " ")
        for line in re.findall(r"^python run_finetuning\.py .*$", text, flags=re.MULTILINE):
            commands.append((name, shlex.split(line, comments=True)[2:]))
    return commands


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(f"--{name}") + 1]


def test_the_documented_finetuning_commands_run_on_the_quickstarts_model(tmp_path):
    from electra_tf.finetuning.config import from_hparams

    commands = _documented_finetuning_commands()
    assert {name for name, _ in commands} == set(DOCS)
    # DATA_DIR as the quickstart leaves it: its vocabulary and its pretrained discriminator.
    shutil.copy(BERT_VOCAB, tmp_path / "vocab.txt")
    quickstart = json.loads(QUICKSTART_HPARAMS.read_text(encoding="utf-8"))
    shape = from_hparams("quickstart", str(tmp_path), {
        "model_size": quickstart["model_size"],
        "model_hparam_overrides": quickstart["model_hparam_overrides"], "init_checkpoint": ""})
    save_discriminator(tmp_path, "quickstart", shape)

    for name, argv in commands:
        assert _flag(argv, "data_dir") == "demo_data", (name, argv)
        assert _flag(argv, "model_name") == "quickstart", (name, argv)
        config = from_hparams("quickstart", str(tmp_path), _flag(argv, "hparams"))
        assert config.bert_config()["hidden_size"] == \
            quickstart["model_hparam_overrides"]["hidden_size"], (name, argv)
        assert config.export_saved_model  # what "Classifying your own sentences" loads


@pytest.mark.slow
def test_quickstart_end_to_end_then_the_classification_example(tmp_path):
    data_dir = tmp_path / "demo_data"
    result = subprocess.run(["bash", str(REPO / "quickstart.sh")], capture_output=True,
                            text=True, env={**os.environ, "DATA_DIR": str(data_dir)},
                            timeout=3600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    model_dir = data_dir / "models" / "quickstart"
    assert (model_dir / "results" / "unsup_results.txt").exists()
    summary = json.loads((model_dir / "results" / "sst_results.json").read_text())
    assert 0 <= summary["median"]["sst"]["accuracy"] <= 100
    doc = (REPO / "docs" / "finetuning.md").read_text(encoding="utf-8")
    block = doc.split("## Classifying your own sentences")[1].split("```python\n")[1]
    block = block.split("```")[0]
    assert SAVED_MODEL in block
    example = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True,
                             text=True, timeout=600)
    assert example.returncode == 0, example.stderr[-3000:]
    assert [line.split(" ", 1)[1] for line in example.stdout.splitlines()] == [
        "a gorgeous, witty, seductive movie.", "the plot is nothing but tired cliches."]
