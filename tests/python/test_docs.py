"""The examples in ringenv's public docstrings run and give what they show."""

import doctest

import ringenv


def test_package_docstring_example_runs():
    result = doctest.testmod(ringenv, verbose=False)
    assert result.attempted >= 4, "the package docstring lost its example"
    assert result.failed == 0
