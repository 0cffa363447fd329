"""Every fine-tuning task by name (the original's finetune/task_builder.py).

A new task of an existing kind is one more instance in its module's list (e.g. glue.TASKS); a
new kind of task is one task.Task subclass whose instances are added to TASKS here.
"""

from __future__ import annotations

from electra_tf.finetuning import glue, pos, qa, tagging, zero_shot
from electra_tf.finetuning.task import Task

TASKS: dict[str, Task] = {task.name: task for task in [
    *glue.TASKS.values(), *qa.TASKS, *tagging.TASKS, *pos.TASKS, *zero_shot.TASKS]}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {list(TASKS)}")
    return TASKS[name]
