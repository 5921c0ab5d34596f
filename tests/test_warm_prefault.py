"""A warm server's spares own, before their request, the pages a worker writes (``_prefault``).

The kernel is the judge here: ``/proc/<pid>/pagemap`` says which pages a process holds alone,
``/proc/<pid>/smaps_rollup`` how much of its memory is its own.  Nothing is mocked; a kernel
that cannot populate on request (older than 5.14) skips the tests that need it.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import re
import signal
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _launcher_support import Site, make_site
from spawnkit import spawn_with_plugins
from spawnkit.bootstrap import _parent_death
from spawnkit.errors import SpawnkitError
from spawnkit.protocol import _prefault
from spawnkit.protocol._fork_loop import SPARE_NAME

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/pagemap"), reason="needs Linux's /proc/<pid>/pagemap"
)
needs_populate = pytest.mark.skipif(
    not _prefault._usable(), reason="this kernel has no MADV_POPULATE_WRITE (Linux 5.14+)"
)

_PAGE = mmap.PAGESIZE
_PROBE = """
import os

def probe():
    return {"pid": os.getpid(), "ppid": os.getppid()}

def _fork_a_sleeper():
    pid = os.fork()
    if pid == 0:  # holds every descriptor the worker had, its server's learn pipe included
        import time
        time.sleep(30)
        os._exit(0)
    return pid

class ForksWhileUnpickled:
    def __reduce__(self):
        return (_fork_a_sleeper, ())

def sleeper(pid):
    return {"pid": os.getpid(), "ppid": os.getppid(), "sleeper": pid}

def tell_parent(conn):
    conn.send(os.getppid())
    conn.close()

def _refuse():
    raise RuntimeError(f"this payload refuses to unpickle (server {os.getppid()})")

class Refuses:
    def __reduce__(self):
        return (_refuse, ())
"""


def _address(buf: bytearray) -> int:
    anchor = ctypes.c_char.from_buffer(buf)
    try:
        return ctypes.addressof(anchor)
    finally:
        del anchor


def _in_child(work: Any) -> Any:
    """Run ``work()`` in a forked child of this process; its result comes back as ranges."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(w, work())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 20):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return list(struct.iter_unpack("<QQ", data))


def _covered(ranges: list[tuple[int, int]], lo: int, hi: int) -> int:
    """How many bytes of [lo, hi) the ranges cover."""
    return sum(max(0, min(hi, s + n) - max(lo, s)) for s, n in ranges)


def test_a_forked_child_reports_the_pages_it_wrote_and_not_those_it_only_read() -> None:
    size = 64 * _PAGE
    written, read = bytearray(size), bytearray(size)
    written[:] = read[:] = b"x" * size  # both fully present in this process before the fork
    w0, r0 = _address(written) // _PAGE * _PAGE + _PAGE, _address(read) // _PAGE * _PAGE + _PAGE

    def work() -> bytes:
        for i in range(0, size, _PAGE):
            written[i] = 1
        assert sum(read[::_PAGE]) > 0
        return _prefault.written()

    ranges = _in_child(work)
    whole = size - 2 * _PAGE  # the buffer's inner pages: no other object shares them
    assert _covered(ranges, w0, w0 + whole) == whole
    assert _covered(ranges, r0, r0 + whole) == 0


@needs_populate
def test_populated_pages_are_the_childs_own_before_it_writes_them() -> None:
    size = 64 * _PAGE
    shared = bytearray(b"y" * size)
    lo = _address(shared) // _PAGE * _PAGE + _PAGE
    inner = size - 2 * _PAGE
    kept = _prefault.receive(struct.pack("<QQ", lo, inner))
    assert kept == [(lo, inner)]

    def work() -> bytes:
        _prefault.populate(kept)
        assert shared[_PAGE] == ord("y")  # contents untouched
        return _prefault.written()

    assert _covered(_in_child(work), lo, lo + inner) == inner


@needs_populate
def test_the_server_keeps_only_what_lies_in_its_own_writable_mappings() -> None:
    text = _address(bytearray(8))  # a heap address; and one no mapping holds:
    nowhere = 1 << 46
    reported = struct.pack("<QQQQ", nowhere, 16 * _PAGE, text // _PAGE * _PAGE, _PAGE)
    kept = _prefault.receive(reported + b"\x01\x02")  # a torn last record is dropped
    assert kept == [(text // _PAGE * _PAGE, _PAGE)]
    assert _prefault.receive(b"") == []


@needs_populate
def test_a_spare_is_never_asked_to_hold_more_than_the_cap() -> None:
    cap = _prefault._MOST_BYTES
    big = bytearray(cap + 8 * _PAGE)  # one mapping of its own, inside this process's memory
    lo = _address(big) // _PAGE * _PAGE + _PAGE
    kept = _prefault.receive(struct.pack("<QQ", lo, cap + 4 * _PAGE))
    assert sum(size for _, size in kept) == cap
    assert kept[0][0] == lo


# ---------------------------------------------------------------- through a real server
@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    for site in make_site(tmp_path, monkeypatch):
        (site.root / f"{site.tag}_probe.py").write_text(_PROBE)
        yield site


def _launch(site: Site, payload: Any = None) -> dict[str, Any]:
    with spawn_with_plugins(
        f"{site.tag}_probe:probe",
        payload,
        namespace=site.ns,
        start_method="forkserver",
    ) as group:
        (result,) = group.results(timeout=60)
        return dict(result)


def _private_kb(pid: int, field: str = "Private_Dirty") -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return int(next(line for line in f if line.startswith(field + ":")).split()[1])


def _spare(server: int, not_in: set[int], least_kb: int = 0, timeout: float = 10.0) -> int:
    """A spare of ``server`` not among ``not_in`` holding at least ``least_kb`` of its own."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in psutil.Process(server).children():
            try:
                if child.pid in not_in or not child.name().startswith(SPARE_NAME):
                    continue
                if _private_kb(child.pid) >= least_kb:
                    return child.pid
            except (psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
                continue
        time.sleep(0.01)
    raise AssertionError(f"server {server} has no new spare holding {least_kb} kB in {timeout} s")


def _unlearned(site: Site) -> tuple[int, int, int]:
    """A server whose first worker failed before its entry (nothing learned): its pid, the
    spare it forked after, and that spare's own memory (kB) once settled."""
    mod = __import__(f"{site.tag}_probe")
    with pytest.raises(SpawnkitError, match=r"refuses to unpickle \(server (\d+)\)") as failed:
        _launch(site, mod.Refuses())
    match = re.search(r"server (\d+)", str(failed.value))
    assert match is not None
    server = int(match.group(1))
    spare = _spare(server, set())
    time.sleep(0.2)  # it would have populated by now
    return server, spare, _private_kb(spare)


@needs_populate
def test_spares_forked_after_a_worker_reached_its_entry_hold_its_pages(site: Site) -> None:
    """The first worker fails before its entry: nothing is learned, the next spare is as small
    as any fork; the next worker reaches its entry: spares forked after it hold its pages,
    and the spare that waited unlearned is let go for one that does."""
    server, unlearned, unlearned_kb = _unlearned(site)
    first = _launch(site)
    assert first["pid"] == unlearned, "the launch was not served by the waiting spare"
    learned = _spare(server, {unlearned}, least_kb=unlearned_kb + 1024)
    assert _private_kb(learned) < _private_kb(server, "Rss") / 2, "it holds the whole server"
    second = _launch(site)
    assert second["pid"] == learned, "the launch was not served by the spare that learned"


@needs_populate
def test_a_context_child_served_first_teaches_the_server_too(site: Site) -> None:
    """A bootstrapping context's child runs no entry: its target's start is where it reports,
    or a server whose first child is a long-lived pool worker would never learn."""
    import spawnkit

    mod = __import__(f"{site.tag}_probe")
    before = set(_warm_servers())
    ctx = spawnkit.get_context("forkserver", namespace=site.ns)  # starts the server
    (server,) = set(_warm_servers()) - before
    unlearned = _spare(server, set())
    time.sleep(0.2)
    unlearned_kb = _private_kb(unlearned)
    ours, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=mod.tell_parent, args=(theirs,))
    proc.start()
    theirs.close()
    try:
        assert ours.poll(60), "the context child never ran its target"
        assert ours.recv() == server
    finally:
        proc.join(30)
    assert proc.exitcode == 0 and proc.pid == unlearned
    _spare(server, {unlearned}, least_kb=unlearned_kb + 1024)


@needs_populate
def test_a_process_the_learner_forked_does_not_hold_the_learning_up(site: Site) -> None:
    """The learner's payload forks a process that keeps every descriptor for 30 s, its
    server's learn pipe too: the server reads the report whole, without waiting for EOF."""
    server, unlearned, unlearned_kb = _unlearned(site)
    mod = __import__(f"{site.tag}_probe")
    with spawn_with_plugins(
        f"{site.tag}_probe:sleeper",
        mod.ForksWhileUnpickled(),
        namespace=site.ns,
        start_method="forkserver",
    ) as group:
        (result,) = group.results(timeout=60)
    try:
        assert result["pid"] == unlearned and _alive(result["sleeper"])
        _spare(server, {unlearned}, least_kb=unlearned_kb + 1024, timeout=10)
    finally:
        os.kill(result["sleeper"], signal.SIGKILL)


def _alive(pid: int) -> bool:
    import psutil

    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


def _warm_servers() -> list[int]:
    """This process's warm servers (an exited child not yet reaped has no command line)."""
    import psutil

    found = []
    for child in psutil.Process().children():
        try:
            if "warm_main" in " ".join(child.cmdline()):
                found.append(child.pid)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return found


def _minflt(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[7])  # field 10: minor faults


def _started(site: Site, server: int) -> int:
    """The server's minor faults from before a launch until its worker was started (the
    server took the request, handed it to a spare and wrote the pid), the launch then ended."""
    before = _minflt(server)
    with spawn_with_plugins(
        f"{site.tag}_probe:probe", namespace=site.ns, start_method="forkserver"
    ) as group:
        faults = _minflt(server) - before
        group.results(timeout=60)
    return faults


@needs_populate
def test_the_server_takes_its_own_pages_back_after_forking_its_spares(site: Site) -> None:
    """Each fork of a spare leaves the server's pages shared with it, and the server's own
    next request paid about 90 copy-on-write faults before the spare had it (0.1 ms of a
    trivial start here).  It learns once which pages it writes (from a witness that only
    holds them, then is let go) and takes them back while idle: a request it serves from
    a ready spare faults a few times at most.  The witness is gone once it has learned."""
    import psutil

    before = set(_warm_servers())
    _launch(site)  # the server starts and learns its workers' pages
    (server,) = set(_warm_servers()) - before
    for _ in range(3):  # its own pages: learned at the first request after, taken back after
        time.sleep(0.3)
        _launch(site)
    faults = []
    for _ in range(3):
        time.sleep(0.3)  # the spares are forked, the pages taken back
        faults.append(_started(site, server))
    assert min(faults) < 40, faults
    time.sleep(0.3)
    ours = (SPARE_NAME, _parent_death._GUARDIAN_NAME.decode())  # its spares and guardian
    others = [c.name() for c in psutil.Process(server).children() if _alive(c.pid)]
    assert [name for name in others if not name.startswith(ours)] == []
