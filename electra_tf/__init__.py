"""ELECTRA on TensorFlow 2 and Keras 3.

Importing the package registers its Keras layers, models, optimizers and schedules, so
`keras.saving.load_model("discriminator.keras")` works after `import electra_tf`. Imported before
TensorFlow, it first turns TensorFlow's oneDNN kernels on where they win, and on a machine without
an NVIDIA driver it drops CUDA's false `failed call to cuInit` error (electra_tf.hardware).
"""

from electra_tf import hardware

hardware.enable_onednn()  # before anything imports TensorFlow
hardware.probe_devices()  # imports TensorFlow without CUDA's false no-driver error

from electra_tf import modeling, optimization  # noqa: F401,E402  (registers Keras classes)
from electra_tf.modeling import (  # noqa: F401,E402
    DiscriminatorHead, ElectraDiscriminator, ElectraGenerator, Embeddings, Encoder, MaskedLMHead,
    TransformerLayer)

from electra_tf.checkpoints import load_pretrained  # noqa: F401,E402

__version__ = "0.1.0"
