"""Where `gcpo credit -o` writes: regular files atomically (through symlinks, with the umask's mode), devices and
pipes straight through, `-` to standard output; a bad destination fails before any work; an interrupted run
leaves no temp file."""

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gcpo_core.cli import main

ROOT = Path(__file__).resolve().parents[3]
ROLLOUTS = [
    {"group": "p1", "reward": 1, "embedding": [1.0, 0.0]},
    {"group": "p1", "reward": 1, "embedding": [0.0, 1.0]},
    {"group": "p1", "reward": 0, "embedding": [0.7, 0.7]},
]


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROLLOUTS))
    return path


def _rows(text):
    return [json.loads(line) for line in text.splitlines()]


def _with_umask(mask, argv):
    old = os.umask(mask)
    try:
        return main(argv)
    finally:
        os.umask(old)


def test_a_symlink_is_kept_and_its_target_written(src, tmp_path):
    target = tmp_path / "target.jsonl"
    target.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target.name)
    assert main(["credit", str(src), "-o", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == "target.jsonl"
    assert len(_rows(target.read_text())) == 3


def test_a_dangling_symlink_creates_its_target(src, tmp_path):
    link = tmp_path / "link.jsonl"
    link.symlink_to("made.jsonl")
    assert main(["credit", str(src), "-o", str(link)]) == 0
    assert link.is_symlink() and len(_rows((tmp_path / "made.jsonl").read_text())) == 3


def test_a_symlink_to_a_character_device_is_written_through(src, tmp_path):
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    assert main(["credit", str(src), "-o", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "null"]


def test_a_fifo_is_written_through_and_stays_a_fifo(src, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = {}
    reader = threading.Thread(target=lambda: received.update(text=fifo.read_text()), daemon=True)
    reader.start()
    assert main(["credit", str(src), "-o", str(fifo)]) == 0
    reader.join(timeout=60)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert len(_rows(received["text"])) == 3


def test_dash_writes_standard_output(src, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "gcpo_core.cli", "credit", str(src), "-o", "-"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert len(_rows(proc.stdout)) == 3
    assert not (tmp_path / "-").exists()


def test_new_files_honour_the_umask(src, tmp_path):
    out = tmp_path / "out.jsonl"
    assert _with_umask(0o022, ["credit", str(src), "-o", str(out)]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    private = tmp_path / "private.jsonl"
    assert _with_umask(0o077, ["credit", str(src), "-o", str(private)]) == 0
    assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_a_replaced_file_keeps_its_mode(src, tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    out.chmod(0o640)
    assert _with_umask(0o022, ["credit", str(src), "-o", str(out)]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o640 and len(_rows(out.read_text())) == 3


@pytest.mark.parametrize(
    "where, message",
    [
        ("nodir/out.jsonl", "nodir: no such directory"),
        (".", "is a directory"),
    ],
)
def test_a_bad_destination_fails_before_any_work(src, tmp_path, capsys, monkeypatch, where, message):
    import gcpo_core.cli.credit as credit_cli

    monkeypatch.setattr(credit_cli, "parse_rollouts", lambda *a, **k: pytest.fail("read the input first"))
    assert main(["credit", str(src), "-o", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gcpo credit: -o ") and message in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


# The child stalls in the rename that completes the output, the moment a temp file exists beside it.
STALLED_CHILD = textwrap.dedent("""
    import os, signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a background job ignores it)
    os.replace = lambda src, dst: time.sleep(120)
    from gcpo_core.cli import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_run_leaves_no_temp_file(src, tmp_path, signum, status):
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", STALLED_CHILD, "credit", str(src), "-o", str(out)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob(".gcpo-*.tmp")):
            assert proc.poll() is None and time.monotonic() < deadline, "no temp file appeared"
            time.sleep(0.05)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == status
    assert err.strip() == "gcpo credit: interrupted", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]
