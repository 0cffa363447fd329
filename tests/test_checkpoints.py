"""Checkpoint interop, with numerical parity against transformers: Hugging Face import and
export, TF1 checkpoints in the original's names (round trip and the original's full variable
list), SavedModel, and every mismatch message."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import BERT_VOCAB, REPO
from electra_tf import checkpoints, modeling

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
    checkpoints.export_hf(ours, str(tmp_path / "out_disc"))
    checkpoints.export_hf(ours_gen, str(tmp_path / "out_gen"))
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
    disc_sizes = checkpoints.EncoderSizes(vocab_size=120, embedding_size=24, hidden_size=32,
                                          num_hidden_layers=2, num_attention_heads=4,
                                          intermediate_size=48, max_position_embeddings=64)
    disc = modeling.ElectraDiscriminator(disc_sizes.encoder("electra"))
    gen_sizes = checkpoints.EncoderSizes(**{**disc_sizes.__dict__, "hidden_size": 16,
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
    prefix = checkpoints.write_tf1_checkpoint(str(tmp_path / "tf1" / "model.ckpt-100"), disc,
                                              gen, global_step=100)
    names = dict(tf.train.list_variables(prefix))
    assert names["electra/encoder/layer_1/attention/self/query/kernel"] == [32, 32]
    assert names["generator/embeddings_project/kernel"] == [24, 16]
    assert not any(n.startswith("generator/embeddings/") for n in names)  # shared, as the original
    loaded = checkpoints.load_pretrained(str(tmp_path / "tf1"))
    assert loaded.format == "tf1" and loaded.global_step == 100
    for ours, theirs in ((disc, loaded.discriminator), (gen, loaded.generator)):
        mine, back = checkpoints.model_variables(ours), checkpoints.model_variables(theirs)
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
    used = set(checkpoints.model_variables(loaded.discriminator)) | set(
        checkpoints.model_variables(loaded.generator))
    model_names = {v["name"] for v in fixture
                   if not v["name"].endswith(("adam_m", "adam_v")) and v["name"] != "global_step"}
    assert used == model_names  # every variable mapped, in both directions
    query = "electra/encoder/layer_11/attention/self/query/kernel"
    np.testing.assert_array_equal(checkpoints.model_variables(loaded.discriminator)[query].numpy(),
                                  tensors[query].numpy())
    assert loaded.global_step == 7


def test_saved_model_runs_without_this_package(tmp_path):
    disc, _ = _pair()
    checkpoints.export_saved_model(disc, str(tmp_path / "saved"))
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
    prefix = checkpoints.write_tf1_checkpoint(str(tmp_path / "a" / "model.ckpt"), disc, gen)
    weights = checkpoints.read_tf1_checkpoint(prefix)
    # A variable the model needs is missing.
    broken = {k: v for k, v in weights.items()
              if k != "electra/encoder/layer_1/output/dense/bias"}
    with pytest.raises(ValueError, match=r"missing \['electra/encoder/layer_1/output/dense/bias'"):
        checkpoints.build_models(broken, "ckpt-a")
    # A variable nothing takes.
    extra = {**weights, "electra/pooler/dense/kernel": np.zeros((32, 32), np.float32)}
    with pytest.raises(ValueError, match=r"1 variables map to nothing .*electra/pooler/dense"):
        checkpoints.build_models(extra, "ckpt-b")
    # A shape that differs.
    wrong = dict(weights)
    wrong["discriminator_predictions/dense/kernel"] = np.zeros((32, 31), np.float32)
    with pytest.raises(ValueError, match=r"discriminator_predictions/dense/kernel \(32, 31\) vs "
                                         r"\(32, 32\)"):
        checkpoints.build_models(wrong, "ckpt-c")
    # Not an ELECTRA checkpoint at all / nothing at the path.
    with pytest.raises(ValueError, match="holds no ELECTRA discriminator"):
        checkpoints.build_models({"dense/kernel": np.zeros((2, 2))}, "ckpt-d")
    with pytest.raises(FileNotFoundError, match="no pretrained ELECTRA found"):
        checkpoints.load_pretrained(str(tmp_path / "nothing"))
    # Hugging Face weights with a key ELECTRA does not have.
    _hf_models(tmp_path)
    state, config = checkpoints.read_hf_state(str(tmp_path / "hf_disc"))
    state["classifier.weight"] = np.zeros((2, 32), np.float32)
    with pytest.raises(ValueError, match=r"1 weights map to nothing in ELECTRA: "
                                         r"\['classifier.weight'\]"):
        checkpoints.hf_to_tf1(state, config, "hf")


def _tiny_release(tmp_path, with_generator: bool):
    """A TF1 checkpoint in the original's names for conftest's TINY_MODEL sizes (a release
    such as electra_small, or with the generator as the original's run writes it)."""
    from conftest import tiny_config
    config = tiny_config(vocab_size=30522)
    bert, gen_bert = config.bert_config(), config.generator_bert_config()
    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size", "max_position_embeddings", "type_vocab_size")
    disc = modeling.ElectraDiscriminator(checkpoints.EncoderSizes(
        embedding_size=config.embedding_size, **{k: bert[k] for k in keys}).encoder("electra"))
    gen = modeling.ElectraGenerator(checkpoints.EncoderSizes(
        embedding_size=config.embedding_size, **{k: gen_bert[k] for k in keys})
        .encoder("generator"))
    disc.build(), gen.build()
    for var in disc.weights + gen.weights:
        var.assign(np.random.default_rng(len(var.path)).normal(0, 0.05, var.shape))
    prefix = checkpoints.write_tf1_checkpoint(str(tmp_path / "release" / "model.ckpt-1000"),
                                              disc, gen if with_generator else None, 1000)
    shutil.copy(BERT_VOCAB, tmp_path / "release" / "vocab.txt")  # as Google's releases ship it
    return prefix, disc


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
    for name, var in checkpoints.model_variables(disc).items():
        np.testing.assert_array_equal(
            checkpoints.model_variables(exported.discriminator)[name].numpy(), var.numpy())


def test_finetuning_starts_from_a_tf1_checkpoint_and_a_hf_directory(tmp_path):
    from electra_tf.finetuning.model import load_pretrained_encoder
    prefix, disc = _tiny_release(tmp_path, with_generator=True)
    encoder = modeling.Encoder(**{**disc.encoder.get_config(), "name": "electra"})
    assert "(tf1)" in load_pretrained_encoder(encoder, os.path.dirname(prefix))
    np.testing.assert_array_equal(encoder.transformer_layers[1].output_dense.kernel.numpy(),
                                  disc.encoder.transformer_layers[1].output_dense.kernel.numpy())
    checkpoints.export_hf(disc, str(tmp_path / "hf"))
    other = modeling.Encoder(**{**disc.encoder.get_config(), "name": "electra"})
    assert "(huggingface)" in load_pretrained_encoder(other, str(tmp_path / "hf"))
    np.testing.assert_array_equal(other.embeddings.word_embeddings.numpy(),
                                  disc.encoder.embeddings.word_embeddings.numpy())
    bigger = modeling.Encoder(**{**disc.encoder.get_config(), "name": "electra",
                                 "num_hidden_layers": 3})
    with pytest.raises(ValueError, match="num_hidden_layers 2 in the checkpoint, 3 in the config"):
        load_pretrained_encoder(bigger, os.path.dirname(prefix))


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
    for name, var in checkpoints.model_variables(disc).items():
        np.testing.assert_array_equal(
            checkpoints.model_variables(final.discriminator)[name].numpy(), var.numpy())
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
