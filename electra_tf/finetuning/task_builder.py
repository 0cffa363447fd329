"""Every fine-tuning task by name (the original's finetune/task_builder.py): the registry that
config.py, the trainer and run_finetuning.py know tasks through.

A new task of an existing kind is one more instance in its module's list (e.g. glue.TASKS); a
new kind of task is one Task subclass (with its head and its TaskHparams) and one line that
registers an instance: `task_builder.register(MyTask("mine"))`, here for a task of this
package.
"""

from __future__ import annotations

import dataclasses

from electra_tf.finetuning import glue, pos, qa, tagging, zero_shot
from electra_tf.finetuning.hparams import FinetuningConfig
from electra_tf.finetuning.task import Task, TaskHparams
from electra_tf.hparam_parsing import did_you_mean

TASKS: dict[str, Task] = {}


def hparams_classes() -> list[type[TaskHparams]]:
    """The hparams of the registered kinds of task, each once, in the order registered."""
    return list(dict.fromkeys(task.hparams_class for task in TASKS.values()
                              if task.hparams_class is not None))


def register(task: Task) -> Task:
    """Adds `task` under its name. Its kind's hparams join every run's --hparams: a name that
    FinetuningConfig or another registered kind declares is refused, as is a taken task name."""
    if task.name in TASKS:
        raise ValueError(f"a task named {task.name!r} is registered already: "
                         f"{TASKS[task.name]!r}")
    if task.hparams_class is not None and task.hparams_class not in hparams_classes():
        taken = {field.name: owner.__name__ for owner in (FinetuningConfig, *hparams_classes())
                 for field in dataclasses.fields(owner)}
        clash = {field.name: taken[field.name] for field in dataclasses.fields(task.hparams_class)
                 if field.name in taken}
        if clash:
            raise ValueError(f"{task.hparams_class.__name__} of task {task.name!r} declares "
                             f"hparams that {clash} declare already; give them new names")
    TASKS[task.name] = task
    return task


# This package's tasks, kind by kind.
for _task in (*glue.TASKS.values(), *qa.TASKS, *tagging.TASKS, *pos.TASKS, *zero_shot.TASKS):
    register(_task)


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}{did_you_mean([name], TASKS)}; valid tasks: "
                         f"{list(TASKS)}")
    return TASKS[name]
