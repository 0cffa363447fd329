"""The runnable examples in the modules' docstrings run and give what they show."""

import doctest

import pytest

from electra_tf import modeling, optimization, tokenization


@pytest.mark.parametrize("module", [modeling, optimization, tokenization])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
