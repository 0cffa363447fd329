"""The runnable examples in the modules' docstrings run and give what they show: every module of
electra_tf that has one."""

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import electra_tf


def _modules_with_examples() -> list[str]:
    names = [info.name for info in pkgutil.walk_packages(electra_tf.__path__, "electra_tf.")]
    return [name for name in names
            if ">>>" in (importlib.util.find_spec(name).loader.get_source(name) or "")]


MODULES = _modules_with_examples()


def test_the_modules_with_examples_are_found():
    assert {"electra_tf.checkpoint_names", "electra_tf.modeling", "electra_tf.tokenization",
            "electra_tf.finetuning.glue", "electra_tf.finetuning.model"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
