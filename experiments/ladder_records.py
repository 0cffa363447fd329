"""The ladder's records (experiments/ladder.py): its JSON Lines files in one directory, each a
name such as pretrain or finetune, read and appended through experiments/records.py, which
keeps them whole when a run is killed."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import records


@dataclasses.dataclass
class Store:
    """The experiment's records files in one directory."""
    directory: str

    def path(self, file: str) -> str:
        return os.path.join(self.directory, f"{file}.jsonl")

    def read(self, file: str) -> list[dict[str, Any]]:
        return records.read(self.path(file))

    def append(self, file: str, lines: Sequence[dict[str, Any]]) -> None:
        records.append(self.path(file), lines)

    def has(self, file: str, **match: Any) -> bool:
        """Whether a record of `file` (pretrain, finetune, probe) has these values."""
        return any(all(r.get(k) == v for k, v in match.items()) for r in self.read(file))
