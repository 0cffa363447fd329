"""docs/figures/make_figures.py reads the text sample run_pretraining.py writes and draws the
README's figures."""

import importlib.util

import numpy as np
import pytest

from conftest import REPO


def _make_figures():
    spec = importlib.util.spec_from_file_location("make_figures",
                                                  REPO / "docs" / "figures" / "make_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sample_markdown(chef: str = "chef") -> str:
    """run_pretraining.py's table for "[CLS] the chef cooked [SEP]" with "cooked" masked and
    sampled as "ate", which the discriminator flags."""
    import run_pretraining

    vocab = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "the", chef, "cooked", "ate"]
    out = {"input_mask": np.array([[1, 1, 1, 1, 1, 0]]),
           "input_ids": np.array([[1, 4, 5, 6, 2, 0]]),
           "masked_input_ids": np.array([[1, 4, 5, 3, 2, 0]]),
           "fake_input_ids": np.array([[1, 4, 5, 7, 2, 0]]),
           "disc_labels": np.array([[0, 0, 0, 1, 0, 0]]),
           "disc_probs": np.array([[0.0, 0.1, 0.2, 0.9, 0.0, 0.0]]),
           "masked_lm_positions": np.array([[3]]), "masked_lm_preds": np.array([[7]])}
    return run_pretraining._example_markdown(dict(enumerate(vocab)), out, 0)


def test_a_pipe_token_stays_in_its_cell():
    markdown = _sample_markdown(chef="|")
    assert "| 2 | \\| | \\| |" in markdown  # escaped in the Markdown table
    rows = _make_figures().parse_sample(markdown)
    assert [row["sample"] for row in rows] == ["[CLS]", "the", "|", "ate", "[SEP]"]


def test_the_replaced_token_sample_is_parsed_as_run_pretraining_writes_it():
    rows = _make_figures().parse_sample(_sample_markdown())
    assert [row["sample"] for row in rows] == ["[CLS]", "the", "chef", "ate", "[SEP]"]
    assert [row["original"] for row in rows][3] == "cooked"
    assert [(row["masked"], row["replaced"]) for row in rows] == [
        (False, False), (False, False), (False, False), (True, True), (False, False)]
    assert [row["p"] for row in rows] == pytest.approx([0.0, 0.1, 0.2, 0.9, 0.0])


def test_a_table_of_another_shape_is_refused():
    with pytest.raises(ValueError, match="not a replaced-token sample row"):
        _make_figures().parse_sample("| pos | original | masked input | prediction |\n"
                                     "|---|---|---|---|\n| 0 | the | the | |")


def test_the_figures_are_drawn(tmp_path):
    figures = _make_figures()
    figures.plot_architecture(str(tmp_path / "architecture.png"))
    figures.plot_curves({tag: {50: 1.0, 100: 0.5} for tag, _ in figures.CURVES},
                        str(tmp_path / "curves.png"))
    figures.plot_replaced_tokens(figures.parse_sample(_sample_markdown()),
                                 str(tmp_path / "replaced.png"))
    for name in ("architecture.png", "curves.png", "replaced.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_figures_go_to_the_model_dir_unless_told(tmp_path, monkeypatch, capsys):
    """By default the script writes beside the run, never over the README's tracked figures."""
    from electra_tf import progress

    figures = _make_figures()
    model_dir = tmp_path / "models" / "quickstart"
    logger = progress.ProgressLogger(str(model_dir), total_steps=100, start_step=0,
                                     examples_per_step=32)
    for step, value in ((50, 1.0), (100, 0.5)):
        logger.scalars(step, {tag: value for tag, _ in figures.CURVES})
    logger.text(100, "example", _sample_markdown())
    tracked = {path: path.read_bytes() for path in (REPO / "docs" / "figures").glob("*.png")}
    monkeypatch.setattr("sys.argv", ["make_figures.py", "--model_dir", str(model_dir)])
    figures.main()
    for name in ("architecture.png", "quickstart_curves.png", "replaced_tokens.png"):
        assert (model_dir / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {path: path.read_bytes() for path in tracked} == tracked
    assert f"to {model_dir / 'figures'}" in capsys.readouterr().out
