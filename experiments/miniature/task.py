"""The miniature task: "name a <category>", answered by one word, with many distinct correct answers per prompt.

Every category has a fixed answer set (one word-piece each in the tiny policy's vocabulary, so the sentence
encoder embeds distinct meanings: "tiger" and "sheep" differ, a repeated "tiger" does not), and the verifier is an
exact set membership test. A policy can solve a prompt with any one of the answers, so it can also collapse onto
one of them: the collapse GCPO is meant to prevent is visible as fewer distinct correct answers per prompt, and
as a lower coverage of the answer set, at equal accuracy.

Prompts are a category in a phrasing template; training and held-out prompts share the categories but not the
templates, so held-out metrics measure the policy on prompts it was never trained on.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

import pandas as pd

DATA_SOURCE = "gcpo_miniature"

# answer sets: single word-pieces of all-MiniLM-L6-v2's vocabulary (a test checks it); a word may answer two
# categories ("orange")
CATEGORIES: dict[str, tuple[str, ...]] = {
    "fruit": (
        "apple",
        "banana",
        "cherry",
        "grape",
        "lemon",
        "mango",
        "orange",
        "peach",
        "pear",
        "plum",
        "lime",
        "coconut",
    ),
    "animal": (
        "dog",
        "cat",
        "horse",
        "cow",
        "lion",
        "tiger",
        "bear",
        "wolf",
        "fox",
        "rabbit",
        "deer",
        "sheep",
        "goat",
        "monkey",
        "elephant",
    ),
    "color": (
        "red",
        "blue",
        "green",
        "yellow",
        "purple",
        "orange",
        "pink",
        "brown",
        "black",
        "white",
        "gray",
        "violet",
    ),
    "country": (
        "france",
        "spain",
        "italy",
        "germany",
        "china",
        "japan",
        "india",
        "brazil",
        "canada",
        "mexico",
        "egypt",
        "russia",
        "kenya",
        "peru",
        "chile",
    ),
    "sport": (
        "soccer",
        "tennis",
        "golf",
        "hockey",
        "baseball",
        "basketball",
        "cricket",
        "rugby",
        "boxing",
        "swimming",
        "cycling",
        "skiing",
    ),
    "instrument": (
        "piano",
        "guitar",
        "violin",
        "drum",
        "flute",
        "trumpet",
        "harp",
        "cello",
        "saxophone",
        "clarinet",
        "organ",
        "banjo",
    ),
    "vegetable": ("carrot", "potato", "onion", "cabbage", "garlic", "pepper", "corn", "pea", "bean"),
    "metal": (
        "iron",
        "gold",
        "silver",
        "copper",
        "zinc",
        "tin",
        "lead",
        "nickel",
        "aluminum",
        "platinum",
        "steel",
        "bronze",
    ),
    "bird": (
        "eagle",
        "owl",
        "parrot",
        "sparrow",
        "crow",
        "robin",
        "swan",
        "duck",
        "hawk",
        "pigeon",
        "penguin",
        "falcon",
    ),
    "planet": ("mercury", "venus", "earth", "mars", "jupiter", "saturn", "neptune"),
    "weekday": ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"),
    "month": (
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ),
    "drink": ("water", "tea", "coffee", "milk", "juice", "beer", "wine", "soda", "whiskey", "vodka", "cocoa"),
    "weapon": ("sword", "spear", "bow", "gun", "knife", "axe", "rifle", "pistol", "dagger", "cannon", "bomb"),
    "vehicle": (
        "car",
        "bus",
        "truck",
        "train",
        "bicycle",
        "boat",
        "ship",
        "plane",
        "taxi",
        "tram",
        "motorcycle",
        "tractor",
    ),
    "profession": (
        "doctor",
        "teacher",
        "lawyer",
        "nurse",
        "farmer",
        "engineer",
        "pilot",
        "chef",
        "baker",
        "soldier",
        "judge",
        "writer",
    ),
}

TRAIN_TEMPLATES = ("name a {category}.", "give one {category}.", "say a {category}.", "which {category}?")
HELDOUT_TEMPLATES = ("tell me a {category}.", "write one {category}.")
SPLITS = {"train": TRAIN_TEMPLATES, "heldout": HELDOUT_TEMPLATES}

_ANSWER = re.compile(r"^\s*([a-z]+)\s*[.!]?\s*$")


def prompts(split: str) -> list[tuple[str, str]]:
    """``(prompt text, category)`` of every prompt of ``split`` (train | heldout), in a fixed order."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    return [(template.format(category=category), category) for template in SPLITS[split] for category in CATEGORIES]


def parse_answer(response: str) -> Optional[str]:
    """The answer word of a response: one lower-case word, optionally followed by a full stop; else None."""
    match = _ANSWER.match((response or "").lower())
    return match.group(1) if match else None


def answer_set(category: str) -> tuple[str, ...]:
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; the task's are {sorted(CATEGORIES)}")
    return CATEGORIES[category]


def is_correct(response: str, category: str) -> bool:
    """Exact verifier: the response is one word of the category's answer set."""
    return parse_answer(response) in answer_set(category)


def task_frame(split: str) -> pd.DataFrame:
    """verl rows (``data_source``, chat ``prompt``, ``reward_model.ground_truth`` = the category, ``extra_info``)."""
    rows = []
    for index, (text, category) in enumerate(prompts(split)):
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": text}],
                "ability": "naming",
                "reward_model": {"style": "rule", "ground_truth": category},
                "extra_info": {"split": split, "index": index, "category": category},
            }
        )
    return pd.DataFrame(rows)


def write_task_data(out_dir: str | os.PathLike) -> dict[str, Path]:
    """``train.parquet`` and ``heldout.parquet`` in ``out_dir``; returns both paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split in SPLITS:
        paths[split] = out_dir / f"{split}.parquet"
        task_frame(split).to_parquet(paths[split], index=False)
    return paths
