"""Converts ELECTRA weights between formats.

  python convert_checkpoint.py --input PATH --output DIR --to hf|tf1|saved_model|keras

--input is anything electra_tf.load_pretrained reads: a TF1 checkpoint (Google's released
electra_small/base/large, the original's run_pretraining.py output), a Hugging Face directory
(config.json + model.safetensors or pytorch_model.bin) or our discriminator.keras (or the
directory run_pretraining.py exports into). --to:
  hf           DIR/discriminator/ and DIR/generator/ (config.json, model.safetensors, vocab.txt)
               that transformers' ElectraForPreTraining / ElectraForMaskedLM load
  tf1          DIR/model.ckpt-STEP with the original's variable names (generator included)
  saved_model  DIR/discriminator/ as a TF SavedModel with serving signatures
  keras        DIR/discriminator.keras and DIR/generator.keras
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import electra_tf  # noqa: F401,E402  (first: decides oneDNN before TensorFlow loads)
from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("input", None, "Pretrained weights in any supported format.")
flags.DEFINE_string("output", None, "Output directory.")
flags.DEFINE_enum("to", None, ["hf", "tf1", "saved_model", "keras"], "Output format.")
flags.DEFINE_bool("do_lower_case", True, "Written to the Hugging Face tokenizer config when the "
                  "input does not say.")
flags.mark_flags_as_required(["input", "output", "to"])


def convert(source: str, output: str, to: str, do_lower_case: bool = True) -> list[str]:
    """Returns the paths written."""
    import tensorflow as tf

    from electra_tf import checkpoints

    pretrained = checkpoints.load_pretrained(source)
    models = {"discriminator": pretrained.discriminator, "generator": pretrained.generator}
    models = {name: model for name, model in models.items() if model is not None}
    if tf.io.gfile.exists(output) and tf.io.gfile.listdir(output):
        raise ValueError(f"--output {output} is not empty; choose a new directory")
    tf.io.gfile.makedirs(output)
    lower = pretrained.do_lower_case if pretrained.do_lower_case is not None else do_lower_case
    if to == "hf":
        return [checkpoints.export_hf(model, os.path.join(output, name), pretrained.vocab_file,
                                      lower) for name, model in models.items()]
    if to == "tf1":
        step = pretrained.global_step or 0
        return [checkpoints.write_tf1_checkpoint(
            os.path.join(output, f"model.ckpt-{step}"), pretrained.discriminator,
            pretrained.generator, step)]
    if to == "saved_model":
        if pretrained.discriminator is None:
            raise ValueError(f"{source} holds no discriminator to serve")
        return [checkpoints.export_saved_model(pretrained.discriminator,
                                               os.path.join(output, "discriminator"))]
    return [checkpoints.save_keras(model, os.path.join(output, f"{name}.keras"))
            for name, model in models.items()]


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    try:
        for path in convert(FLAGS.input, FLAGS.output, FLAGS.to, FLAGS.do_lower_case):
            print(f"wrote {path}")
    except (ValueError, FileNotFoundError) as e:
        raise app.UsageError(str(e)) from None


if __name__ == "__main__":
    app.run(main)
