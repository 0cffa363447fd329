"""files.write_atomically and renamed_into_place: a file appears whole or not at all, and a
failure mid-write leaves the old file and no temporary one."""

import os

import pytest

from electra_tf import files


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
