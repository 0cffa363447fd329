"""Every fine-tuning task by name (the original's finetune/task_builder.py).

A new task of an existing kind is one more instance in its module's list (e.g. glue.TASKS); a
new kind of task is one task.Task subclass whose instances are added to TASKS here.
"""

from __future__ import annotations

import difflib

from electra_tf.finetuning import glue, qa, tagging, zero_shot
from electra_tf.finetuning.task import Task

TASKS: dict[str, Task] = {task.name: task for task in [
    *glue.TASKS.values(), *qa.TASKS, *tagging.TASKS, *zero_shot.TASKS]}


def did_you_mean(names: list[str]) -> str:
    """The hint ` (did you mean 'sst'?)` with the task names closest to the unknown `names`
    (difflib), or an empty string."""
    close = {match for name in names
             for match in difflib.get_close_matches(name.lower(), TASKS, n=2)}
    return f" (did you mean {' or '.join(map(repr, sorted(close)))}?)" if close else ""


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}{did_you_mean([name])}; valid tasks: "
                         f"{list(TASKS)}")
    return TASKS[name]
