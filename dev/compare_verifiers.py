#!/usr/bin/env python
"""Where the project's answer scorer disagrees with math-verify's defaults and with verl's DAPO scorer.

    python dev/compare_verifiers.py [--data-dir ../shared/data] [--examples 3] [--limit N]

Three graders of a (gold answer, response) pair:

* ``gcpo``: ``gcpo_core.rewards.math_reward`` (training rewards and ``gcpo eval``);
* ``math-verify``: math-verify's default ``parse``/``verify``, the response parsed as it is and the gold as
  LaTeX (``$gold$``) or boxed (``\\boxed{gold}``, how the rollout labels were made): accepted when either
  reading of the gold accepts;
* ``dapo``: verl 0.9.1's ``verl.utils.reward_score.math_dapo.compute_score`` (Minerva-normalised string match of
  the last ``Answer:`` line, else of the last ``\\boxed{}``).

Cases: every distinct gold answer of every set in the data folder crossed with systematic renderings of it
(boxed, ``Answer:`` lines, ``####``, "The final answer is", with and without units, percent, degrees,
``\\text{}``, thousands separators, ``\\dfrac`` / ``a/b`` / decimals, intervals, tuples, multiple-choice letters),
derived golds that carry a unit, a percent or a degree sign answered with the bare number, two-part golds
answered one box per part (and boxes with words between them), answers that are wrong or may be (the gold plus one, a number written inside the gold), and every real response in the folder: the rollouts (with their recorded math-verify labels)
and the reference solutions. For each class it prints how often each grader accepts and the disagreements:
``gcpo-/mv+`` (gcpo rejects what math-verify accepts: the class the scorer must not have), ``gcpo+/mv-``,
``gcpo-/dapo+``, ``gcpo+/dapo-``. The last line sums ``gcpo-/mv+`` over all cases.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Iterator, Optional

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("GCPO_SHARED_DATA") or ROOT.parent / "shared" / "data")
SHARED_DATA_HOW = "the shared data folder (../shared/data beside the checkout, or --data-dir / GCPO_SHARED_DATA): JSONL copies of public files; rollout_groups.jsonl is openai/grade-school-math's grade_school_math/data/example_model_solutions.jsonl regrouped, the others are named with their sources in that folder's README.md"
GOLD_FILES = ("math500", "aime24", "aime25", "amc23", "gsm8k_test", "dapo_math_sample", "rollout_groups")
SOLUTION_FILES = ("math500", "aime24", "gsm8k_test")  # reference solutions that state their final answer


@dataclass(frozen=True)
class Case:
    kind: str  # the class reported: "<wrapper>/<rendering>"
    gold: str
    response: str
    label: Optional[bool] = None  # a recorded grade (rollouts), when there is one


# ----------------------------------------------------------------------------------------------- renderings
_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)")
_SEPARATED = re.compile(r"-?\d{1,3}(?:(?:,|,\\!|,\\! |\{,\})\d{3})+")
_DEGREES = re.compile(r"^(.*?)\s*(?:\^\s*\\circ|\^\s*\{\\circ\}|°|\\text\{\s*degrees\}|\\degree)$")
_TEXT_UNIT = re.compile(r"^(.*?\S)\s*\\(?:text|mbox)\{\s*[A-Za-z ]+\}(?:\^[23])?$")
_CHOICE = re.compile(r"^(?:\\text\{|\\textbf\{)?\(?([A-E])\)?\}?$")
_FRACTION = re.compile(r"^(-?)\\[dt]?frac\s*\{?(\d+)\}?\s*\{?(\d+)\}?$")
_INTERVAL = re.compile(r"^(?:\\left)?\s*[\(\[].*,.*(?:\\right)?\s*[\)\]]$")


def _number(gold: str) -> Optional[str]:
    text = gold.strip()
    return text if _NUMBER.fullmatch(text) else None


def _plain_integer(text: str) -> Optional[int]:
    try:
        return int(text)
    except ValueError:
        return None


def _thousands(value: int, separator: str) -> str:
    return f"{value:,}".replace(",", separator)


def renderings(gold: str) -> Iterator[tuple[str, str]]:
    """(rendering, answer text) pairs that state the same value as ``gold``."""
    g = gold.strip()
    yield "as-is", g
    number = _number(g)
    if number is not None:
        yield "unit-text", f"{number}\\text{{ cm}}"
        yield "unit-word", f"{number} meters"
        yield "dollars", f"\\${number}"
        yield "assignment", f"x = {number}"
        integer = _plain_integer(number)
        if integer is not None and abs(integer) >= 1000:
            yield "thousands-comma", _thousands(integer, ",")
            yield "thousands-brace", _thousands(integer, "{,}")
            yield "thousands-thin", _thousands(integer, "\\,")
            yield "thousands-bang", _thousands(integer, ",\\!")
        if integer is not None:
            yield "decimal-zero", f"{integer}.0"
        elif "." in number:
            value = Fraction(number)
            yield "fraction-of-decimal", f"\\frac{{{value.numerator}}}{{{value.denominator}}}"
    if _SEPARATED.fullmatch(g.replace(" ", "")) and "," in g:
        yield "separators-dropped", re.sub(r"[^\d-]", "", g)
    degrees = _DEGREES.match(g)
    if degrees:
        bare = degrees.group(1)
        yield "degrees-dropped", bare
        yield "degrees-circ-braced", f"{bare}^{{\\circ}}"
        yield "degrees-symbol", f"{bare}°"
        yield "degrees-word", f"{bare}\\text{{ degrees}}"
    unit = _TEXT_UNIT.match(g)
    if unit and not degrees:
        yield "unit-dropped", unit.group(1)
    if g.startswith("\\$"):
        yield "dollar-dropped", g[2:]
    choice = _CHOICE.match(g)
    if choice and (g.startswith("\\text") or "(" in g):
        letter = choice.group(1)
        for name, text in (
            ("choice-letter", letter),
            ("choice-paren", f"({letter})"),
            ("choice-text", f"\\text{{({letter})}}"),
            ("choice-textbf", f"\\textbf{{({letter})}}"),
            ("choice-text-letter", f"\\text{{{letter}}}"),
        ):
            yield name, text
    elif g.startswith("\\text{") and g.endswith("}"):
        yield "text-dropped", g[len("\\text{") : -1]
    fraction = _FRACTION.match(g)
    if fraction:
        sign, num, den = fraction.groups()
        yield "fraction-dfrac", f"{sign}\\dfrac{{{num}}}{{{den}}}"
        yield "fraction-slash", f"{sign}{num}/{den}"
        value = Fraction(int(num), int(den))
        digits = value.denominator
        for p in (2, 5):
            while digits % p == 0:
                digits //= p
        if digits == 1:  # a terminating decimal
            yield "fraction-as-decimal", f"{sign}{float(value):g}"
        else:
            yield "fraction-as-rounded-decimal", f"{sign}{float(value):.6f}"
    if "\\dfrac" in g:
        yield "dfrac-as-frac", g.replace("\\dfrac", "\\frac")
    if _INTERVAL.match(g) and "\\begin" not in g:
        stripped = g.replace("\\left", "").replace("\\right", "")
        if stripped != g:
            yield "brackets-without-left-right", stripped
        else:
            yield "brackets-with-left-right", f"\\left{g[0]}{g[1:-1]}\\right{g[-1]}"
        yield "brackets-without-spaces", stripped.replace(" ", "")
    if "\\cup" in g:
        yield "union-spaced", g.replace("\\cup", " \\cup ")


def derived_golds(gold: str) -> Iterator[tuple[str, str, str]]:
    """(rendering, gold with a unit, answer text) for numeric golds: the gold carries a unit, percent or degree
    sign that the response leaves out (or writes another way)."""
    number = _number(gold.strip())
    if number is None:
        return
    yield "gold-percent/bare", f"{number}\\%", number
    yield "gold-percent/plain-percent", f"{number}\\%", f"{number}%"
    yield "gold-percent/percent-text", f"{number}\\%", f"{number}\\text{{\\%}}"
    yield "gold-percent/percent-word", f"{number}\\%", f"{number} percent"
    yield "gold-plain-percent/bare", f"{number}%", number
    yield "gold-degrees/bare", f"{number}^\\circ", number
    yield "gold-degrees/circ-braced", f"{number}^\\circ", f"{number}^{{\\circ}}"
    yield "gold-unit/bare", f"{number}\\text{{ cm}}", number
    yield "gold-unit-squared/bare", f"{number}\\mbox{{ cm}}^2", number
    yield "gold-dollars/bare", f"\\${number}", number


WRAPPERS = {
    "boxed": lambda a: f"Adding them up gives the result.\nTherefore the answer is $\\boxed{{{a}}}$.",
    "answer-line": lambda a: f"Adding them up gives the result.\nAnswer: {a}",
    "answer-line-math": lambda a: f"Adding them up gives the result.\nAnswer: ${a}$",
    "gsm8k": lambda a: f"Adding them up gives the result.\n#### {a}",
    "final-answer-is": lambda a: (
        f"Adding them up gives the result.\nFinal Answer: The final answer is ${a}$. I hope it is correct."
    ),
    "answer-line-bold": lambda a: f"Adding them up gives the result.\n**Answer:** {a}",
    "answer-line-emphasis": lambda a: f"Adding them up gives the result.\nAnswer: **{a}**",
    "answer-line-then-remark": lambda a: f"Adding them up gives the result.\nAnswer: {a}\n\nI hope this helps.",
    "answer-line-boxed": lambda a: f"Adding them up gives the result.\nAnswer: $\\boxed{{{a}}}$",
    "answer-line-sentence": lambda a: f"Adding them up gives the result.\nAnswer: The answer is ${a}$.",
    "gsm8k-a": lambda a: f"Adding them up gives the result.\nA: {a}",
}
# Responses that state two answers, the gold and a wrong one (numeric golds): which one counts.
TWO_ANSWERS = {
    "box-then-answer-line": lambda first, last: f"So $\\boxed{{{first}}}$.\nChecking again.\nAnswer: {last}",
    "answer-line-then-box": lambda first, last: f"Answer: {first}\nChecking again, it is $\\boxed{{{last}}}$.",
    "two-boxes": lambda first, last: f"So $\\boxed{{{first}}}$.\nChecking again, it is $\\boxed{{{last}}}$.",
}

# Two-part answers (numeric golds: the parts are the gold and the gold plus one): (gold listing the parts, response).
# One box per part joined by ",", "and" or "or" states both parts, as math-verify reads it; boxes with words
# between them do not (the last box is the answer).
SEVERAL_PARTS = {
    "boxes-and": lambda a, b: (f"{a}, {b}", f"The answers are $\\boxed{{{a}}}$ and $\\boxed{{{b}}}$."),
    "boxes-named": lambda a, b: (f"{a}, {b}", f"So $a = \\boxed{{{a}}}$, $b = \\boxed{{{b}}}$."),
    "boxes-display": lambda a, b: (f"{a}, {b}", f"So\n\\[\\boxed{{{a}}}\\]\nand\n\\[\\boxed{{{b}}}\\]"),
    "named-equations": lambda a, b: (
        f"y_1 = {a}, y_2 = {b}",
        f"Thus\n$$y_1 = \\boxed{{{a}}}$$\nand\n$$y_2 = \\boxed{{{b}}}$$",
    ),
    "words-between": lambda a, b: (f"{a}, {b}", f"So $\\boxed{{{a}}}$, and checking the other case, $\\boxed{{{b}}}$."),
    "labelled-parts": lambda a, b: (f"{a}, {b}", f"(a) $\\boxed{{{a}}}$\n\n(b) $\\boxed{{{b}}}$"),
}


def _wrong(number: str) -> str:
    integer = _plain_integer(number)
    return str(integer + 1) if integer is not None else str(Fraction(number) + 1)


_SINGLE_EXPRESSION = re.compile(r"^[^,=;]*$")
_NOT_AN_EXPRESSION = ("\\text", "\\mbox", "\\in", "\\cup", "\\begin", "\\pm", "\\circ", "\\$", "\\%", "_")


def other_answers(gold: str) -> Iterator[tuple[str, str]]:
    """(rendering, answer text) pairs that are wrong, or may be: they catch a scorer that accepts too much.

    ``plus-one``: the gold plus 1 (always wrong); ``number-in-gold``: a number written inside a longer gold
    (``\\frac{3}{4}`` -> 3; mostly wrong, right for some equations such as ``x=5``)."""
    g = gold.strip()
    number = _number(g)
    if number is not None:
        yield "wrong-value", _wrong(number)
    elif _SINGLE_EXPRESSION.match(g) and not any(token in g for token in _NOT_AN_EXPRESSION):
        yield "plus-one", f"{g} + 1"
    if number is None:
        for literal in sorted(set(re.findall(r"\d+", g)))[:3]:
            yield "number-in-gold", literal


def rendering_cases(golds: list[str]) -> Iterator[Case]:
    for gold in golds:
        for name, text in renderings(gold):
            wrappers = WRAPPERS if name == "as-is" else ("boxed", "answer-line")
            for wrapper in wrappers:
                yield Case(f"{wrapper}/{name}", gold, WRAPPERS[wrapper](text))
        for name, derived, text in derived_golds(gold):
            for wrapper in ("boxed", "answer-line"):
                yield Case(f"{wrapper}/{name}", derived, WRAPPERS[wrapper](text))
        number = _number(gold.strip())
        if number is not None:
            for name, render in TWO_ANSWERS.items():
                yield Case(f"two-answers/{name}/last-right", gold, render(_wrong(number), number))
                yield Case(f"two-answers/{name}/first-right", gold, render(number, _wrong(number)))
            for name, render in SEVERAL_PARTS.items():
                yield Case(f"several-parts/{name}", *render(number, _wrong(number)))
        for name, text in other_answers(gold):
            for wrapper in ("boxed", "answer-line"):
                yield Case(f"{wrapper}/{name}", gold, WRAPPERS[wrapper](text))


def real_cases(data_dir: Path, limit: Optional[int] = None) -> Iterator[Case]:
    """The rollouts (graded with their recorded math-verify labels) and the reference solutions, at most
    ``limit`` rows of each file."""
    rollouts = data_dir / "rollout_groups.jsonl"
    if rollouts.is_file():
        for row in _rows(rollouts)[:limit]:
            for text, label in zip(row["responses"], row["correct_math_verify"]):
                yield Case("rollouts/gsm8k-gpt3", row["answer"], text, bool(label))
    for name in SOLUTION_FILES:
        path = data_dir / f"{name}.jsonl"
        if path.is_file():
            for row in _rows(path)[:limit]:
                if row.get("solution"):
                    yield Case(f"solutions/{name}", row["answer"], row["solution"], True)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def distinct_golds(data_dir: Path) -> list[str]:
    seen: dict[str, None] = {}
    for name in GOLD_FILES:
        path = data_dir / f"{name}.jsonl"
        if path.is_file():
            for row in _rows(path):
                seen.setdefault(str(row["answer"]).strip(), None)
    return list(seen)


# ----------------------------------------------------------------------------------------------- graders
def _reference_grades(chunk: list[tuple[str, str]]) -> list[tuple[bool, bool]]:
    """(math-verify default, dapo) for each (gold, response); runs in a worker process's main thread, where
    math-verify's own time limits work."""
    import logging

    from math_verify import parse, verify
    from verl.utils.reward_score.math_dapo import compute_score as dapo_score

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    out = []
    for gold, response in chunk:
        predicted = parse(response)
        mv = any(verify(parse(wrapped), predicted) for wrapped in (f"${gold}$", f"\\boxed{{{gold}}}"))
        try:
            dapo = bool(dapo_score(response, gold)["acc"])
        except Exception:  # verl's scorer asserts on some malformed boxes
            dapo = False
        out.append((mv, dapo))
    return out


def _gcpo_grades_in_process(chunk: list[tuple[str, str]]) -> list[bool]:
    from gcpo_core.rewards.math_reward import is_correct

    return [is_correct(response, gold) for gold, response in chunk]


def grade(cases: list[Case], processes: int) -> tuple[list[bool], list[tuple[bool, bool]]]:
    pairs = [(c.gold, c.response) for c in cases]
    chunks = [pairs[i : i + 200] for i in range(0, len(pairs), 200)]
    import gcpo_core.rewards.math_reward as math_reward

    with ProcessPoolExecutor(processes) as pool:
        references = [r for part in pool.map(_reference_grades, chunks) for r in part]
        if hasattr(math_reward, "score_answers"):  # bounded and batched over its own worker processes
            ours = [v.correct for v in math_reward.score_answers([(r, g) for g, r in pairs])]
        else:  # the scorer before it had a batch call
            ours = [r for part in pool.map(_gcpo_grades_in_process, chunks) for r in part]
    return ours, references


# ----------------------------------------------------------------------------------------------- report
def report(cases: list[Case], ours: list[bool], references: list[tuple[bool, bool]], examples: int) -> int:
    stats: dict[str, Counter] = defaultdict(Counter)
    shown: dict[tuple[str, str], list[Case]] = defaultdict(list)
    for case, gcpo, (mv, dapo) in zip(cases, ours, references):
        s = stats[case.kind]
        s["n"] += 1
        s["gcpo"] += gcpo
        s["mv"] += mv
        s["dapo"] += dapo
        for name, flag in (
            ("gcpo-/mv+", not gcpo and mv),
            ("gcpo+/mv-", gcpo and not mv),
            ("gcpo-/dapo+", not gcpo and dapo),
            ("gcpo+/dapo-", gcpo and not dapo),
        ):
            if flag:
                s[name] += 1
                if len(shown[(case.kind, name)]) < examples:
                    shown[(case.kind, name)].append(case)
        if case.label is not None:
            s["labelled"] += 1
            s["gcpo!=label"] += gcpo != case.label
    columns = ("n", "gcpo", "mv", "dapo", "gcpo-/mv+", "gcpo+/mv-", "gcpo-/dapo+", "gcpo+/dapo-", "gcpo!=label")
    print("| class | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for kind in sorted(stats):
        s = stats[kind]
        cells = [str(s[c]) if c != "gcpo!=label" or s["labelled"] else "" for c in columns]
        print(f"| {kind} | " + " | ".join(cells) + " |")
    total = Counter()
    for s in stats.values():
        total.update(s)
    print("| **all** | " + " | ".join(str(total[c]) for c in columns) + " |")
    if examples:
        for (kind, name), items in sorted(shown.items()):
            print(f"\n{kind} {name}:")
            for case in items:
                tail = case.response[-120:].replace("\n", "\\n")
                print(f"  gold {case.gold!r}  response ...{tail!r}")
    print(
        f"\ngcpo rejects what math-verify accepts: {total['gcpo-/mv+']} of {total['n']} cases "
        f"({len([k for k, s in stats.items() if s['gcpo-/mv+']])} classes)"
    )
    return total["gcpo-/mv+"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data-dir", type=Path, default=DEFAULT_DATA, help="the shared data folder (default %(default)s)"
    )
    parser.add_argument("--examples", type=int, default=2, help="disagreeing cases to print per class")
    parser.add_argument(
        "--limit",
        type=int,
        default=None,
        help="use only the first N distinct gold answers and N rows of each file of responses",
    )
    parser.add_argument("--processes", type=int, default=2, help="processes for the reference graders")
    args = parser.parse_args(argv)
    if not args.data_dir.is_dir():
        parser.error(f"no data folder at {args.data_dir}: the cases come from {SHARED_DATA_HOW}")
    golds = distinct_golds(args.data_dir)[: args.limit]
    cases = list(rendering_cases(golds))
    cases += list(real_cases(args.data_dir, args.limit))
    print(f"{len(golds)} distinct gold answers, {len(cases)} cases")
    ours, references = grade(cases, args.processes)
    report(cases, ours, references, args.examples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
