"""files.write_atomically and renamed_into_place: a file appears whole or not at all, and a
failure mid-write leaves the old file and no temporary one; a write that fails is one line naming
the file."""

import os
import re

import pytest

from electra_tf import data, files


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "results.json"
    files.write_atomically(str(path), '{"old": 1}')
    with pytest.raises(RuntimeError, match="killed"):
        with files.renamed_into_place(str(path)) as temporary:
            with open(temporary, "w") as f:
                f.write('{"new": ')  # half of the new content, then the writer dies
            raise RuntimeError("killed")
    assert path.read_text() == '{"old": 1}'
    assert os.listdir(tmp_path) == ["results.json"]


def test_bytes_text_new_directories_and_a_suffix_for_the_writer(tmp_path):
    files.write_atomically(str(tmp_path / "a" / "b" / "weights.bin"), b"\x00\x01")
    assert (tmp_path / "a" / "b" / "weights.bin").read_bytes() == b"\x00\x01"
    target = tmp_path / "model.keras"
    with files.renamed_into_place(str(target), suffix=".keras") as temporary:
        assert temporary.endswith(".keras") and os.path.dirname(temporary) == str(tmp_path)
        with open(temporary, "w") as f:
            f.write("zip")
    assert target.read_text() == "zip"
    assert sorted(os.listdir(tmp_path)) == ["a", "model.keras"]


def test_a_failed_writer_that_made_a_directory_leaves_nothing(tmp_path):
    # Keras and SavedModel writers may create a directory under the temporary name.
    with pytest.raises(OSError):
        with files.renamed_into_place(str(tmp_path / "export")) as temporary:
            os.makedirs(os.path.join(temporary, "variables"))
            raise OSError("disk full")
    assert os.listdir(tmp_path) == []


def _blocked(tmp_path):
    """A path that cannot be written, whoever runs the test: its directory is a file."""
    blocker = tmp_path / "results"
    blocker.write_text("a file where a directory should be")
    return blocker / "sst_results.txt"


def test_a_write_that_fails_stops_a_command_with_one_line_naming_the_file(tmp_path, capsys):
    from electra_tf import cli

    path = _blocked(tmp_path)
    with pytest.raises(SystemExit) as stopped, cli.reported_stops():
        files.write_atomically(str(path), "accuracy = 0.9\n")
    assert stopped.value.code == 1
    assert re.fullmatch(rf"error: could not write {path}: [^\n]+\n", capsys.readouterr().err)
    assert os.listdir(tmp_path) == ["results"]


def test_a_checkpoint_write_wraps_a_failed_file_with_its_reason_once(tmp_path):
    from electra_tf import resume

    with pytest.raises(resume.CheckpointWriteError) as failed:
        with resume.writing("the exported models", "; rerun"):
            files.write_atomically(str(_blocked(tmp_path)), "weights")
    assert re.fullmatch(r"could not write the exported models: [^\n]+; rerun", str(failed.value))
    assert "could not write" not in str(failed.value)[len("could not write"):]


@pytest.mark.parametrize("content", [b'{"max_seq_length": 1', b"\x00" * 16, b"\xff\xfe{}"])
def test_json_read_back_names_a_damaged_file_and_a_missing_one_is_none(tmp_path, content):
    path = tmp_path / "pretrain_config.json"
    assert files.read_json(str(path)) is None
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))} is damaged \\("):
        files.read_json(str(path))
    # The builder's summary is advisory: a damaged one is read as absent.
    assert data.read_build_summary(str(path)) is None
