"""Raw results as JSON Lines files that a killed run cannot damage (experiments/results/...).

Each finished run appends its records, one JSON object a line, to a file such as
experiments/results/ladder/finetune.jsonl, which is committed: a machine lost between sittings
loses no finished result, the experiment resumes from these files (a run whose records are
there is skipped), and the report is redrawn from them alone.

- append() writes all of a run's lines with one os.write on a file opened O_APPEND, then
  fsyncs: on a local file system a kill leaves either none of them or all of them. Only a crash
  of the machine in the middle of the write can leave a torn last line (no newline at its end).
- read() returns every complete line; a torn last line is reported on stderr, naming the file
  and what is dropped, and left for append() to repair; a damaged line elsewhere (an edit by
  hand) is an error naming the file and line, since something other than a crash made it.
- append() first cuts a torn last line off (saying so), so a new record never joins a fragment.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "runs.jsonl")
>>> append(path, [{"task": "pos", "score": 91.5}, {"task": "pos", "score": 90.0}])
>>> [r["score"] for r in read(path)]
[91.5, 90.0]
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Iterable


class RecordsError(ValueError):
    """A records file damaged other than by a crash in the middle of its last append."""


def _complete_length(data: bytes) -> int:
    """The length of the part of `data` that ends with its last newline."""
    return data.rfind(b"\n") + 1


def read(path: str) -> list[dict[str, Any]]:
    """The records in `path` ([] when it does not exist)."""
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    complete = _complete_length(data)
    if complete < len(data):
        print(f"{path}: its last line is torn ({len(data) - complete} bytes without a newline, "
              "left by a crash in the middle of an append); it is ignored, and the next "
              "append removes it", file=sys.stderr, flush=True)
    records = []
    for number, line in enumerate(data[:complete].decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordsError(f"{path}:{number}: not a JSON record ({e.msg}); fix or remove "
                               "that line (appends never write one)") from None
        if not isinstance(record, dict):
            raise RecordsError(f"{path}:{number}: a record must be a JSON object")
        records.append(record)
    return records


def _repair(path: str) -> None:
    """Cuts a torn last line off `path`."""
    with open(path, "rb+") as f:
        data = f.read()
        complete = _complete_length(data)
        if complete < len(data):
            print(f"{path}: removing its torn last line ({data[complete:][:80]!r})",
                  file=sys.stderr, flush=True)
            f.truncate(complete)
            f.flush()
            os.fsync(f.fileno())


def append(path: str, records: Iterable[dict[str, Any]]) -> None:
    """Appends `records` to `path` (created with its directory) in one write."""
    lines = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
    if not lines:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if os.path.exists(path):
        _repair(path)
    data = lines.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        if written != len(data):  # a full disk: take the partial line back out
            os.ftruncate(fd, os.fstat(fd).st_size - written)
            raise OSError(f"{path}: only {written} of {len(data)} bytes could be appended "
                          "(is the disk full?); nothing was recorded")
        os.fsync(fd)
    finally:
        os.close(fd)


def latest(records: Iterable[dict[str, Any]], *key: str) -> list[dict[str, Any]]:
    """The last record of each `key` value, in the order of those last records: in an
    append-only file a later record supersedes an earlier one with the same key.

    >>> latest([{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0}, {"step": 1, "loss": 2.9}],
    ...        "step")
    [{'step': 2, 'loss': 2.0}, {'step': 1, 'loss': 2.9}]
    """
    last: dict[tuple, dict[str, Any]] = {}
    for record in records:
        identity = tuple(record[k] for k in key)
        last.pop(identity, None)
        last[identity] = record
    return list(last.values())


class Stopwatch:
    """A run's cost for its record: wall seconds and this process's CPU seconds (every thread)
    since it was made.

    >>> sorted(Stopwatch().spent("run_"))
    ['run_cpu_seconds', 'run_wall_seconds']
    """

    def __init__(self) -> None:
        self.wall, self.cpu = time.time(), time.process_time()

    def spent(self, prefix: str = "") -> dict[str, float]:
        """{prefix + "wall_seconds": ..., prefix + "cpu_seconds": ...}, rounded to 0.1 s."""
        return {prefix + "wall_seconds": round(time.time() - self.wall, 1),
                prefix + "cpu_seconds": round(time.process_time() - self.cpu, 1)}
