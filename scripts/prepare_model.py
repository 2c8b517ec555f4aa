#!/usr/bin/env python
"""Download the policy model once, to storage every node mounts, and check that it loads without the hub.

    python scripts/prepare_model.py Qwen/Qwen3-4B-Base /shared/models/Qwen3-4B-Base [--revision REV]
    python scripts/prepare_model.py --check /shared/models/Qwen3-4B-Base

Then run with ``MODEL_PATH=/shared/models/Qwen3-4B-Base`` (and ``HF_HUB_OFFLINE=1`` on nodes without internet):
without it, verl's FSDP, vLLM and reward workers on every node each fetch the model from the hub at start-up.
Downloads the config, tokenizer and safetensors weights only (no duplicate .bin/.pth copies). The check reads
the folder as the workers will: config and tokenizer through transformers with the hub switched off, and every
weight shard the index names present. The last line printed is ``MODEL_PATH=<folder>``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja"]
_TRUE = {"1", "ON", "YES", "TRUE"}


def hub_offline() -> bool:
    """huggingface_hub's and transformers' own reading of their offline switches."""
    return any(os.environ.get(name, "").upper() in _TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def check_model_dir(path: Path) -> list[str]:
    """What keeps `path` from loading on a node without the hub (empty when nothing does)."""
    if not path.is_dir():
        return [f"{path} is not a directory"]
    problems = []
    if not (path / "config.json").is_file():
        problems.append("config.json is missing")
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        problems.append("no tokenizer (tokenizer.json or tokenizer_config.json)")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        problems += [
            f"weight shard {shard} (named in {index.name}) is missing"
            for shard in shards
            if not (path / shard).is_file()
        ]
    elif not any(path.glob("*.safetensors")):
        problems.append("no *.safetensors weights (this step downloads safetensors only)")
    if problems:
        return problems

    from transformers import AutoConfig, AutoTokenizer

    for loader in (AutoConfig, AutoTokenizer):
        try:
            loader.from_pretrained(str(path), local_files_only=True)
        except Exception as error:  # noqa: BLE001 - any failure to load is the answer
            problems.append(f"{loader.__name__} cannot load it offline: {type(error).__name__}: {error}")
    return problems


def download(model_id: str, dest: Path, revision: str | None) -> Path:
    from huggingface_hub import snapshot_download

    return Path(
        snapshot_download(repo_id=model_id, revision=revision, local_dir=str(dest), allow_patterns=ALLOW_PATTERNS)
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", help="hub id, e.g. Qwen/Qwen3-4B-Base")
    parser.add_argument("dest", type=Path, nargs="?", help="folder on storage every node mounts")
    parser.add_argument("--revision", default=None, help="branch, tag or commit (default: the hub's main)")
    parser.add_argument("--check", type=Path, metavar="DIR", help="only check a folder downloaded before")
    args = parser.parse_args(argv)

    if args.check is not None:
        if args.model or args.dest:
            parser.error("--check takes the folder alone")
        folder = args.check
    else:
        if not (args.model and args.dest):
            parser.error("give a hub id and a destination folder, or --check DIR")
        if hub_offline():
            print(
                "HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE is set: run this where the hub is reachable "
                "(a login node), then point MODEL_PATH at the folder",
                file=sys.stderr,
            )
            return 2
        folder = download(args.model, args.dest, args.revision)

    problems = check_model_dir(folder)
    if problems:
        print(f"{folder} will not load on the nodes:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print(f"MODEL_PATH={folder.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
