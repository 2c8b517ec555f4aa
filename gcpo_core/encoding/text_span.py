"""Which part of a response is embedded: the full response, the reasoning only, or the final answer only.

Two rollouts that reach the same answer by different routes should look different, and two that share a
route should look alike whatever their last line says; ``reasoning`` drops the final answer for that
reason, ``answer`` keeps only it (an ablation: diversity of answers rather than of reasoning).
"""

from __future__ import annotations

import re
from typing import Callable, Optional

from gcpo_core.credit.registry import Registry

TextSpan = Callable[[str], str]
TEXT_SPANS: Registry[TextSpan] = Registry("text span")

_THINK_MARKER = re.compile(r"</?think>", re.IGNORECASE)
# A last line that states the answer: DAPO's "Answer: ...", GSM8K's "#### n" and "A: n", "The final answer is ...".
_ANSWER_LINE = re.compile(
    r"^\s*(?:\*\*)?(?:final answer|the final answer is|answer|a)\s*(?:\*\*)?\s*[:：]|^\s*####", re.IGNORECASE
)


def last_boxed(text: str) -> Optional[tuple[int, int]]:
    """(start, end) of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, or None.

    Hand-written rather than imported: verl's equivalent lives in verl, which gcpo_core must not import.
    """
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0:
        return None
    depth = 0
    for pos in range(brace, len(text)):
        if text[pos] == "{":
            depth += 1
        elif text[pos] == "}":
            depth -= 1
            if depth == 0:
                return start, pos + 1
    return None


@TEXT_SPANS.register("full")
def full_response(text: str) -> str:
    """The response as generated (surrounding whitespace removed)."""
    return text.strip()


@TEXT_SPANS.register("reasoning")
def reasoning_only(text: str) -> str:
    """The response without ``<think>`` markers (their content is kept), a trailing answer line and the last
    ``\\boxed{}``."""
    body = _THINK_MARKER.sub(" ", text).strip()
    lines = body.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if lines and _ANSWER_LINE.match(lines[-1]):
        lines.pop()
    body = "\n".join(lines)
    span = last_boxed(body)
    if span is not None:
        body = body[: span[0]] + body[span[1] :]
    return body.strip()


@TEXT_SPANS.register("answer")
def answer_only(text: str) -> str:
    """The final answer: the content of the last ``\\boxed{}``, else the answer line, else the last line."""
    body = _THINK_MARKER.sub(" ", text).strip()
    span = last_boxed(body)
    if span is not None:
        boxed = body[span[0] : span[1]]
        return boxed[boxed.find("{") + 1 : -1].strip()
    lines = [line for line in body.splitlines() if line.strip()]
    if not lines:
        return ""
    last = lines[-1]
    match = _ANSWER_LINE.match(last)
    return (last[match.end() :] if match else last).strip()


def select_span(text: str, span: str = "full") -> str:
    return TEXT_SPANS.get(span)(text)
