"""Converts ELECTRA weights between formats, with the tokenizer.

  python convert_checkpoint.py --input PATH --output DIR --to hf|tf1|saved_model|keras|keras_hub

--input is anything electra_tf.load_pretrained reads: a TF1 checkpoint (Google's released
electra_small/base/large, the original's run_pretraining.py output), a Hugging Face directory
(config.json + model.safetensors or pytorch_model.bin) or our discriminator.keras (or the
directory run_pretraining.py exports into). --to:
  hf           DIR/discriminator/ and DIR/generator/ (config.json, model.safetensors, vocab.txt,
               tokenizer_config.json) that transformers' ElectraForPreTraining /
               ElectraForMaskedLM and ElectraTokenizer(Fast) load
  tf1          DIR/model.ckpt-STEP with the original's variable names (generator included),
               electra_config.json (what shapes do not tell), vocab.txt, tokenizer_config.json;
               with --optimizer_state, of a run_pretraining.py folder (DATA_DIR/models/NAME,
               finished or not): its newest checkpoint with global_step and the Adam slots,
               which the original's run_pretraining.py continues from
  saved_model  DIR/discriminator/ as a TF SavedModel with serving signatures, the tokenizer in
               its assets.extra/
  keras        DIR/discriminator.keras and DIR/generator.keras, vocab.txt, tokenizer_config.json
  keras_hub    DIR as a keras-hub preset of the discriminator's encoder and the tokenizer, which
               keras_hub.models.ElectraBackbone / ElectraTokenizer .from_preset(DIR) load
               (needs the keras-hub extra; docs/checkpoints.md says what differs)

The vocabulary is --vocab_file, else vocab.txt beside the input, else (for a run_pretraining
output, DATA_DIR/models/NAME) its pretrain_config.json's vocab_file or DATA_DIR/vocab.txt.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

import command_line  # noqa: E402  (electra_tf, and TensorFlow, load after the flags are parsed)

FLAGS = flags.FLAGS
flags.DEFINE_string("input", None, "Pretrained weights in any supported format.")
flags.DEFINE_string("output", None, "Output directory.")
# The names of the formats in checkpoints.FORMATS that write. They are spelled here, not read
# from the registry, because the flags are parsed before TensorFlow (which any electra_tf
# import loads); tests/test_checkpoints.py checks that the two agree.
EXPORT_FORMATS = ("hf", "tf1", "saved_model", "keras", "keras_hub")
flags.DEFINE_enum("to", None, EXPORT_FORMATS, "Output format.")
flags.DEFINE_string("vocab_file", None, "The model's vocab.txt, when it is not beside the input "
                    "(or, for a run_pretraining output, in DATA_DIR).")
flags.DEFINE_bool("do_lower_case", True, "Written to the tokenizer config when the input does "
                  "not say.")
flags.DEFINE_integer("num_attention_heads", None, "The discriminator's attention heads, for a "
                     "TF1 checkpoint that does not say (no electra_config.json or "
                     "pretrain_config.json beside it) and whose hidden size is not a multiple "
                     "of 64.")
flags.DEFINE_bool("optimizer_state", False, "With --to tf1 and a run_pretraining.py folder "
                  "as --input: the run's newest checkpoint with its global_step and Adam slots "
                  "(adam_m, adam_v), as the original's run_pretraining.py writes them, so that "
                  "the original (or init_optimizer_state) continues the run.")


ONLY_TF1_HOLDS_OPTIMIZER_STATE = ("--optimizer_state writes the original's Adam slots, which "
                                  "only --to tf1 holds: drop it, or convert --to tf1")
flags.register_multi_flags_validator(  # checked with the flags, before TensorFlow loads
    ["optimizer_state", "to"], lambda f: not f["optimizer_state"] or f["to"] in (None, "tf1"),
    ONLY_TF1_HOLDS_OPTIMIZER_STATE)


def convert(source: str, output: str, to: str, do_lower_case: bool = True,
            vocab_file: str | None = None, num_attention_heads: int | None = None,
            optimizer_state: bool = False) -> list[str]:
    """Returns the paths written."""
    if optimizer_state and to != "tf1":
        raise ValueError(f"--to {to}: {ONLY_TF1_HOLDS_OPTIMIZER_STATE}")
    import tensorflow as tf

    from electra_tf import checkpoints, pretraining, tokenization

    format_ = checkpoints.FORMATS.get(to)
    if format_ is None or not format_.writes:
        raise ValueError(f"--to {to}: one of "
                         f"{[name for name, f in checkpoints.FORMATS.items() if f.writes]}")
    if tf.io.gfile.exists(output) and not tf.io.gfile.isdir(output):
        raise ValueError(f"--output {output} is a file; give a new directory")
    if tf.io.gfile.exists(output) and tf.io.gfile.listdir(output):
        raise ValueError(f"--output {output} is not empty; choose a new directory")
    format_.check_installed()

    pretrained = (pretraining.restored_run(source) if optimizer_state
                  else checkpoints.load_pretrained(source, num_attention_heads))
    vocab_file = vocab_file or pretrained.vocab_file
    if vocab_file is None:
        raise FileNotFoundError(
            f"no vocab.txt found for {source} (beside it, or for a run_pretraining output in "
            "its pretrain_config.json's vocab_file or DATA_DIR/vocab.txt): an export needs its "
            "tokenizer; pass --vocab_file")
    if not tf.io.gfile.exists(vocab_file):
        raise FileNotFoundError(f"--vocab_file {vocab_file} does not exist")
    tokens = len(tokenization.read_vocab(vocab_file))
    model = pretrained.discriminator if pretrained.discriminator is not None \
        else pretrained.generator
    vocab_size = model.encoder.vocab_size
    if tokens > vocab_size:
        raise ValueError(f"{vocab_file} has {tokens} tokens but the model's vocab_size is "
                         f"{vocab_size}: it is not this model's vocabulary; pass --vocab_file")
    format_.check_export(pretrained, source)  # what the format cannot take fails before writing
    tf.io.gfile.makedirs(output)
    lower = pretrained.do_lower_case if pretrained.do_lower_case is not None else do_lower_case
    return format_.export(pretrained, output, vocab_file, lower, source)


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    try:
        for path in convert(FLAGS.input, FLAGS.output, FLAGS.to, FLAGS.do_lower_case,
                            FLAGS.vocab_file, FLAGS.num_attention_heads, FLAGS.optimizer_state):
            print(f"wrote {path}", flush=True)
    except (ValueError, FileNotFoundError) as e:
        raise app.UsageError(str(e)) from None


if __name__ == "__main__":
    # Required only as a command: importing convert() (tests, a user's script) must not make
    # every later parse of absl's global flags demand --input, --output and --to.
    flags.mark_flags_as_required(["input", "output", "to"])
    command_line.run(main, "docs/checkpoints.md")
