"""What a fine-tuning run is configured by: FinetuningConfig, the original's configure_finetuning
hparams that every task shares, and the hparams the registered kinds of task declare
(Task.hparams_class). config.py resolves it from --hparams; the tasks read it.

>>> config = FinetuningConfig(model_name="m", data_dir="/data")
>>> config.task_string, config.model_dir(2)
('sst', '/data/models/m/finetuning_models/sst_model_2')
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, ClassVar

from electra_tf import model_shape, shared_hparams


@dataclasses.dataclass
class FinetuningConfig(shared_hparams.TpuHparams):
    """Fine-tuning hyperparameters. Names and meanings are the original's unless marked "ours".
    The TPU ones (use_tpu, tpu_name, ...) come from shared_hparams.TpuHparams; those of one kind of
    task (SQuAD's doc_stride, ...) from its Task.hparams_class, in `task_hparams`."""

    HPARAMS_DOC: ClassVar[str] = "docs/finetuning.md#hyperparameters"
    # Not a --hparams key itself: its values are, by their own names.
    DERIVED: ClassVar[tuple[str, ...]] = ("task_hparams",)
    model_name: str
    data_dir: str
    debug: bool = False  # tiny model, few examples
    log_examples: bool = False  # print the first featurized examples
    num_trials: int = 1  # train+eval runs with different seeds; the median is reported
    do_train: bool = True
    do_eval: bool = True
    keep_all_models: bool = True  # else only the last trial's checkpoints are kept
    model_size: str = "small"
    task_names: list = dataclasses.field(default_factory=lambda: ["sst"])
    model_hparam_overrides: dict = dataclasses.field(default_factory=dict)
    embedding_size: int | None = None  # hidden size by default
    vocab_size: int = 30522  # taken from vocab.txt when not given (ours)
    do_lower_case: bool = True
    learning_rate: float = 1e-4
    weight_decay_rate: float = 0.01
    layerwise_lr_decay: float = 0.8  # > 0: lr x decay^(depth from the top) per layer
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    save_checkpoints_steps: int = 1000000
    iterations_per_loop: int = 1000
    # The original's default is true; features are built in memory here, never cached on disk.
    use_tfrecords_if_existing: bool = False
    write_test_outputs: bool = False  # GLUE submission TSVs / SQuAD predictions for test sets
    n_writes_test: int = 5  # for the first n trials
    max_seq_length: int = 128
    train_batch_size: int = 32
    eval_batch_size: int = 32
    predict_batch_size: int = 32
    # Paths (the original derives them from data_dir and model_name).
    init_checkpoint: str | None = None  # default DATA_DIR/models/<model_name>
    vocab_file: str = ""
    # Ours.
    fix_layerwise_lr_depths: bool = False  # correct the original's off-by-one (see optimization)
    # A TF SavedModel of each trained trial (for TF Serving, and for classifying new text
    # without this package's model code): on by default, so that a finished run can be used.
    export_saved_model: bool = True
    keep_best_trial: bool = False  # export the trial with the best dev score to <tasks>_best/
    data_source: str = "files"  # or "tfds": GLUE from a prepared tensorflow-datasets data_dir
    tfds_data_dir: str | None = None
    strategy: str = "default"
    precision: str = "float32"
    jit_compile: bool | None = None  # None: on for GPU/TPU, off on CPU
    kernels: str = "auto"  # fused CPU kernels or the plain reference layers; auto: by device
    seed: int = 0  # trial k uses seed + k - 1
    log_steps: int = 100
    log_seconds: float = 30.0  # a console progress line at least this often
    nonfinite_patience: int = 20  # steps in a row with a NaN/inf loss that stop the trial
    # Every registered kind of task's hparams: its hparams_class -> an instance of it (all of
    # them, as every hparam above is set whichever tasks run). config.py fills it.
    task_hparams: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def encoder_size(self) -> str:
        return self.model_size.rstrip("+")

    def bert_config(self) -> dict[str, Any]:
        return model_shape.bert_config(self.encoder_size, self.vocab_size,
                                       self.model_hparam_overrides, self.debug)

    @property
    def task_string(self) -> str:
        return ",".join(self.task_names)

    @property
    def pretrained_model_dir(self) -> str:
        return os.path.join(self.data_dir, "models", self.model_name)

    def model_dir(self, trial: int) -> str:
        return os.path.join(self.pretrained_model_dir, "finetuning_models",
                            f"{self.task_string}_model_{trial}")

    @property
    def results_dir(self) -> str:
        return os.path.join(self.pretrained_model_dir, "results")

    def raw_data_dir(self, task_name: str) -> str:
        return os.path.join(self.data_dir, "finetuning_data", task_name)

    def test_predictions_dir(self, trial: int) -> str:
        return os.path.join(self.pretrained_model_dir, "test_predictions",
                            f"{self.task_string}_trial_{trial}")

    def to_json(self) -> str:
        """Every hparam by its --hparams name (the tasks' too, side by side with the rest)."""
        values = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                  if field.name not in self.DERIVED}
        for hparams in self.task_hparams.values():
            values.update(dataclasses.asdict(hparams))
        return json.dumps(values, indent=2, sort_keys=True)
