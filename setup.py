"""electra_tf: ELECTRA pretraining and fine-tuning on TensorFlow 2 and Keras 3."""

from setuptools import setup

setup(
    name="electra_tf",
    version="0.1.0",
    description="ELECTRA (Clark et al., ICLR 2020) on TensorFlow 2 and Keras 3: pretraining, "
                "fine-tuning and checkpoint interop, faithful to google-research/electra.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    # What the pinned dependencies allow: numpy 2.4, SciPy 1.17 and pandas 3 need 3.11;
    # TensorFlow 2.20 has no wheels for 3.14.
    python_requires=">=3.11,<3.14",
    # The packages sit in the repository's root; saying so makes `pip install -e .` put the
    # root on sys.path instead of installing an import hook that Python consults last, after
    # which any folder named electra_tf beside a user's script (a clone, say) would be imported
    # as an empty namespace package in place of this one.
    package_dir={"": "."},
    packages=["electra_tf", "electra_tf.finetuning", "pretrain_data"],
    package_data={"electra_tf": ["configs/*.json"]},
    py_modules=["run_pretraining", "run_finetuning", "run_ensemble", "convert_checkpoint",
                "command_line"],
    install_requires=[
        "tensorflow>=2.20,<2.21",
        "tensorflow-text>=2.20,<2.21",
        "tf-models-official>=2.20,<2.21",
        "tensorflow-datasets>=4.9,<4.10",
        "importlib_resources>=6",  # tensorflow-datasets needs it to prepare datasets (e.g. glue)
        "tensorboard>=2.20,<2.21",
        # TensorBoard 2.20 imports pkg_resources, which setuptools 81 removed.
        "setuptools>=41,<81",
        "keras>=3.10,<4",
        "absl-py>=1.4",
        "safetensors>=0.4",  # Hugging Face weights, read and written without torch
        "numpy>=1.26",
        "scikit-learn>=1.3",  # GLUE metrics
        "scipy>=1.11",  # GLUE metrics
        "threadpoolctl>=3.1",  # the linear probe's fit on one BLAS thread (scikit-learn needs it)
        "tqdm>=4.60",  # the data builder's progress bar
        "seqeval>=1.2",  # chunking's F1 (CoNLL-2000 tagging task)
    ],
    extras_require={
        # The PyTorch peer for parity tests and benchmarks. PyPI's Linux wheel is the CUDA build;
        # the README says how to install the CPU one first. keras-hub, for the test of the
        # keras_hub export. pytest-xdist, for the README's test command's two processes (-n 2).
        "test": ["pytest>=8", "pytest-xdist>=3.8", "torch==2.13.0", "transformers>=5,<6",
                 "matplotlib>=3.8", "keras-hub>=0.32,<0.33"],
        "bench": ["torch==2.13.0", "transformers>=5,<6", "matplotlib>=3.8"],
        "experiments": ["matplotlib>=3.8"],  # plots
        # convert_checkpoint.py --to keras_hub. keras-hub pins kagglesdk 0.1.28, which the
        # kaggle that tf-models-official requires accepts up to kaggle 2.2.1 (constraints.txt).
        "keras-hub": ["keras-hub>=0.32,<0.33"],
    },
)
