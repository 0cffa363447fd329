"""Checkpoint interop, with numerical parity against transformers: Hugging Face import and
export, TF1 checkpoints in the original's names (round trip and the original's full variable
list), SavedModel, and every mismatch message."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import BERT_VOCAB, REPO
from electra_tf import (checkpoint_names, checkpoints, hf_checkpoint, keras_saving, model_files,
                        modeling, tf1_checkpoint)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# A small config with embedding_size != hidden_size (the projection path).
HF = dict(vocab_size=120, embedding_size=24, hidden_size=32, num_hidden_layers=2,
          num_attention_heads=4, intermediate_size=48, max_position_embeddings=64,
          layer_norm_eps=1e-12)
HF_GENERATOR = dict(HF, hidden_size=16, num_attention_heads=2, intermediate_size=32)
TOLERANCE = 1e-4


def _inputs(seed=0, batch=4, length=12):
    """Random ids, two segments, and padding masks of several lengths."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, HF["vocab_size"], (batch, length))
    mask = np.ones_like(ids)
    for row, keep in enumerate([length, length - 5, 3, length - 1][:batch]):
        mask[row, keep:] = 0
        ids[row, keep:] = 0
    segments = (np.arange(length)[None] >= rng.integers(2, length - 2, (batch, 1))).astype(int)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments * mask}


def _hf_logits(model, inputs):
    with torch.no_grad():
        return model(input_ids=torch.tensor(inputs["input_ids"]),
                     attention_mask=torch.tensor(inputs["input_mask"]),
                     token_type_ids=torch.tensor(inputs["segment_ids"])).logits.numpy()


def _hf_models(tmp_path):
    torch.manual_seed(0)
    disc = transformers.ElectraForPreTraining(transformers.ElectraConfig(**HF)).eval()
    gen = transformers.ElectraForMaskedLM(transformers.ElectraConfig(**HF_GENERATOR)).eval()
    disc.save_pretrained(tmp_path / "hf_disc")
    gen.save_pretrained(tmp_path / "hf_gen")
    return disc, gen


def test_hf_import_gives_the_same_logits(tmp_path):
    disc, gen = _hf_models(tmp_path)
    ours_disc = checkpoints.load_pretrained(str(tmp_path / "hf_disc"))
    ours_gen = checkpoints.load_pretrained(str(tmp_path / "hf_gen"))
    assert ours_disc.format == "huggingface" and ours_disc.generator is None
    assert ours_disc.discriminator.encoder.num_attention_heads == 4  # from config.json
    for seed in range(3):
        inputs = _inputs(seed)
        np.testing.assert_allclose(ours_disc.discriminator(inputs)["logits"].numpy(),
                                   _hf_logits(disc, inputs), atol=TOLERANCE)
        np.testing.assert_allclose(ours_gen.generator(inputs)["logits"].numpy(),
                                   _hf_logits(gen, inputs), atol=TOLERANCE)


def test_hf_export_loads_in_transformers_with_the_same_logits(tmp_path):
    disc, gen = _hf_models(tmp_path)
    ours = checkpoints.load_pretrained(str(tmp_path / "hf_disc")).discriminator
    ours_gen = checkpoints.load_pretrained(str(tmp_path / "hf_gen")).generator
    # Change the weights so that the export, not the import, is what gets compared.
    for var in ours.weights + ours_gen.weights:
        var.assign(var + np.random.default_rng(1).normal(0, 0.01, var.shape).astype("float32"))
    hf_checkpoint.export_hf(ours, str(tmp_path / "out_disc"))
    hf_checkpoint.export_hf(ours_gen, str(tmp_path / "out_gen"))
    loaded, info = transformers.ElectraForPreTraining.from_pretrained(
        tmp_path / "out_disc", output_loading_info=True)
    loaded_gen, gen_info = transformers.ElectraForMaskedLM.from_pretrained(
        tmp_path / "out_gen", output_loading_info=True)
    for loading in (info, gen_info):
        assert not loading["missing_keys"] and not loading["unexpected_keys"], loading
    inputs = _inputs(5)
    np.testing.assert_allclose(_hf_logits(loaded.eval(), inputs),
                               ours(inputs)["logits"].numpy(), atol=TOLERANCE)
    np.testing.assert_allclose(_hf_logits(loaded_gen.eval(), inputs),
                               ours_gen(inputs)["logits"].numpy(), atol=TOLERANCE)


def _pair():
    """A discriminator and a generator sharing the embeddings, as pretraining builds them."""
    disc_sizes = checkpoint_names.EncoderSpec(vocab_size=120, embedding_size=24, hidden_size=32,
                                              num_hidden_layers=2, num_attention_heads=4,
                                              intermediate_size=48, max_position_embeddings=64)
    disc = modeling.ElectraDiscriminator(disc_sizes.encoder("electra"))
    gen_sizes = checkpoint_names.EncoderSpec(**{**disc_sizes.__dict__, "hidden_size": 16,
                                                "num_attention_heads": 2, "intermediate_size": 32})
    gen = modeling.ElectraGenerator(gen_sizes.encoder("generator"))
    disc.build(), gen.build()
    for var in disc.weights + gen.weights:  # not the initialiser's zeros and ones
        var.assign(np.random.default_rng(len(var.path)).normal(0, 0.1, var.shape))
    shared = ("word_embeddings", "position_embeddings", "token_type_embeddings")
    for name in shared:
        getattr(gen.encoder.embeddings, name).assign(getattr(disc.encoder.embeddings, name))
    for name in ("gamma", "beta"):
        getattr(gen.encoder.embeddings.layer_norm, name).assign(
            getattr(disc.encoder.embeddings.layer_norm, name))
    return disc, gen


def test_tf1_round_trip_is_bit_identical(tmp_path):
    disc, gen = _pair()
    prefix = tf1_checkpoint.write_tf1_checkpoint(str(tmp_path / "tf1" / "model.ckpt-100"), disc,
                                                 gen, global_step=100)
    names = dict(tf.train.list_variables(prefix))
    assert names["electra/encoder/layer_1/attention/self/query/kernel"] == [32, 32]
    assert names["generator/embeddings_project/kernel"] == [24, 16]
    assert not any(n.startswith("generator/embeddings/") for n in names)  # shared, as the original
    loaded = checkpoints.load_pretrained(str(tmp_path / "tf1"))
    assert loaded.format == "tf1" and loaded.global_step == 100
    for ours, theirs in ((disc, loaded.discriminator), (gen, loaded.generator)):
        mine, back = (checkpoint_names.model_variables(ours),
                      checkpoint_names.model_variables(theirs))
        assert set(mine) == set(back)
        for name in mine:
            assert np.array_equal(mine[name].numpy(), back[name].numpy()), name


def test_the_originals_electra_small_checkpoint_loads_with_every_variable_mapped(tmp_path):
    """A checkpoint with exactly the variables (names, shapes, Adam slots, global_step) that the
    original run_pretraining.py writes for ELECTRA-Small (tests/data fixture, derived from
    google-research/electra's code)."""
    fixture = json.loads((REPO / "tests" / "data" /
                          "electra_small_tf1_variables.json").read_text())["variables"]
    rng = np.random.default_rng(0)
    tensors = {v["name"]: (tf.constant(rng.normal(0, 0.02, v["shape"]).astype(np.float32))
                           if v["dtype"] == "float32" else tf.constant(7, tf.int64))
               for v in fixture}
    prefix = str(tmp_path / "model.ckpt-7")
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tensors[n] for n in names])
    loaded = checkpoints.load_pretrained(prefix)
    encoder, gen_encoder = loaded.discriminator.encoder, loaded.generator.encoder
    assert (encoder.hidden_size, encoder.num_hidden_layers, encoder.num_attention_heads,
            encoder.embedding_size, encoder.vocab_size) == (256, 12, 4, 128, 30522)
    assert (gen_encoder.hidden_size, gen_encoder.num_attention_heads,
            gen_encoder.intermediate_size) == (64, 1, 256)
    used = set(checkpoint_names.model_variables(loaded.discriminator)) | set(
        checkpoint_names.model_variables(loaded.generator))
    model_names = {v["name"] for v in fixture
                   if not v["name"].endswith(("adam_m", "adam_v")) and v["name"] != "global_step"}
    assert used == model_names  # every variable mapped, in both directions
    query = "electra/encoder/layer_11/attention/self/query/kernel"
    np.testing.assert_array_equal(
        checkpoint_names.model_variables(loaded.discriminator)[query].numpy(),
        tensors[query].numpy())
    assert loaded.global_step == 7


def test_saved_model_runs_without_this_package(tmp_path):
    disc, _ = _pair()
    keras_saving.export_saved_model(disc, str(tmp_path / "saved"))
    inputs = _inputs(2)
    expected = disc(inputs)
    np.save(tmp_path / "inputs.npy", np.stack([inputs[k] for k in
                                               ("input_ids", "input_mask", "segment_ids")]))
    script = f"""
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "electra_tf":
            raise ImportError("electra_tf must not be needed")
sys.meta_path.insert(0, Block())
import numpy as np, tensorflow as tf
ids, mask, seg = np.load({str(tmp_path / 'inputs.npy')!r}).astype("int32")
loaded = tf.saved_model.load({str(tmp_path / 'saved')!r})
out = loaded.signatures["serving_default"](input_ids=ids, input_mask=mask, segment_ids=seg)
emb = loaded.signatures["sequence_embeddings"](input_ids=ids, input_mask=mask, segment_ids=seg)
np.save({str(tmp_path / 'logits.npy')!r}, out["logits"].numpy())
np.save({str(tmp_path / 'sequence.npy')!r}, emb["sequence_output"].numpy())
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=str(tmp_path), env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), expected["logits"].numpy(),
                               atol=1e-5)
    np.testing.assert_allclose(np.load(tmp_path / "sequence.npy"),
                               expected["sequence_output"].numpy(), atol=1e-5)


def test_mismatches_fail_with_the_names(tmp_path):
    disc, gen = _pair()
    prefix = tf1_checkpoint.write_tf1_checkpoint(str(tmp_path / "a" / "model.ckpt"), disc, gen)
    weights = tf1_checkpoint.read_tf1_checkpoint(prefix)
    # A variable the model needs is missing.
    broken = {k: v for k, v in weights.items()
              if k != "electra/encoder/layer_1/output/dense/bias"}
    with pytest.raises(ValueError, match=r"missing \['electra/encoder/layer_1/output/dense/bias'"):
        checkpoint_names.build_models(broken, "ckpt-a")
    # A variable nothing takes.
    extra = {**weights, "electra/pooler/dense/kernel": np.zeros((32, 32), np.float32)}
    with pytest.raises(ValueError, match=r"1 variables map to nothing .*electra/pooler/dense"):
        checkpoint_names.build_models(extra, "ckpt-b")
    # A shape that differs.
    wrong = dict(weights)
    wrong["discriminator_predictions/dense/kernel"] = np.zeros((32, 31), np.float32)
    with pytest.raises(ValueError, match=r"discriminator_predictions/dense/kernel \(32, 31\) vs "
                                         r"\(32, 32\)"):
        checkpoint_names.build_models(wrong, "ckpt-c")
    # Not an ELECTRA checkpoint at all / nothing at the path.
    with pytest.raises(ValueError, match="holds no ELECTRA discriminator"):
        checkpoint_names.build_models({"dense/kernel": np.zeros((2, 2))}, "ckpt-d")
    with pytest.raises(FileNotFoundError, match="no pretrained ELECTRA found"):
        checkpoints.load_pretrained(str(tmp_path / "nothing"))
    # Hugging Face weights with a key ELECTRA does not have.
    _hf_models(tmp_path)
    state, config = hf_checkpoint.read_hf_state(str(tmp_path / "hf_disc"))
    state["classifier.weight"] = np.zeros((2, 32), np.float32)
    with pytest.raises(ValueError, match=r"1 weights map to nothing in ELECTRA: "
                                         r"\['classifier.weight'\]"):
        hf_checkpoint.hf_to_tf1(state, config, "hf")


def _tiny_release(tmp_path, with_generator: bool):
    """A TF1 checkpoint in the original's names for conftest's TINY_MODEL sizes (a release
    such as electra_small, or with the generator as the original's run writes it)."""
    from conftest import tiny_config
    config = tiny_config(vocab_size=30522)
    bert, gen_bert = config.bert_config(), config.generator_bert_config()
    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size", "max_position_embeddings", "type_vocab_size")
    disc = modeling.ElectraDiscriminator(checkpoint_names.EncoderSpec(
        embedding_size=config.embedding_size, **{k: bert[k] for k in keys}).encoder("electra"))
    gen = modeling.ElectraGenerator(checkpoint_names.EncoderSpec(
        embedding_size=config.embedding_size, **{k: gen_bert[k] for k in keys})
        .encoder("generator"))
    disc.build(), gen.build()
    for var in disc.weights + gen.weights:
        var.assign(np.random.default_rng(len(var.path)).normal(0, 0.05, var.shape))
    prefix = tf1_checkpoint.write_tf1_checkpoint(str(tmp_path / "release" / "model.ckpt-1000"),
                                                 disc, gen if with_generator else None, 1000)
    shutil.copy(BERT_VOCAB, tmp_path / "release" / "vocab.txt")  # as Google's releases ship it
    return prefix, disc


@pytest.mark.slow
@pytest.mark.parametrize("with_generator", [True, False])
def test_pretraining_continues_from_a_tf1_release(data_dir, tmp_path, with_generator):
    from conftest import TINY_MODEL, run_script
    prefix, disc = _tiny_release(tmp_path, with_generator)
    hparams = {**TINY_MODEL, "num_train_steps": 1, "save_checkpoints_steps": 1,
               "init_checkpoint": os.path.dirname(prefix)}
    result = run_script("run_pretraining.py", f"--data_dir={data_dir}", "--model_name=cont",
                        f"--hparams={json.dumps(hparams)}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "initialised the discriminator from" in result.stdout
    assert ("initialised the generator from" in result.stdout) == with_generator
    assert ("the generator starts from fresh weights" in result.stdout) != with_generator
    # Step 0 trains at learning rate 0: the exported discriminator is the release's.
    exported = checkpoints.load_pretrained(str(data_dir / "models" / "cont"))
    for name, var in checkpoint_names.model_variables(disc).items():
        np.testing.assert_array_equal(
            checkpoint_names.model_variables(exported.discriminator)[name].numpy(), var.numpy())
    if not with_generator:
        return
    # Resumed without restating init_checkpoint, the run still records where it started.
    result = run_script("run_pretraining.py", f"--data_dir={data_dir}", "--model_name=cont",
                        f"--hparams={json.dumps({**TINY_MODEL, 'num_train_steps': 2})}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "restored step 1" in result.stdout and "initialised" not in result.stdout
    run_dir = data_dir / "models" / "cont"
    saved = json.loads((run_dir / "pretrain_config.json").read_text())
    assert saved["init_checkpoint"] == os.path.dirname(prefix)
    assert json.loads((run_dir / "hparam_changes.json").read_text()) == [
        {"step": 1, "changed": {"num_train_steps": [1, 2]}}]


def test_finetuning_starts_from_a_tf1_checkpoint_and_a_hf_directory(tmp_path):
    from electra_tf.finetuning.model import load_pretrained_encoder
    prefix, disc = _tiny_release(tmp_path, with_generator=True)
    encoder = modeling.Encoder(**{**disc.encoder.get_config(), "name": "electra"})
    assert "(tf1)" in load_pretrained_encoder(encoder, os.path.dirname(prefix))
    np.testing.assert_array_equal(encoder.transformer_layers[1].output_dense.kernel.numpy(),
                                  disc.encoder.transformer_layers[1].output_dense.kernel.numpy())
    hf_checkpoint.export_hf(disc, str(tmp_path / "hf"))
    other = modeling.Encoder(**{**disc.encoder.get_config(), "name": "electra"})
    assert "(huggingface)" in load_pretrained_encoder(other, str(tmp_path / "hf"))
    np.testing.assert_array_equal(other.embeddings.word_embeddings.numpy(),
                                  disc.encoder.embeddings.word_embeddings.numpy())
    bigger = modeling.Encoder(**{**disc.encoder.get_config(), "name": "electra",
                                 "num_hidden_layers": 3})
    with pytest.raises(ValueError, match="num_hidden_layers 2 in the checkpoint, 3 in the config"):
        load_pretrained_encoder(bigger, os.path.dirname(prefix))


@pytest.mark.slow
def test_convert_checkpoint_cli_round_trips_through_every_format(tmp_path):
    """TF1 release -> hf -> keras -> tf1: the discriminator's weights survive unchanged, and the
    CLI refuses a non-empty output directory."""
    from conftest import run_script
    prefix, disc = _tiny_release(tmp_path, with_generator=True)
    steps = [(os.path.dirname(prefix), "hf", "hf_out"),
             (str(tmp_path / "hf_out" / "discriminator"), "keras", "keras_out"),
             (str(tmp_path / "keras_out"), "tf1", "tf1_out"),
             (str(tmp_path / "tf1_out"), "saved_model", "served")]
    for source, to, out in steps:
        result = run_script("convert_checkpoint.py", f"--input={source}",
                            f"--output={tmp_path / out}", f"--to={to}")
        assert result.returncode == 0, result.stderr[-2000:]
    final = checkpoints.load_pretrained(str(tmp_path / "tf1_out"))
    for name, var in checkpoint_names.model_variables(disc).items():
        np.testing.assert_array_equal(
            checkpoint_names.model_variables(final.discriminator)[name].numpy(), var.numpy())
    assert tf.io.gfile.exists(str(tmp_path / "served" / "discriminator" / "saved_model.pb"))
    result = run_script("convert_checkpoint.py", f"--input={os.path.dirname(prefix)}",
                        f"--output={tmp_path / 'hf_out'}", "--to=hf", expect_failure=True)
    assert result.returncode != 0 and "is not empty" in result.stderr


@pytest.mark.parametrize("kind", ["electra_model_bin", "bert_model"])
def test_plain_encoders_load_with_the_same_hidden_states(tmp_path, kind):
    """transformers' bare ElectraModel (from a pytorch_model.bin, read with torch) and BertModel
    (its pooler skipped) load into our encoder: the sequence output is the same; the
    replaced-token head, which they lack, starts fresh."""
    torch.manual_seed(0)
    if kind == "bert_model":
        config = transformers.BertConfig(**{k: v for k, v in HF.items()
                                            if k != "embedding_size"})
        model = transformers.BertModel(config).eval()
        model.save_pretrained(tmp_path / kind)
    else:
        model = transformers.ElectraModel(transformers.ElectraConfig(**HF)).eval()
        # The hub's older repositories ship a pickled state dict.
        (tmp_path / kind).mkdir()
        model.config.save_pretrained(tmp_path / kind)
        torch.save(model.state_dict(), tmp_path / kind / "pytorch_model.bin")
    loaded = checkpoints.load_pretrained(str(tmp_path / kind))
    inputs = _inputs(3)
    with torch.no_grad():
        expected = model(input_ids=torch.tensor(inputs["input_ids"]),
                         attention_mask=torch.tensor(inputs["input_mask"]),
                         token_type_ids=torch.tensor(inputs["segment_ids"])
                         ).last_hidden_state.numpy()
    got = loaded.discriminator(inputs)["sequence_output"].numpy()
    np.testing.assert_allclose(got, expected, atol=TOLERANCE)


# ------------------------------------------------------------------ what shapes do not tell

def test_untied_generator_embeddings_go_to_tf1_under_generator_and_reload(tmp_path):
    from conftest import tiny_config
    from electra_tf import pretraining
    model = pretraining.PretrainingModel(tiny_config(untied_generator_embeddings=True),
                                         pretraining.SpecialIds())
    model.build()
    disc, gen = model.discriminator_model(), model.generator_model()
    prefix = tf1_checkpoint.write_tf1_checkpoint(str(tmp_path / "model.ckpt-5"), disc, gen, 5)
    names = dict(tf.train.list_variables(prefix))
    # As the original: the generator's own block, its hidden size (8) wide.
    assert names["generator/embeddings/word_embeddings"] == [30522, 8]
    assert names["electra/embeddings/word_embeddings"] == [30522, 16]
    loaded = checkpoints.load_pretrained(str(tmp_path))
    for ours, theirs, scope in ((disc, loaded.discriminator, "electra"),
                                (gen, loaded.generator, "generator")):
        mine, back = (checkpoint_names.model_variables(m, scope) for m in (ours, theirs))
        assert set(mine) == set(back)
        for name in mine:
            np.testing.assert_array_equal(mine[name].numpy(), back[name].numpy(), err_msg=name)


def test_hf_activation_and_layer_norm_epsilon_are_honoured(tmp_path):
    torch.manual_seed(0)
    config = transformers.ElectraConfig(**{**HF, "hidden_act": "relu", "layer_norm_eps": 1e-5})
    hf = transformers.ElectraForPreTraining(config).eval()
    hf.save_pretrained(tmp_path / "relu")
    ours = checkpoints.load_pretrained(str(tmp_path / "relu")).discriminator
    encoder = ours.encoder
    assert (encoder.hidden_act, encoder.layer_norm_eps) == ("relu", 1e-5)
    assert encoder.transformer_layers[1].output_layer_norm.epsilon == 1e-5
    assert encoder.embeddings.layer_norm.epsilon == 1e-5
    for seed in range(2):
        inputs = _inputs(seed)
        np.testing.assert_allclose(ours(inputs)["logits"].numpy(), _hf_logits(hf, inputs),
                                   atol=TOLERANCE)
    hf_checkpoint.export_hf(ours, str(tmp_path / "back"))
    written = json.loads((tmp_path / "back" / "config.json").read_text())
    assert (written["hidden_act"], written["layer_norm_eps"]) == ("relu", 1e-5)
    # What this encoder does not compute fails, naming the file and the value.
    transformers.ElectraForPreTraining(transformers.ElectraConfig(
        **{**HF, "hidden_act": "gelu_new"})).save_pretrained(tmp_path / "tanh_gelu")
    with pytest.raises(ValueError, match=r"config.json: hidden_act 'gelu_new' is not supported"):
        checkpoints.load_pretrained(str(tmp_path / "tanh_gelu"))


def test_layer_norm_eps_is_a_model_hparam():
    from conftest import TINY_MODEL, tiny_config
    from electra_tf import pretraining
    overrides = {**TINY_MODEL["model_hparam_overrides"], "layer_norm_eps": 1e-5}
    config = tiny_config(model_hparam_overrides=overrides)
    assert tiny_config().bert_config()["layer_norm_eps"] == 1e-12  # the original's
    model = pretraining.PretrainingModel(config, pretraining.SpecialIds())
    model.build()
    norms = [layer for layer in model._flatten_layers()
             if isinstance(layer, modeling.LayerNorm)]
    assert len(norms) == 10 and {norm.epsilon for norm in norms} == {1e-5}


def _heads_model():
    """A discriminator with 4 heads where hidden / 64 gives 1."""
    sizes = checkpoint_names.EncoderSpec(vocab_size=120, embedding_size=24, hidden_size=32,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=48, max_position_embeddings=64)
    disc = modeling.ElectraDiscriminator(sizes.encoder("electra"))
    disc.build()
    for var in disc.weights:
        var.assign(np.random.default_rng(len(var.path)).normal(0, 0.3, var.shape))
    return disc


def test_tf1_head_count_comes_from_the_saved_config_or_an_argument_or_fails(tmp_path):
    from conftest import tiny_config, usage_error
    disc = _heads_model()
    tf1_checkpoint.write_tf1_checkpoint(str(tmp_path / "a" / "model.ckpt-1"), disc)
    inputs = _inputs(1)
    expected = disc(inputs)["logits"].numpy()
    loaded = checkpoints.load_pretrained(str(tmp_path / "a"))  # from electra_config.json
    assert loaded.discriminator.encoder.num_attention_heads == 4
    np.testing.assert_allclose(loaded.discriminator(inputs)["logits"].numpy(), expected,
                               atol=1e-5)
    os.remove(tmp_path / "a" / tf1_checkpoint.ARCHITECTURE_FILE)
    with pytest.raises(ValueError, match=r"the number of attention heads does not show in a TF1 "
                                         r"checkpoint, and its hidden size 32 is not a multiple"):
        checkpoints.load_pretrained(str(tmp_path / "a"))
    given = checkpoints.load_pretrained(str(tmp_path / "a"), num_attention_heads=4)
    np.testing.assert_allclose(given.discriminator(inputs)["logits"].numpy(), expected,
                               atol=1e-5)
    vocab = BERT_VOCAB.read_text().splitlines()[:120]  # the model's 120 tokens
    (tmp_path / "a" / "vocab.txt").write_text("\n".join(vocab) + "\n")
    import convert_checkpoint

    assert "give num_attention_heads" in usage_error(
        convert_checkpoint, f"--input={tmp_path / 'a'}", f"--output={tmp_path / 'hf'}", "--to=hf")
    convert_checkpoint.convert(str(tmp_path / "a"), str(tmp_path / "hf"), "hf",
                               num_attention_heads=4)
    assert json.loads((tmp_path / "hf" / "discriminator" / "config.json").read_text())[
        "num_attention_heads"] == 4
    # A run's pretrain_config.json beside the checkpoint says it too.
    prefix, _ = _tiny_release(tmp_path, with_generator=True)
    os.remove(os.path.join(os.path.dirname(prefix), tf1_checkpoint.ARCHITECTURE_FILE))
    with open(os.path.join(os.path.dirname(prefix), "pretrain_config.json"), "w") as f:
        f.write(tiny_config().to_json())
    release = checkpoints.load_pretrained(os.path.dirname(prefix))
    assert release.discriminator.encoder.num_attention_heads == 2
    assert release.generator.encoder.num_attention_heads == 1


def test_a_damaged_keras_file_or_an_output_that_is_a_file_is_named(tmp_path, data_dir):
    from convert_checkpoint import convert
    from electra_tf import config as config_lib
    from electra_tf.finetuning import config as finetuning_config
    from electra_tf.hparam_parsing import ConfigError

    model_dir = tmp_path / "old"
    model_dir.mkdir()
    damaged = model_dir / "discriminator.keras"
    for content, why in ((b"PK\x03\x04" + b"cut short " * 30, "File is not a zip file"),
                         (b"", "")):
        damaged.write_bytes(content)
        message = (rf"{damaged} is damaged, not a readable \.keras archive \({why}.*\): export "
                   "it again")
        with pytest.raises(ValueError, match=f"^{message}"):
            checkpoints.load_pretrained(str(model_dir))
        for from_hparams, hparams in ((config_lib.from_hparams, {}),
                                      (finetuning_config.from_hparams, {"task_names": ["sst"]})):
            with pytest.raises(ConfigError, match=f"^hparam 'init_checkpoint': {message}"):
                from_hparams("m", str(data_dir), {**hparams, "init_checkpoint": str(model_dir)})
    output = tmp_path / "out.txt"
    output.write_text("keep me")
    with pytest.raises(ValueError, match=rf"^--output {output} is a file; give a new directory$"):
        convert(str(model_dir), str(output), "hf")
    assert output.read_text() == "keep me"
    with pytest.raises(ValueError, match=rf"^--output {tmp_path} is not empty"):  # before reading
        convert(str(model_dir), str(tmp_path), "hf")


# ------------------------------------------------------------------ exports carry the tokenizer

def _run_output(tmp_path):
    """DATA_DIR/models/run as run_pretraining leaves it without the tokenizer beside the
    models: the vocabulary only at DATA_DIR/vocab.txt."""
    from conftest import tiny_config
    from electra_tf import pretraining
    data_dir = tmp_path / "data"
    model_dir = data_dir / "models" / "run"
    model_dir.mkdir(parents=True)
    shutil.copy(BERT_VOCAB, data_dir / "vocab.txt")
    config = tiny_config(data_dir)
    (model_dir / "pretrain_config.json").write_text(config.to_json())
    model = pretraining.PretrainingModel(config, pretraining.SpecialIds())
    model.build()
    pretraining.export(model, str(model_dir), None, True)
    return data_dir, model_dir, model


def test_every_export_of_a_run_carries_a_tokenizer_transformers_loads(tmp_path):
    from convert_checkpoint import convert
    from electra_tf.tokenization import WordPieceTokenizer
    data_dir, model_dir, _ = _run_output(tmp_path)
    assert not (model_dir / "vocab.txt").exists()
    for to in ("hf", "tf1", "keras", "saved_model"):
        convert(str(model_dir), str(tmp_path / to), to)
    for directory in (tmp_path / "hf" / "discriminator", tmp_path / "hf" / "generator",
                      tmp_path / "tf1", tmp_path / "keras",
                      tmp_path / "saved_model" / "discriminator" / "assets.extra"):
        assert (directory / "vocab.txt").read_bytes() == BERT_VOCAB.read_bytes(), directory
        assert json.loads((directory / "tokenizer_config.json").read_text())["do_lower_case"]
    text = ["Hello, World! Tokenizing ELECTRA's vocabulary: naïve café."]
    ours = [101, *WordPieceTokenizer(str(BERT_VOCAB)).tokenize_to_ids(text)[0], 102]
    for cls in (transformers.ElectraTokenizer, transformers.ElectraTokenizerFast):
        tokenizer = cls.from_pretrained(tmp_path / "hf" / "discriminator")
        assert tokenizer(text[0])["input_ids"] == ours, cls
        assert len(tokenizer) == 30522 and tokenizer.model_max_length == 512
    # The exported models reload with their vocabulary found beside them.
    assert checkpoints.load_pretrained(str(tmp_path / "tf1")).vocab_file == \
        str(tmp_path / "tf1" / "vocab.txt")


def test_an_export_without_a_vocabulary_fails_clearly(tmp_path):
    import convert_checkpoint
    from conftest import usage_error

    data_dir, model_dir, _ = _run_output(tmp_path)
    os.remove(data_dir / "vocab.txt")
    assert "pass --vocab_file" in usage_error(
        convert_checkpoint, f"--input={model_dir}", f"--output={tmp_path / 'hf'}", "--to=hf")
    assert not (tmp_path / "hf").exists()
    convert_checkpoint.convert(str(model_dir), str(tmp_path / "hf"), "hf",
                               vocab_file=str(BERT_VOCAB))
    assert (tmp_path / "hf" / "discriminator" / "vocab.txt").exists()


# ------------------------------------------------------------------ the pretrained architecture

def test_finetuning_takes_the_architecture_of_a_run_with_no_size_hparams(tmp_path):
    from electra_tf.finetuning import config as finetuning_config
    from electra_tf.finetuning import trainer
    from electra_tf.hparam_parsing import ConfigError
    data_dir, model_dir, model = _run_output(tmp_path)
    config = finetuning_config.from_hparams("run", str(data_dir), {"task_names": ["sst"]})
    encoder = trainer.build_model(config, trainer.make_tasks(config)).encoder
    ours = checkpoint_names.EncoderSpec.of(encoder)
    assert ours == checkpoint_names.EncoderSpec.of(model.encoder)
    assert ours.num_attention_heads == 2  # hidden / 64 would give 1
    for hparams, message in [
            ({"model_hparam_overrides": {"num_attention_heads": 1}},
             "num_attention_heads 2 in the checkpoint, 1 from the hparams"),
            ({"model_size": "base"}, "hidden_size 32 in the checkpoint, 768 from model_size "
                                     "'base'"),
            ({"embedding_size": 24}, "embedding_size 16 in the checkpoint, 24 from the hparams")]:
        with pytest.raises(ConfigError, match=message):
            finetuning_config.from_hparams("run", str(data_dir), {"task_names": ["sst"],
                                                                  **hparams})


@pytest.mark.parametrize("hidden, layers, size, learning_rate", [
    (256, 12, "small", 1e-4), (1024, 24, "large", 5e-5)])
def test_finetuning_picks_the_size_preset_of_a_hf_model(tmp_path, hidden, layers, size,
                                                        learning_rate):
    """Only config.json is read to resolve the hparams (the weights load later)."""
    from electra_tf.finetuning import config as finetuning_config
    (tmp_path / "hub").mkdir()
    (tmp_path / "hub" / "config.json").write_text(json.dumps(
        transformers.ElectraConfig(hidden_size=hidden, num_hidden_layers=layers,
                                   num_attention_heads=hidden // 64,
                                   intermediate_size=4 * hidden, embedding_size=128).to_dict()))
    shutil.copy(BERT_VOCAB, tmp_path / "vocab.txt")
    config = finetuning_config.from_hparams("m", str(tmp_path), {
        "task_names": ["mnli"], "init_checkpoint": str(tmp_path / "hub")})
    assert (config.model_size, config.learning_rate, config.embedding_size) == \
        (size, learning_rate, 128)
    assert config.bert_config()["num_hidden_layers"] == layers


def test_continued_pretraining_takes_the_checkpoints_architecture(tmp_path, data_dir):
    from conftest import TINY_MODEL
    from electra_tf import config as config_lib
    from electra_tf.hparam_parsing import ConfigError
    prefix, disc = _tiny_release(tmp_path, with_generator=True)
    release = os.path.dirname(prefix)
    config = config_lib.from_hparams("cont", str(data_dir), {"init_checkpoint": release})
    assert config.model_size == "small"  # no preset has hidden 32: the default stays
    assert checkpoint_names.EncoderSpec(
        **{k: v for k, v in config.bert_config().items()
           if k in checkpoint_names.EncoderSpec.__dataclass_fields__},
        embedding_size=config.embedding_size) == \
        checkpoint_names.EncoderSpec.of(disc.encoder)
    assert config.generator_bert_config()["hidden_size"] == 8
    with pytest.raises(ConfigError, match="embedding_size 16 in the checkpoint, 24"):
        config_lib.from_hparams("cont", str(data_dir), {"init_checkpoint": release,
                                                        "embedding_size": 24})
    with pytest.raises(ConfigError, match="generator does not match"):
        config_lib.from_hparams("cont", str(data_dir), {**TINY_MODEL, "init_checkpoint": release,
                                                        "generator_hidden_size": 0.5})


def _trained_state(data_dir, **hparams):
    """A run's state at step 1000 whose weights and moments all hold distinct values, as
    training leaves them; and its config (DATA_DIR/models/tiny)."""
    from conftest import tiny_config
    from electra_tf import pretraining
    config = tiny_config(data_dir, num_train_steps=2000, **hparams)
    trained = pretraining.create_state(config, pretraining.SpecialIds(),
                                       tf.distribute.get_strategy())
    rng = np.random.default_rng(0)
    for variable in trained.model.trainable_variables:
        for target in (variable, *trained.optimizer.moments(variable)):
            target.assign(rng.uniform(0.1, 1.0, target.shape).astype("float32"))
    trained.optimizer.iterations.assign(1000)
    return trained, config


def _trained_run(data_dir, **hparams):
    """_trained_state saved as run_pretraining.py leaves a run mid-way: its pretrain_config.json
    and ckpt-1000 in DATA_DIR/models/tiny."""
    from electra_tf import resume
    trained, config = _trained_state(data_dir, **hparams)
    os.makedirs(config.model_dir)
    with open(os.path.join(config.model_dir, "pretrain_config.json"), "w") as f:
        f.write(config.to_json())
    resume.Checkpointer(trained.checkpoint(), config.model_dir, trained.optimizer.iterations,
                        2).save(1000)
    return trained, config


def _trained_run_in_tf1(data_dir, directory, **hparams):
    """_trained_state written as the original's run_pretraining.py saves a run at step 1000;
    its config; the checkpoint's prefix."""
    trained, config = _trained_state(data_dir, **hparams)
    model = trained.model
    generator = model.generator_model() if model.generator is not model.encoder else None
    prefix = tf1_checkpoint.write_tf1_checkpoint(
        str(directory / "model.ckpt-1000"), model.discriminator_model(), generator, 1000,
        trained.optimizer)
    return trained, config, prefix


def test_the_weights_reader_leaves_every_optimizer_slot_on_disk(tmp_path):
    """The original's AdamWeightDecayOptimizer slots and a stock tf.compat.v1 Adam's are not
    weights: read_tf1_checkpoint leaves them (only init_optimizer_state reads slots)."""
    stored = {"electra/x": 1.0, "electra/x/adam_m": 2.0, "electra/x/adam_v": 3.0,
              "electra/x/Adam": 4.0, "electra/x/Adam_1": 5.0, "beta1_power": 0.9,
              "beta2_power": 0.99, "global_step": 7.0}
    prefix = str(tmp_path / "model.ckpt-7")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=list(stored), shape_and_slices=[""] * 8,
                      tensors=[tf.constant(v) for v in stored.values()])
    assert tf1_checkpoint.read_tf1_checkpoint(prefix) == {"electra/x": 1.0, "global_step": 7.0}


@pytest.mark.parametrize("sharing", ["tied", "untied"])
def test_init_optimizer_state_counts_on_from_a_tf1_runs_step_and_adam_slots(
        data_dir, tmp_path, sharing):
    """The original's resumed run, in a new run: a TF1 checkpoint with its global step and Adam
    slots, under the original's names, gives the run its weights, its step and both moments
    of every variable it trains."""
    from electra_tf import pretraining
    trained, config, prefix = _trained_run_in_tf1(data_dir, tmp_path / "run",
                                                  embedding_sharing=sharing)
    stored = dict(tf.train.list_variables(prefix))
    assert {"global_step", "electra/encoder/layer_0/attention/self/query/kernel/adam_m",
            "electra/embeddings/word_embeddings/adam_v", "generator_predictions/output_bias/adam_m",
            "discriminator_predictions/dense/bias/adam_m"} <= set(stored)
    assert ("generator/embeddings/word_embeddings/adam_m" in stored) == (sharing == "untied")
    # The weights' reader leaves the slots on disk: only the optimizer reads them.
    read = tf1_checkpoint.read_tf1_checkpoint(prefix)
    assert "global_step" in read and not any(name.endswith(("/adam_m", "/adam_v"))
                                             for name in read)

    state = pretraining.create_state(config, pretraining.SpecialIds(),
                                     tf.distribute.get_strategy())
    done = pretraining.initialize_from(state.model, str(tmp_path / "run"), state.optimizer)
    assert done[0] == f"initialised the discriminator from {prefix} (tf1)"
    assert done[-1] == (f"continuing from step 1000 of {prefix}, with the Adam slots of all "
                        f"{len(state.model.trainable_variables)} variables")
    assert int(state.optimizer.iterations) == 1000
    # The schedule is where the original's would be: halfway down its linear decay.
    assert float(state.optimizer.learning_rate) == pytest.approx(config.learning_rate / 2)
    pairs = zip(trained.model.trainable_variables, state.model.trainable_variables, strict=True)
    for ours, theirs in pairs:
        assert ours.path == theirs.path
        np.testing.assert_array_equal(theirs.numpy(), ours.numpy(), err_msg=ours.path)
        for a, b in zip(trained.optimizer.moments(ours), state.optimizer.moments(theirs)):
            np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=ours.path)


@pytest.mark.parametrize("hparams", [{"embedding_sharing": "tied"},
                                     {"embedding_sharing": "untied"},
                                     {"uniform_generator": True},
                                     {"objective": "electra_15"}])
def test_a_runs_tf1_export_with_its_optimizer_state_is_continued_whole(data_dir, tmp_path,
                                                                        hparams):
    """convert_checkpoint --to tf1 --optimizer_state of a run mid-way writes what the original's
    run_pretraining.py saves (weights, global_step, every trained variable's adam_m and adam_v
    under the original's names), and init_optimizer_state takes back the very state."""
    from convert_checkpoint import convert
    from electra_tf import pretraining
    trained, config = _trained_run(data_dir, **hparams)
    with pytest.raises(FileNotFoundError, match="is a run_pretraining directory without its "
                       "exported models .* convert_checkpoint.py --to tf1 --optimizer_state$"):
        checkpoints.load_pretrained(config.model_dir)
    out = tmp_path / "out"
    written = convert(config.model_dir, str(out), "tf1", optimizer_state=True)
    assert written[0] == str(out / "model.ckpt-1000")
    assert sorted(os.listdir(out)) == sorted([
        "checkpoint", "electra_config.json", "model.ckpt-1000.data-00000-of-00001",
        "model.ckpt-1000.index", "tokenizer_config.json", "vocab.txt"])
    stored = dict(tf.train.list_variables(written[0]))
    assert ("generator/embeddings/word_embeddings/adam_m" in stored) == \
        (hparams.get("embedding_sharing") == "untied")
    assert ("generator_predictions/output_bias/adam_m" in stored) == \
        ("uniform_generator" not in hparams)

    state = pretraining.create_state(config, pretraining.SpecialIds(),
                                     tf.distribute.get_strategy())
    done = pretraining.initialize_from(state.model, str(out), state.optimizer)
    assert done[-1] == (f"continuing from step 1000 of {written[0]}, with the Adam slots of "
                        f"all {len(state.model.trainable_variables)} variables")
    for ours, theirs in zip(trained.model.trainable_variables, state.model.trainable_variables,
                            strict=True):
        np.testing.assert_array_equal(theirs.numpy(), ours.numpy(), err_msg=ours.path)
        for a, b in zip(trained.optimizer.moments(ours), state.optimizer.moments(theirs)):
            np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=ours.path)


@pytest.mark.parametrize("hparams, error", [
    ({"optimizer": "lamb"}, "trained with optimizer 'lamb'; the original's checkpoints "
                            "hold AdamWeightDecay's slots"),
    ({"embedding_sharing": "gdes"}, "trained with embedding_sharing 'gdes'"),
    ({"objective": "mlm"}, "objective 'mlm' trains one network"),
    ({"objective": "replace_mlm"}, r"\d+ of the variables objective 'replace_mlm' trains have no "
                                   "name in the original's checkpoints"),
])
def test_a_run_the_originals_checkpoint_cannot_hold_is_refused_before_writing(
        data_dir, tmp_path, hparams, error):
    from convert_checkpoint import convert
    _, config = _trained_run(data_dir, **hparams)
    with pytest.raises(ValueError, match=f"^{config.model_dir}: .*{error}.*: convert it without "
                                         "the optimizer state"):
        convert(config.model_dir, str(tmp_path / "out"), "tf1", optimizer_state=True)
    assert not (tmp_path / "out").exists()


def test_a_runs_optimizer_state_export_names_what_is_missing_or_damaged(data_dir, tmp_path):
    from conftest import tiny_config
    from convert_checkpoint import convert
    out = str(tmp_path / "out")
    with pytest.raises(ValueError, match="^--to hf: --optimizer_state writes the original's Adam "
                                         "slots, which only --to tf1 holds"):
        convert(str(data_dir), out, "hf", optimizer_state=True)
    model_dir = tiny_config(data_dir).model_dir
    with pytest.raises(FileNotFoundError, match=f"^{model_dir} is not a directory: a run's "
                                                "optimizer state is read from the folder"):
        convert(model_dir, out, "tf1", optimizer_state=True)
    os.makedirs(model_dir)
    with pytest.raises(FileNotFoundError, match=f"^{model_dir} holds no pretrain_config.json"):
        convert(model_dir, out, "tf1", optimizer_state=True)
    config_file = os.path.join(model_dir, "pretrain_config.json")
    with open(config_file, "w") as f:
        f.write('{"objective": "electra", ')
    with pytest.raises(ValueError, match=f"^{config_file} is damaged \\("):
        convert(model_dir, out, "tf1", optimizer_state=True)
    with open(config_file, "w") as f:
        f.write(tiny_config(data_dir).to_json())
    with pytest.raises(FileNotFoundError, match=f"^{model_dir} holds no checkpoint"):
        convert(model_dir, out, "tf1", optimizer_state=True)
    assert not os.path.exists(out)


@pytest.mark.slow
def test_init_optimizer_state_under_two_replicas(data_dir, tmp_path):
    """Taken by a mirrored run: its first step from step 1000 moves each Adam moment from the
    TF1 checkpoint's, not from zero (m = 0.9 m0 + 0.1 g with |g| at most 1 after clipping; the
    moments were drawn from [0.1, 1))."""
    from conftest import TINY_MODEL, run_script
    from electra_tf import pretraining, resume
    trained, config, prefix = _trained_run_in_tf1(data_dir, tmp_path / "release")
    out = run_script(
        "run_pretraining.py", "--data_dir", str(data_dir), "--model_name", "mirrored",
        "--num_cpu_devices", "2", "--hparams", json.dumps({
            **TINY_MODEL, "strategy": "mirrored", "num_train_steps": 1001,
            "iterations_per_loop": 1, "init_checkpoint": str(tmp_path / "release"),
            "init_optimizer_state": True})).stdout
    assert "with 2 replica(s)" in out and "continuing from step 1000 of" in out
    state = pretraining.create_state(config, pretraining.SpecialIds(),
                                     tf.distribute.get_strategy())
    run = data_dir / "models" / "mirrored"
    assert resume.checkpoint_steps(str(run))[-1] == 1001
    state.checkpoint().restore(str(run / "ckpt-1001")).expect_partial()
    assert int(state.optimizer.iterations) == 1001
    for before, after in zip(trained.model.trainable_variables,
                             state.model.trainable_variables, strict=True):
        (m0, v0), (m1, v1) = ([t.numpy() for t in trained.optimizer.moments(before)],
                              [t.numpy() for t in state.optimizer.moments(after)])
        assert np.abs(m1 - 0.9 * m0).max() <= 0.1 + 1e-6, after.path
        assert np.abs(v1 - 0.999 * v0).max() <= 0.001 + 1e-6, after.path
        assert (m1 != m0).any(), after.path  # the step was taken, not skipped


def test_init_optimizer_state_is_refused_where_there_is_no_whole_state_to_take(
        data_dir, tmp_path):
    """Moments at zero would make the continued run's first steps several times their size
    (no warmup left, no bias correction), so a checkpoint without every trained variable's
    slots is refused, as are settings that cannot continue a step count; nothing is changed."""
    from conftest import tiny_config
    from electra_tf import pretraining
    from electra_tf.hparam_parsing import ConfigError
    with pytest.raises(ConfigError, match="^hparam 'init_optimizer_state': .*set init_checkpoint"):
        tiny_config(data_dir, init_optimizer_state=True)
    release = os.path.dirname(_tiny_release(tmp_path / "release", with_generator=True)[0])
    bare = os.path.dirname(_tiny_release(tmp_path / "bare", with_generator=False)[0])
    for hparams, match in (({"embedding_sharing": "gdes", "init_checkpoint": release},
                            "gdes splits"),
                           ({"training_algorithm": "two_stage", "generator_hidden_size": 1.0,
                             "init_checkpoint": bare}, "two_stage's stages")):
        with pytest.raises(ConfigError, match=f"^hparam 'init_optimizer_state': {match}"):
            tiny_config(data_dir, init_optimizer_state=True, **hparams)

    def state_of(**hparams):
        return pretraining.create_state(tiny_config(data_dir, **hparams),
                                        pretraining.SpecialIds(), tf.distribute.get_strategy())

    def refused(path, **hparams):
        state = state_of(**hparams)
        with pytest.raises(ConfigError) as error:
            pretraining.initialize_from(state.model, str(path), state.optimizer)
        assert int(state.optimizer.iterations) == 0
        assert not any(np.any(m.numpy()) for v in state.model.trainable_variables
                       for m in state.optimizer.moments(v))
        return str(error.value)

    # A release: weights and a step, no slots (as Google's are reported to be).
    message = refused(release)
    n = len(state_of().model.trainable_variables)
    assert message.startswith(f"hparam 'init_optimizer_state': {release}/model.ckpt-1000 holds "
                              f"no Adam slots for {n} of the {n} variables this run trains "
                              "(e.g. electra/embeddings/")
    assert message.endswith("); it continues a TF1 run of this same model, as the original's "
                            "run_pretraining.py writes one: set init_optimizer_state false for "
                            "a fresh optimizer from step 0, with the warmup")
    # A run of another objective: the heads it has no slots for are named.
    _trained_run_in_tf1(data_dir, tmp_path / "electra")
    message = refused(tmp_path / "electra", objective="all_tokens_mlm")
    assert "mlm_predictions/output_bias" in message
    # Not TF1, or TF1 without a step.
    keras_dir = tmp_path / "keras"
    keras_dir.mkdir()
    state = state_of()
    state.model.discriminator_model().save(keras_dir / "discriminator.keras")
    assert refused(keras_dir).startswith(
        f"hparam 'init_optimizer_state': init_checkpoint {keras_dir}/discriminator.keras is a "
        "keras model, which holds no optimizer state to continue")
    tf1_checkpoint.write_tf1_checkpoint(str(tmp_path / "stepless" / "model.ckpt"),
                                        state.model.discriminator_model())
    assert "is a TF1 checkpoint without a global_step" in refused(tmp_path / "stepless")

    # The command line: the steps count on from the checkpoint's, so as many train nothing.
    import run_pretraining
    from conftest import TINY_MODEL, usage_error
    hparams = {**TINY_MODEL, "init_checkpoint": str(tmp_path / "electra"),
               "init_optimizer_state": True, "num_train_steps": 1000}
    assert usage_error(run_pretraining, "--data_dir", str(data_dir), "--model_name", "cont",
                       "--hparams", json.dumps(hparams)) == (
        "hparam 'num_train_steps' is 1000, but init_checkpoint is at step 1000: nothing would "
        "train. With init_optimizer_state the steps count on from the checkpoint's, as in the "
        "original: 11000 trains 10,000 more")
    # Refused before anything is written: a corrected rerun starts clean.
    assert not (data_dir / "models" / "cont" / "pretrain_config.json").exists()


def test_the_hparam_modules_import_no_checkpoints_and_read_init_checkpoint_through_them():
    """The hparam modules (config, and model_shape, shared_hparams and hparam_parsing below it)
    are the bottom layer: the checkpoint formats hand model_shape their reader of a pretrained
    architecture as they load, so that no hparam module imports a checkpoint module."""
    import ast
    from electra_tf import model_shape
    for name in ("config", "model_shape", "shared_hparams", "hparam_parsing"):
        tree = ast.parse((REPO / "electra_tf" / f"{name}.py").read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    and (node.module or "").startswith("electra_tf") for alias in node.names}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for alias in node.names if alias.name.startswith("electra_tf")}
        assert "checkpoints" not in imported and "electra_tf.checkpoints" not in imported, \
            (name, imported)
    assert model_shape._pretrained_reader is checkpoints.init_architecture


# ------------------------------------------------------------------ the format registry

class NpzWeights(checkpoints.Format):
    """A format defined here to show that one class and one registry line add a format: the
    weights in the original's names in weights.npz, the encoders' sizes in sizes.json."""
    name, expected = "npz", "weights.npz"

    def locate(self, path):
        where = os.path.join(path, "weights.npz")
        return path if os.path.exists(where) else None

    def _sizes(self, where):
        with open(os.path.join(where, "sizes.json")) as f:
            return {scope: checkpoint_names.EncoderSpec(**sizes)
                    for scope, sizes in json.load(f).items()}

    def load(self, where, num_attention_heads):
        weights = dict(np.load(os.path.join(where, "weights.npz")))
        return checkpoints.Models(*checkpoint_names.build_models(weights, where,
                                                                 self._sizes(where)))

    def architecture(self, where, num_attention_heads):
        sizes = self._sizes(where)
        return checkpoints.Architecture(sizes["electra"], sizes.get("generator"), where, self.name)

    def export(self, pretrained, output, vocab_file, do_lower_case, source):
        weights, sizes = {}, {}
        for scope, model in (("electra", pretrained.discriminator),
                             ("generator", pretrained.generator)):
            if model is not None:
                weights.update({name: np.asarray(var) for name, var
                                in checkpoint_names.model_variables(model, scope).items()})
                sizes[scope] = dataclasses.asdict(checkpoint_names.EncoderSpec.of(model.encoder))
        np.savez(os.path.join(output, "weights.npz"), **weights)
        with open(os.path.join(output, "sizes.json"), "w") as f:
            json.dump(sizes, f)
        return [os.path.join(output, name) for name in ("weights.npz", "sizes.json")] + \
            model_files.write_files(output, model_files.tokenizer_files(vocab_file, do_lower_case))


def test_a_format_defined_here_round_trips_through_convert_and_load(tmp_path, monkeypatch):
    from convert_checkpoint import convert
    monkeypatch.setitem(checkpoints.FORMATS, "npz", NpzWeights())  # the one registry line
    prefix, disc = _tiny_release(tmp_path, with_generator=True)
    release = checkpoints.load_pretrained(os.path.dirname(prefix))
    written = convert(os.path.dirname(prefix), str(tmp_path / "npz"), "npz")
    assert sorted(os.path.basename(p) for p in written) == [
        "sizes.json", "tokenizer_config.json", "vocab.txt", "weights.npz"]
    loaded = checkpoints.load_pretrained(str(tmp_path / "npz"))
    assert loaded.format == "npz" and loaded.vocab_file == str(tmp_path / "npz" / "vocab.txt")
    architecture = checkpoints.read_architecture(str(tmp_path / "npz"))
    assert architecture.discriminator == checkpoint_names.EncoderSpec.of(disc.encoder)
    assert architecture.generator == checkpoint_names.EncoderSpec.of(release.generator.encoder)
    convert(str(tmp_path / "npz"), str(tmp_path / "keras"), "keras")
    final = checkpoints.load_pretrained(str(tmp_path / "keras"))
    for ours, theirs in ((final.discriminator, release.discriminator),
                         (final.generator, release.generator)):
        theirs_vars = checkpoint_names.model_variables(theirs)
        for name, var in checkpoint_names.model_variables(ours).items():
            np.testing.assert_array_equal(var.numpy(), theirs_vars[name].numpy())
    with pytest.raises(checkpoints.NoPretrainedModel, match=r"discriminator\.keras, or "
                       r"weights\.npz\)$"):
        checkpoints.load_pretrained(str(tmp_path))


def test_the_registry_keeps_the_formats_names_and_the_to_flag_lists_it(tmp_path):
    import convert_checkpoint
    assert list(checkpoints.FORMATS) == ["tf1", "hf", "keras", "saved_model", "keras_hub"]
    assert sorted(convert_checkpoint.EXPORT_FORMATS) == sorted(
        name for name, format_ in checkpoints.FORMATS.items() if format_.writes)
    assert [f.reported_kind for f in checkpoints.FORMATS.values() if f.reads] == [
        "tf1", "huggingface", "keras"]
    with pytest.raises(checkpoints.NoPretrainedModel) as e:
        checkpoints.read_architecture(str(tmp_path))
    assert str(e.value) == (f"{tmp_path}: no pretrained ELECTRA found (expected a TF1 "
                            "checkpoint, a Hugging Face directory with config.json, or "
                            "discriminator.keras)")
    with pytest.raises(ValueError, match=r"^--to npz: one of \['tf1', 'hf', 'keras', "
                       r"'saved_model', 'keras_hub'\]$"):
        convert_checkpoint.convert(str(tmp_path), str(tmp_path / "out"), "npz")
