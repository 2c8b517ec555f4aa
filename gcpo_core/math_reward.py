"""Answer checking with math-verify: is a response's final answer equal to the gold answer?

math-verify bounds its parsing and comparison with signal alarms, which only work on a process's main thread;
elsewhere (Ray actors' threads, thread pools) the alarms are switched off.
"""

from __future__ import annotations

import re
import threading
from typing import Optional

from gcpo_core.text_span import last_boxed

# The last answer statement: DAPO "Answer: x", GSM8K "#### x" and "A: x", "The final answer is x".
_ANSWER_MARKER = re.compile(r"(?:^|\n)\s*(?:\*\*)?(?:final answer|answer|a)\s*(?:\*\*)?\s*[:：]|####|the final answer is",
                            re.IGNORECASE)
_TAIL_CHARS = 300


def final_answer_region(text: str) -> str:
    """The part of a response that states its final answer: the last ``\\boxed{}``, else the text after the
    last answer marker, else the last 300 characters."""
    span = last_boxed(text)
    if span is not None:
        return text[span[0] : span[1]]
    markers = list(_ANSWER_MARKER.finditer(text))
    if markers:
        return text[markers[-1].end() :].strip()
    return text[-_TAIL_CHARS:]


def _parse_answer(region: str, parse_timeout: Optional[int]):
    """math-verify's reading of an answer region. A bare LaTeX answer ("Answer: \\sqrt{51}", "Answer: 6 - 5i")
    has no anchor math-verify's LaTeX extraction recognises, so it is read as the content of a box first."""
    from math_verify import parse

    if region.lstrip().startswith(("\\boxed", "\\fbox")):
        return parse(region, parsing_timeout=parse_timeout)
    bare = region.strip().rstrip(".").strip()
    if bare.startswith("$") and bare.endswith("$"):
        bare = bare.strip("$").strip()
    if bare:
        boxed = parse(f"\\boxed{{{bare}}}", parsing_timeout=parse_timeout)
        if boxed:
            return boxed
    return parse(region, parsing_timeout=parse_timeout)


def _timeouts() -> tuple[Optional[int], Optional[int]]:
    on_main = threading.current_thread() is threading.main_thread()
    return (5, 5) if on_main else (None, None)


def is_correct(response: str, ground_truth: str) -> bool:
    """True when the final answer of ``response`` is mathematically equal to ``ground_truth``.

    Leading zeros, fractions vs decimals, LaTeX vs plain forms are handled by math-verify (AIME's "025" equals
    25). A response without a parsable answer is wrong; so is an empty one.
    """
    from math_verify import parse, verify

    if not response or not response.strip() or not str(ground_truth).strip():
        return False
    parse_timeout, verify_timeout = _timeouts()
    gold = parse(f"\\boxed{{{ground_truth}}}", parsing_timeout=parse_timeout)
    if not gold:
        gold = parse(str(ground_truth), parsing_timeout=parse_timeout)
    predicted = _parse_answer(final_answer_region(response), parse_timeout)
    if not gold or not predicted:
        return False
    return bool(verify(gold, predicted, timeout_seconds=verify_timeout))


def extracted_answer(response: str) -> str:
    """The final answer as math-verify reads it (its string form), or '' when none is found."""
    parse_timeout, _ = _timeouts()
    parsed = _parse_answer(final_answer_region(response), parse_timeout)
    return str(parsed[-1]) if parsed else ""
