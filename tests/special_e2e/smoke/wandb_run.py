"""A W&B offline run read back as the smoke checks it: its history (the scalars, tables and images each step
logged), its exit record, and the media files beside them.

W&B 0.31 has no Python reader of its run file (``run-<id>.wandb``: the Go service writes it; ``wandb sync`` reads
it to upload, which the smoke must not do), so this follows the file's documented format: LevelDB's log format
(github.com/google/leveldb, doc/log_format.md: 32 KiB blocks of records, each with a 7-byte header of checksum,
length and type, a record split across blocks as FIRST, MIDDLE..., LAST) after W&B's 7-byte header (``:W&B``, a
version), each whole record one ``wandb.proto.wandb_internal_pb2.Record``, W&B's own protobuf message.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

MAGIC = b":W&B"
FILE_HEADER = 7  # the magic, a 2-byte version, a 1-byte version of the protobuf
BLOCK = 32 * 1024
RECORD_HEADER = struct.Struct("<IHB")  # masked CRC-32C, payload length, type
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


class OfflineRunError(ValueError):
    """The folder holds no readable W&B offline run."""


def read_records(path: str | os.PathLike) -> Iterator[Any]:
    """The ``Record`` messages of a W&B run file, in the order they were written."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    if data[: len(MAGIC)] != MAGIC:
        raise OfflineRunError(f"{path}: not a W&B run file (it starts {data[:7]!r}, not {MAGIC!r})")
    position, pieces = FILE_HEADER, []
    while position + RECORD_HEADER.size <= len(data):
        room = BLOCK - position % BLOCK
        if room < RECORD_HEADER.size:  # a block's tail too short for a header is zero padding
            position += room
            continue
        _, length, kind = RECORD_HEADER.unpack_from(data, position)
        if kind == 0:  # zeros: the rest of the block is padding (a record never starts with type 0)
            position += room
            continue
        start = position + RECORD_HEADER.size
        if kind not in (FULL, FIRST, MIDDLE, LAST) or start + length > len(data):
            raise OfflineRunError(f"{path}: a record of type {kind}, {length} bytes, at byte {position}: cut off")
        pieces.append(data[start : start + length])
        position = start + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(pieces))
            pieces = []
            yield record


@dataclass
class OfflineRun:
    """What one offline run holds: ``history[step][key]`` (the decoded JSON W&B logged: a number, or a dict such
    as ``{"_type": "table-file", "path": ...}`` for a table or ``{"_type": "images/separated", ...}`` for images),
    the exit record's code (None: the run was never finished) and the run's folder."""

    folder: Path
    history: dict[int, dict[str, Any]] = field(default_factory=dict)
    exit_code: Optional[int] = None

    def keys(self) -> set[str]:
        return {key for data in self.history.values() for key in data}

    def media(self, value: dict) -> Path:
        """The file a logged table's or image's value names, in the run's files."""
        return self.folder / "files" / value["path"]


def find_offline_run(wandb_dir: str | os.PathLike) -> Path:
    """The one offline run W&B wrote under ``WANDB_DIR`` (``<dir>/wandb/offline-run-<time>-<id>/``)."""
    folders = sorted(Path(wandb_dir).glob("wandb/offline-run-*"))
    if len(folders) != 1:
        raise OfflineRunError(f"{wandb_dir}: {len(folders)} W&B offline runs, not one")
    return folders[0]


def read_offline_run(wandb_dir: str | os.PathLike) -> OfflineRun:
    folder = find_offline_run(wandb_dir)
    files = sorted(folder.glob("run-*.wandb"))
    if len(files) != 1:
        raise OfflineRunError(f"{folder}: {len(files)} run files, not one")
    run = OfflineRun(folder)
    for record in read_records(files[0]):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            step, items = _history_items(record.history)
            run.history.setdefault(step, {}).update(items)
        elif kind == "exit":
            run.exit_code = int(record.exit.exit_code)
    return run


def _history_items(history) -> tuple[int, dict[str, Any]]:
    """One history record's step and values, W&B's own ``_``-keys left out; a media value (a table, images) comes as
    one item per field under ``nested_key`` (``["gcpo/credit_table", "path"]``): put back together as a dict."""
    step, items = history.step.num, {}
    for item in history.item:
        value = json.loads(item.value_json)
        if item.key == "_step":
            step = value
            continue
        *path, last = [item.key] if item.key else list(item.nested_key)
        if last.startswith("_") and not path:
            continue
        place = items
        for part in path:
            place = place.setdefault(part, {})
        place[last] = value
    return int(step), items
