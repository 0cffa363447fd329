"""The runnable examples in the modules' docstrings run and give what they show."""

import doctest

import pytest

from electra_tf import fused, modeling, optimization, tokenization
from electra_tf.finetuning import glue
from electra_tf.finetuning import model as finetuning_model


@pytest.mark.parametrize("module", [fused, modeling, optimization, tokenization, glue,
                                    finetuning_model])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
