"""spawnkit reads and writes text as UTF-8 whatever the locale says.

Files it writes are read by another process (a trace by Perfetto, a distribution's metadata
and modules by ``importlib.metadata`` and the import system, both UTF-8 by definition), and a
locale's default encoding (ASCII in a C locale without coercion, a code page elsewhere) would
write what they misread, or fail on the first non-ASCII character: ``write_distribution`` of a
module with an ``é`` in it raised ``UnicodeEncodeError`` under ``LC_ALL=C``.  A project run
with ``-X warn_default_encoding -W error::EncodingWarning`` (PEP 597) got an error from
spawnkit's own code at every launch.

Every text-mode call in ``src/spawnkit`` is read with ``ast`` (no exception list), and a real
launch runs in an ASCII locale with default-encoding warnings as errors.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import spawnkit
from _plugin_app import LAUNCH, run_script, write_app

SRC = Path(spawnkit.__file__).parent
_SUBPROCESS = {"run", "Popen", "check_output", "check_call", "call"}
#: ``Path.read_text(encoding=None)``, ``Path.write_text(data, encoding=None)``: text in the
#: locale's encoding with this many positional arguments (``Distribution.read_text(name)`` of
#: ``importlib.metadata`` takes a file name, and decodes UTF-8)
_POSITIONAL_ENCODING = {"read_text": 0, "write_text": 1}
#: A C locale as it is without coercion to C.UTF-8 (PEP 538) or UTF-8 mode (PEP 540): ASCII.
_ASCII = {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}


def _constant_mode(call: ast.Call, position: int) -> str | None:
    """The call's mode if it is a literal; "" when absent (text), None when computed."""
    for kw in call.keywords:
        if kw.arg == "mode":
            node = kw.value
            break
    else:
        if len(call.args) <= position:
            return ""
        node = call.args[position]
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _text_without_encoding(call: ast.Call) -> str | None:
    """What the call is, when it opens or decodes text with the locale's encoding."""
    if any(kw.arg == "encoding" for kw in call.keywords):
        return None
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    mode: str | None = "b"  # anything else: not text
    if name == "fdopen" or (isinstance(func, ast.Name) and name == "open"):
        mode = _constant_mode(call, 1)
    elif name in {"NamedTemporaryFile", "TemporaryFile"}:
        given = _constant_mode(call, 0)
        mode = "b" if given == "" else given  # their default is "w+b"
    elif name in _POSITIONAL_ENCODING:
        mode = "" if len(call.args) == _POSITIONAL_ENCODING[name] else "b"
    elif name == "TextIOWrapper" or (name in _SUBPROCESS and _textual(call)):
        mode = ""
    if mode is None or "b" not in mode:
        return f"{name}(...)" + ("" if mode is not None else " with a computed mode")
    return None


def _textual(call: ast.Call) -> bool:
    return any(
        kw.arg in {"text", "universal_newlines"}
        and not (isinstance(kw.value, ast.Constant) and not kw.value.value)
        for kw in call.keywords
    )


def test_every_text_mode_call_in_spawnkit_names_its_encoding() -> None:
    found, read = [], 0
    for path in sorted(SRC.rglob("*.py")):
        read += 1
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and (what := _text_without_encoding(node)):
                found.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: {what}")
    assert read > 150  # it read the real package
    assert not found, "text read or written in the locale's encoding:\n" + "\n".join(found)


def test_the_check_sees_each_form_it_names() -> None:
    calls = {
        "open(p)": True,
        "open(p, 'w')": True,
        "open(p, mode)": True,
        "open(p, 'rb')": False,
        "open(p, encoding='utf-8')": False,
        "p.read_text()": True,
        "dist.read_text('METADATA')": False,  # importlib.metadata's: a file name, decoded UTF-8
        "p.write_text(s)": True,
        "p.write_text(s, 'utf-8')": False,
        "subprocess.run(c, text=True)": True,
        "subprocess.run(c, capture_output=True)": False,
        "subprocess.run(c, text=False)": False,
        "os.fdopen(fd, 'w')": True,
        "os.fdopen(fd, 'wb')": False,
        "tempfile.NamedTemporaryFile('w')": True,
        "tempfile.NamedTemporaryFile()": False,
        "io.TextIOWrapper(raw)": True,
    }
    for source, flagged in calls.items():
        node = ast.parse(source, mode="eval").body
        assert isinstance(node, ast.Call)
        assert bool(_text_without_encoding(node)) is flagged, source


_LAUNCHER = LAUNCH + """
from spawnkit.testing import write_distribution

if __name__ == "__main__":
    # a module of a distribution written here, with a character ASCII does not have
    source = "NAME = 'caf\\u00e9'\\n"
    write_distribution(sys.argv[1], "accented-dist", "1.0", modules={{"accented": source}})
    sys.path.insert(0, sys.argv[1])
    import accented
    assert accented.NAME == "caf\\u00e9", accented.NAME
    spawned = launch("work:main", "spawn", trace=sys.argv[2] + "/spawn.json")
    warm = launch("work:main", "forkserver", trace=sys.argv[2] + "/warm.json")
    print(spawned, warm)
"""

_PLUGIN = """
def register():
    pass
"""

_WORK = """
def main():
    return "ran"
"""


def test_a_launch_in_an_ascii_locale_with_default_encoding_warnings_as_errors(
    tmp_path: Path,
) -> None:
    app = write_app(
        tmp_path, "enc", _LAUNCHER, {"noop": "plugin:register"}, {"plugin": _PLUGIN, "work": _WORK}
    )
    (tmp_path / "dists").mkdir()
    proc = run_script(
        app.script,
        str(tmp_path / "dists"),
        str(tmp_path),
        flags=("-X", "warn_default_encoding", "-W", "error::EncodingWarning"),
        env={**_ASCII, "PYTHONWARNINGS": "error::EncodingWarning"},  # for every child too
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "EncodingWarning" not in proc.stderr, proc.stderr
    assert proc.stdout.split() == ["['ran']", "['ran']"], proc.stdout
    for name in ("spawn.json", "warm.json"):
        assert (tmp_path / name).read_bytes().startswith(b"{"), name


def test_the_locale_above_is_not_utf8() -> None:
    """The launch test means something only where this locale's encoding is not UTF-8."""
    out = subprocess.run(
        [sys.executable, "-c", "import locale; print(locale.getpreferredencoding(False))"],
        env={**os.environ, **_ASCII},
        capture_output=True,
        encoding="utf-8",
        timeout=60,
        check=True,
    )
    assert out.stdout.strip().lower() not in {"utf-8", "utf8"}, out.stdout
