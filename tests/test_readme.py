"""The README's code blocks run as documented."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_python_examples_run(capsys):
    blocks = python_blocks()
    assert len(blocks) >= 2
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for block in blocks:
            exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "allocate bind" in out
    assert "pending:" in out
    from kai.framework import get_plugin_builder

    assert get_plugin_builder("avoid-spot") is not None
