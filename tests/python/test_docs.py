"""The examples in ringenv's public docstrings run and give what they show."""

import doctest

import ringenv


def test_package_docstring_example_runs():
    result = doctest.testmod(ringenv, verbose=False)
    assert result.attempted >= 4, "the package docstring lost its example"
    assert result.failed == 0


def _switch_blocks():
    """The README's Python blocks that show a one-line switch (they say "instead of:")."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    return [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "instead of:" in b]


def test_readme_shows_the_one_line_switch_for_gymnasium_torchrl_and_sb3_and_each_runs():
    blocks = _switch_blocks()
    switched = {lib for lib in ("gymnasium", "torchrl", "stable_baselines3") if any(
        f"instead of: from {lib}" in b for b in blocks)}
    assert switched == {"gymnasium", "torchrl", "stable_baselines3"}, switched
    for block in blocks:
        namespace: dict = {"__name__": "readme_block"}
        exec(compile(block, "README.md", "exec"), namespace)
