"""A small engine, its plugin and its launching scripts, written as real distributions.

The engine (``<eng>``) has a hook target ``<eng>.work.tokenize`` and the
targets of its processes (``<eng>.procs``); the plugin distribution
registers an AFTER hook on ``tokenize`` that appends ``+plugin``.  Its
``register()`` raises when ``<PREFIX>_TEST_FAIL`` is set, and appends its pid
to the file named by ``<PREFIX>_TEST_LOG`` (so a test can see in which
processes the plugin callback ran).  Scripts run in their own interpreter:
spawn re-imports them, and every test gets fresh warm servers and namespaces.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spawnkit.testing import write_distribution

ENGINE = {
    "{eng}.__init__": "",
    "{eng}.ns": """
        import spawnkit
        NS = spawnkit.Namespace({ns!r}, {prefix!r})
        """,
    "{eng}.work": """
        def tokenize(x):
            return f"tok:{{x}}"
        """,
    "{eng}.procs": """
        import os
        from {eng} import work
        from spawnkit.bootstrap import current_report

        def scheduler():
            return work.tokenize("s")

        def _report():
            report = current_report()
            if report is None:
                return None
            return {{"pid": report.pid, "inherited": report.inherited,
                    "stages": sorted(report.stage_seconds), "namespace": report.namespace}}

        def detokenizer(conn):
            conn.send([work.tokenize("d"), _report()])
            conn.close()

        def tokenizer_task(x):
            return [work.tokenize(x), _report() is not None]

        class Items:
            def __len__(self):
                return 4

            def __getitem__(self, i):
                return work.tokenize(str(i))
        """,
    "{eng}.forked": """
        import os

        def forked(conn):  # imports the hook target only when called, as a fork child runs it
            from {eng} import procs
            conn.send([procs.work.tokenize("f"), procs._report(), os.getpid()])
            conn.close()
        """,
    "{eng}.eager": """
        import spawnkit
        from {eng}.ns import NS

        REPORT = spawnkit.bootstrap_here(NS)
        from {eng}.work import tokenize  # module scope, as an eager engine's entry does

        def main():
            return [tokenize("e"), REPORT is spawnkit.bootstrap_here(NS), sorted(REPORT.hooks)]
        """,
    "{eng}.late": """
        from {eng}.work import tokenize
        import spawnkit
        from {eng}.ns import NS

        spawnkit.bootstrap_here(NS)
        """,
    "{eng}.probe": """
        import spawnkit

        class Probe:
            def __setstate__(self, state):
                self.name = spawnkit.lazy("{eng}.work:tokenize").__name__
        """,
}

PLUGIN = """
    import os
    import spawnkit
    from spawnkit.hooks.types import HookType

    NS = spawnkit.Namespace({ns!r}, {prefix!r})

    def after(result, *args, **kwargs):
        return result + "+plugin"

    def register():
        log = os.environ.get("{prefix}_TEST_LOG")
        if log:
            with open(log, "a") as f:
                f.write(f"{{os.getpid()}}\\n")
        if os.environ.get("{prefix}_TEST_FAIL"):
            raise RuntimeError("tokplug is broken on purpose")
        NS.hooks.register("{eng}.work.tokenize", after, HookType.AFTER)
    """


@dataclass
class Engine:
    """Where the engine and its plugin live, and their names."""

    root: Path
    eng: str
    ns: str
    prefix: str

    def fmt(self, text: str) -> str:
        return textwrap.dedent(text).format(eng=self.eng, ns=self.ns, prefix=self.prefix)

    def run(
        self, body: str, *, env: dict[str, str] | None = None, timeout: float = 240
    ) -> tuple[Any, str]:
        """Run ``body`` (a script that prints one JSON line last); returns (that JSON, stderr).

        In its own session: past ``timeout`` (under the suite's 300 s) the whole group is
        killed, a worker the script left behind included (it holds the script's stdout, so
        the output would never end), and what the script wrote so far is the failure."""
        import os
        import signal

        script = self.root / f"script_{uuid.uuid4().hex[:6]}.py"
        header = f"import sys; sys.path[:0] = [{str(self.root / 'site')!r}]\n"
        script.write_text(header + self.fmt(body))
        proc = subprocess.Popen(
            [sys.executable, str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.root,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate(timeout=30)
            exited = proc.returncode
            raise AssertionError(
                f"the script's output did not end within {timeout} s (its exit status: "
                f"{exited}; a process it started may hold its stdout):\n{stdout}\n{stderr}"
            ) from None
        assert proc.returncode == 0, stdout + stderr
        return json.loads(stdout.strip().splitlines()[-1]), stderr


def make_engine(tmp_path: Path) -> Engine:
    uid = uuid.uuid4().hex[:8]
    engine = Engine(tmp_path, f"ctxeng_{uid}", f"ctx_{uid}", f"CTX_{uid.upper()}")
    site = tmp_path / "site"
    write_distribution(
        site,
        f"ctxeng-{uid}",
        "0.1",
        modules={k.format(eng=engine.eng): engine.fmt(v) for k, v in ENGINE.items()},
    )
    write_distribution(
        site,
        f"tokplug-{uid}",
        "1.0",
        entry_points={f"{engine.ns}.plugins": {"tokplug": f"tokplug_{uid}:register"}},
        modules={f"tokplug_{uid}": engine.fmt(PLUGIN)},
    )
    return engine


#: The four kinds of process of the engine; ``GET`` picks the context factory.
FOUR_PROCESSES = """
    import json
    import multiprocessing as mp
    import os
    from concurrent.futures import ProcessPoolExecutor


    def main(mode):
        import functools

        import spawnkit
        from {eng} import procs
        from {eng}.ns import NS

        ours = functools.partial(spawnkit.get_context, namespace=NS)
        get = ours if mode == "spawnkit" else mp.get_context
        out = {{}}
        try:
            with spawnkit.spawn_with_plugins(
                "{eng}.procs:scheduler", namespace=NS, ready_timeout=120, join_timeout=120
            ) as group:
                out["scheduler"] = group.results(timeout=120)[0]
        except Exception as exc:
            out["scheduler"] = {{"error": type(exc).__name__, "text": str(exc)}}
        try:
            ctx = get("spawn")
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=procs.detokenizer, args=(w,))
            p.start()
            w.close()
            try:
                got = r.recv() if r.poll(120) else None
            except EOFError:  # the child exited without sending
                got = None
            p.join(60)
            err = p.bootstrap_error() if hasattr(p, "bootstrap_error") else None
            out["detokenizer"] = got if got is not None else {{
                "error": type(err).__name__, "text": str(err), "exitcode": p.exitcode}}
        except Exception as exc:
            out["detokenizer"] = {{"error": type(exc).__name__, "text": str(exc)}}
        try:
            with ProcessPoolExecutor(2, mp_context=get("forkserver")) as ex:
                out["tokenizer"] = list(ex.map(procs.tokenizer_task, ["a", "b"], timeout=120))
        except Exception as exc:
            out["tokenizer"] = {{"error": type(exc).__name__, "text": str(exc),
                                "cause": str(exc.__cause__)}}
        try:
            try:
                from torch.utils.data import DataLoader
            except ModuleNotFoundError:  # the torch-free suite: the other three kinds still run
                out["loader"] = "no torch"
                return out

            loader = DataLoader(procs.Items(), batch_size=None, num_workers=2,
                                multiprocessing_context=get("spawn"), timeout=120)
            out["loader"] = list(loader)
        except Exception as exc:
            out["loader"] = {{"error": type(exc).__name__, "text": str(exc),
                             "cause": str(exc.__cause__)}}
        return out


    if __name__ == "__main__":
        modes = os.environ.get("CTX_MODES", "spawnkit,plain").split(",")
        print(json.dumps({{m: main(m) for m in modes}}))
    """
