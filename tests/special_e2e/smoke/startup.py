"""Where a trainer run's start-up goes: the smoke stamps each line of the run's output with the seconds since the
run started as it arrives (``timed_log_run<N>.txt``), and the phases are the first line that marks each one.

Stamping on arrival needs nothing from verl, Ray or vLLM (their own log lines carry no common clock, and the
console logger's step lines none at all), so the same table comes out of a CPU smoke, a GPU smoke and a launcher
smoke. A marker that never appears (another verl version, a run that died early) leaves its phase out instead of
guessing; the table says which were not seen.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import IO, Iterable, Optional, Sequence

# (phase, what marks its end): the first output line matching the pattern, in the order a verl 0.9.1 run starts
STARTUP_MARKERS: tuple[tuple[str, str], ...] = (
    # the entry point composed and checked the config and is about to start Ray (verl's main prints this)
    ("config composed and checked", r"ray init kwargs:"),
    ("Ray up", r"Started a local Ray instance"),
    # the task runner's first line (verl's TaskRunner, the recipe's GCPOTaskRunner)
    ("task runner started", r"^\(\w*TaskRunner pid="),
    # TransferQueue's controller and storage units are up and verl's trainer has its data (it prints the size)
    ("TransferQueue and data ready", r"train dataset size|Total training steps"),
    # the FSDP actor: its process's first line (a WorkerDict actor holds the colocated roles), its model built
    ("FSDP worker started", r"^\((?:WorkerDict|ActorRolloutRefWorker)\w* pid="),
    ("FSDP actor ready", r"actor and ref model engine initialized"),
    ("reward workers ready", r"reward loop manager initialized"),
    # vLLM: the server actor's first line, then verl's list of the servers once they answer
    ("vLLM server process started", r"^\(vLLMHttpServer pid="),
    ("vLLM server ready", r"LLMServerManager: \["),
    # the training loop's progress bar: the agent loop workers and the credit actor are ready
    ("training loop started", r"Training Progress:"),
    # the console logger's line of step 1 ("step:1 - ..."): the first step is done
    ("first step logged", r"(?:^|\) )step:\d+ - "),
)


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Phase:
    """One start-up phase: its label, when its marker first appeared (s since the run started) and how long since
    the previous phase that was seen (or the start)."""

    label: str
    at_s: Optional[float]
    took_s: Optional[float]


class TimedLog:
    """Writes ``<seconds since start> <line>`` for each line of a run's output, as it arrives."""

    def __init__(self, out: IO[str], started: float) -> None:
        self._out, self._started, self._partial = out, started, ""

    def feed(self, text: str, now: float) -> None:
        """``text``: the next decoded chunk (a line may span chunks: it is stamped when its newline arrives)."""
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self._out.write(f"{now - self._started:9.2f} {line}\n")
        if lines:
            self._out.flush()

    def close(self, now: float) -> None:
        if self._partial:
            self._out.write(f"{now - self._started:9.2f} {self._partial}\n")
            self._partial = ""
        self._out.flush()


def read_timed_log(path: str | os.PathLike) -> list[tuple[float, str]]:
    """``(seconds, line)`` of a timed log; lines that do not start with a number are left out."""
    entries = []
    # newline="\n": a progress bar redraws its line with a carriage return, which is not a new line here
    with open(path, encoding="utf-8", errors="replace", newline="\n") as handle:
        for line in handle:
            stamp, _, text = line.rstrip("\n").lstrip().partition(" ")
            try:
                entries.append((float(stamp), text))
            except ValueError:
                continue
    return entries


def startup_phases(
    entries: Iterable[tuple[float, str]], markers: Sequence[tuple[str, str]] = STARTUP_MARKERS
) -> list[Phase]:
    """The phases of ``markers`` in their order, each at the first line that matches its pattern (a phase whose
    marker first appears before an earlier phase's is still placed by its own time: the table is in marker order,
    ``took_s`` is from the latest earlier phase that was seen)."""
    compiled = [(label, re.compile(pattern)) for label, pattern in markers]
    first: dict[str, float] = {}
    for seconds, text in entries:
        text = ANSI_ESCAPE.sub("", text)  # Ray colours each actor's prefix
        for label, pattern in compiled:
            if label not in first and pattern.search(text):
                first[label] = seconds
        if len(first) == len(compiled):
            break
    phases, previous = [], 0.0
    for label, _ in compiled:
        at = first.get(label)
        took = None if at is None else max(at - previous, 0.0)
        if at is not None:
            previous = max(previous, at)
        phases.append(Phase(label, at, took))
    return phases
