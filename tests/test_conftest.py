"""The shared test helpers do what they say."""

import shutil

import pytest

from conftest import BERT_VOCAB, REPO, run_script


def test_run_script_fails_the_test_on_an_unexpected_exit(tmp_path):
    failing = tmp_path / "failing.py"
    failing.write_text("import sys\nprint('the output')\nsys.exit(3)\n")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)exited 3, expected 0.*the output"):
        run_script(str(failing))
    assert run_script(str(failing), expect_failure=True).returncode == 3
    passing = tmp_path / "passing.py"
    passing.write_text("")
    assert run_script(str(passing)).returncode == 0
    with pytest.raises(pytest.fail.Exception, match="exited 0, expected an error"):
        run_script(str(passing), expect_failure=True)


def test_no_test_reads_outside_the_repository():
    """A user's clone has nothing beside it: tests read only what the repository ships."""
    offending = [path.name for path in (REPO / "tests").glob("*.py")
                 if any(marker in path.read_text(encoding="utf-8")
                        for marker in ("shared" + "/data", "REPO." + "parent"))]
    assert not offending


def test_finetuning_dir_is_the_tests_own_copy(finetuning_dir, _finetuning_files):
    """What a test changes in its finetuning_dir never reaches the next test's."""
    (finetuning_dir / "vocab.txt").write_text("[PAD]\n", encoding="utf-8")
    shutil.rmtree(finetuning_dir / "models")
    assert (_finetuning_files / "vocab.txt").read_bytes() == BERT_VOCAB.read_bytes()
    assert (_finetuning_files / "models" / "tiny" / "discriminator.keras").exists()
