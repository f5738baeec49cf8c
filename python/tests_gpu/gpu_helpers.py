"""Runs a GPU test's scenario in a fresh interpreter (see conftest.py)."""
import os
import subprocess
import sys
import textwrap


def run_script(body: str, env: dict | None = None, timeout: int = 240) -> str:
    """Runs ``body`` in a new interpreter; fails the test with its output unless it exits 0."""
    code = textwrap.dedent(body)
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                       timeout=timeout)
    out = p.stdout + p.stderr
    print(out)  # shown with pytest -s
    assert p.returncode == 0, f"exit {p.returncode}\n{out}"
    return out
