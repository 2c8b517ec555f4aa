"""Where a gcpo command writes its output (``-o PATH``), all of it or nothing.

* A regular file (or a new one), also through a symlink: a temp file beside the symlink's target, renamed over
  it, so a failed or interrupted run leaves the old file (and no temp file). A new file gets the mode the umask
  gives (0644 under umask 022), a replaced one keeps its mode.
* Character devices, pipes, sockets and paths under /dev or /proc (``/dev/stdout``, ``/dev/null``, a FIFO): written
  straight through, since renaming a file over them would replace them.
* ``-``: standard output.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from typing import Optional

from gcpo_core.cli.common import CommandError

TEMP_PREFIX, TEMP_SUFFIX = ".gcpo-", ".tmp"


def _is_stdout(path: Optional[str]) -> bool:
    return path is None or path == "-"


def _written_through(path: str) -> bool:
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return True
    except FileNotFoundError:
        pass
    # /dev/stdout resolves to whatever standard output is: a rename there would replace the shell's redirect target
    paths = (os.path.abspath(path), os.path.realpath(path))
    return any(p == "/dev" or p.startswith(("/dev/", "/proc/")) for p in paths)


def check_output(path: Optional[str]) -> None:
    """Fail now, before any work, if ``path`` cannot be written."""
    if _is_stdout(path):
        return
    if not path:
        raise CommandError("-o '': expected a path, got an empty string ('-' is standard output)")
    if os.path.isdir(path):
        raise CommandError(f"-o {path}: is a directory")
    if _written_through(path):
        if os.path.exists(path) and not os.access(path, os.W_OK):
            raise CommandError(f"-o {path}: not writable")
        return
    target = os.path.realpath(path)
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise CommandError(f"-o {path}: {directory}: no such directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise CommandError(f"-o {path}: cannot create files in {directory} (permission denied)")
    if os.path.exists(target) and not os.access(target, os.W_OK):
        raise CommandError(f"-o {path}: not writable")


def write_output(path: Optional[str], text: str) -> None:
    """Write all of ``text`` to ``path`` as the module docstring describes."""
    if _is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    if _written_through(path):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return
    target = os.path.realpath(path)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~current_umask()
    temp = None
    try:
        fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=os.path.dirname(target))
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:  # also Ctrl-C and (see gcpo_core.cli.main) SIGTERM
        if temp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
        raise


def current_umask() -> int:
    """The process's umask, read without changing it where Linux allows."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
