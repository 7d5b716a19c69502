"""examples/quickstart.py runs as the README says (hybrid retrieval, prompt, SmolLM2 with an extractive fallback,
attribution), and the README's "Compose a pipeline in code" block is that file's code, verbatim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "quickstart.py"


def test_the_readme_shows_the_quickstart_verbatim() -> None:
    source = EXAMPLE.read_text(encoding="utf-8")
    code = source[source.index('"""', 3) + 3:].lstrip("\n")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Compose a pipeline in code\n\n```python\n", 1)[1].split("```\n", 1)[0]
    assert block == code


def test_the_quickstart_runs_and_cites(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    cited = next(line for line in lines if line.startswith("cited:"))
    assert "glu-n" in cited and "glu-s" not in done.stdout.split("answer:", 1)[1]  # the south tenant's row never shows
    assert [line.split()[0] for line in lines if line.split() and line.split()[0] in
            ("embed", "vector", "bm25", "fuse", "prompt", "generate", "llama", "attribute")][-1] == "attribute"
    assert (tmp_path / ".ragopt").is_dir()
