"""torch is the ``spawnkit[torch]`` extra: what needs it says so in one line, nothing else needs it.

Each check runs in a fresh interpreter.  Where torch is installed, that
interpreter hides it the way Python itself does for a module it must not
import (``sys.modules["torch"] = None``: ``import torch`` is then a
``ModuleNotFoundError`` for ``torch``, exactly as where it is missing); where
torch is not installed (CI's other Pythons) the line changes nothing.  A fresh
venv with no torch at all is tested end to end in ``test_wheel_e2e.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HIDE_TORCH = "import sys; sys.modules['torch'] = None\n"
TIMEOUT_S = 120


def _python(code: str, *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDE_TORCH + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    ("statement", "feature"),
    [
        ("from spawnkit.platforms import CustomOp", "spawnkit.platforms.CustomOp"),
        ("from spawnkit.platforms import RMSNorm", "spawnkit.platforms.RMSNorm"),
        ("from spawnkit.platforms.custom_op import CustomOp", "spawnkit.platforms.CustomOp"),
        ("from spawnkit.demo import Engine; Engine()", "spawnkit.demo.Engine"),
    ],
)
def test_what_needs_torch_raises_one_line_naming_the_extra(statement: str, feature: str) -> None:
    proc = _python(
        f"""
        import json
        from spawnkit.errors import MissingExtraError
        try:
            {statement}
        except MissingExtraError as exc:
            print(json.dumps([str(exc), exc.extra, exc.module, exc.feature,
                              isinstance(exc, ImportError)]))
        """
    )
    assert proc.returncode == 0, proc.stderr
    message, extra, module, got_feature, is_import_error = json.loads(proc.stdout)
    assert (extra, module, got_feature, is_import_error) == ("torch", "torch", feature, True)
    assert "\n" not in message
    assert message.startswith(f"{feature} needs torch")
    assert 'pip install "spawnkit[torch]"' in message


def test_a_broken_torch_keeps_its_own_error(tmp_path: Path) -> None:
    # A torch that is there but fails inside is not "install the extra": its error stays.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("import torch._C_missing_for_this_test\n")
    proc = subprocess.run(
        [sys.executable, "-c", "from spawnkit.platforms import CustomOp"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: No module named 'torch._C_missing_for_this_test'")


@pytest.mark.parametrize("command", ["demo", "bench"])
def test_demo_and_bench_without_torch_are_one_line_and_exit_1(command: str) -> None:
    proc = _python(
        f"""
        from spawnkit.cli import main
        sys.exit(main([{command!r}]))
        """
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""  # refused before anything was printed or started
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"spawnkit {command}: MissingExtraError: spawnkit {command}")
    assert "needs torch" in line
    assert 'pip install "spawnkit[torch]"' in line


def test_doctor_and_a_launch_work_without_torch(tmp_path: Path) -> None:
    (tmp_path / "sk_notorch_app.py").write_text(
        "import sys\n\ndef main(payload):\n    return payload + 1, 'torch' in sys.modules\n"
    )
    proc = _python(
        """
        import io, json
        from spawnkit.cli import main
        out, err = io.StringIO(), io.StringIO()
        doctor = main(["doctor"], stdout=out, stderr=err)
        from spawnkit import spawn_with_plugins
        if __name__ == "__main__":
            with spawn_with_plugins("sk_notorch_app:main", 41, nprocs=2, ready_timeout=120) as g:
                results = g.results(timeout=120)
            loaded = [k for k, m in sys.modules.items() if k.split(".")[0] == "torch" and m]
            print(json.dumps([doctor, err.getvalue(), results, loaded]))
        """,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    doctor, doctor_err, results, parent_loaded = json.loads(proc.stdout)
    assert (doctor, doctor_err) == (0, "")
    # Nothing on the launch path imports torch: not the parent, not a CPU worker.
    assert results == [[42, False], [42, False]] and parent_loaded == []
