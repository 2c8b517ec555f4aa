"""Answer checking with math-verify, bounded in time: is a response's final answer equal to the gold answer?

Every check runs in a worker process of a :class:`~gcpo_core.rewards.deadline_pool.DeadlinePool` with a deadline
per answer (``timeout_s``, default 5 s, of wall time less the worker's wait for a CPU): math-verify's own limits are
signal alarms that only work on a process's main thread, and verl calls reward functions from threads, where one
pathological answer (``\\boxed{9^{9^{9^{9^{9}}}}}``) would otherwise hold the GIL for ever. An answer that misses
its deadline is wrong and marked ``timed_out``. One worker call reads the response once and returns both the
verdict and the answer it read.

How an answer is read (docs/method.md, "Rewards", lists where this differs from math-verify's defaults):

* the final answer is the math of Minerva's "The final answer is $x$. I hope" (whatever follows it, over any
  box, as math-verify's first priority), else of "The final answer is $x$" after the last box, else the last
  ``\\boxed{}``, else the paragraph after the last answer marker (DAPO's ``Answer:``, GSM8K's ``####``, "The final
  answer is"), else the last 300 characters; markdown emphasis around it (``**7**``) is dropped;
* a box, or an answer statement in bare LaTeX, is read as the content of a box (so ``Answer: 6 - 5i`` is
  6 - 5i, not math-verify's 5); a statement with ``$``s or words ("Answer: The answer is $7$.") is read as
  math-verify reads it; when the first reading gives no mathematical object, the other is used as well;
* the gold answer is read both as a box and as inline LaTeX (``$gold$``), and a response matches when it
  matches either reading (``25\\%`` is a number only in the second: ``\\boxed{25}`` then matches, as in
  math-verify's defaults);
* ``°`` / ``\\degree`` are read as ``^\\circ``, ``%`` as ``\\%`` (in LaTeX a bare ``%`` starts a comment),
  ``\\,`` between digit groups (``1\\,000``) as nothing, and a trailing period inside a box
  (``\\boxed{104.}``) is dropped: math-verify reads none of these;
* boxes in a row with only separators between them (``\\boxed{2}, \\boxed{5}``, "... and ...", "or", math
  delimiters, and inside the next box's math the name it is the value of: ``$a = \\boxed{3}$, $b = \\boxed{5}$``)
  are one answer, 2, 5, as math-verify joins boxed math; here also when only spacing separates them (``;``,
  ``\\quad``, line breaks), where math-verify reads the last box alone; so are boxes inside one math environment,
  whatever stands between them there; boxes with words between them are not (in a gold, boxes outside math are
  joined as math-verify joins them: under 10 characters apart, or under 70 with "and", "or", "," or ";"), and a
  gold that holds boxes is read as a response is;
* a percentage is its number on both sides (``\\boxed{28\\%}``, ``28 percent``, ``28 percentage``, ``28 pct`` and
  the gold ``28\\%`` or ``28``: math-verify rejects the box against ``28``), digit groups spaced by thousands
  (``1 000``) are one number also in a box, and a single number with a decimal comma (``1,22``) is read both as
  math-verify reads plain text (1.22) and as a box reads it (a pair);
* a gold answer in words (``Monday``, ``\\text{east}``) matches when the response's stated answer -- its box or
  answer line, or what follows its last "answer is" -- has the same words (case, ``\\text{}`` and punctuation
  aside); math-verify parses no words.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Sequence

from gcpo_core.encoding.text_span import last_boxed
from gcpo_core.rewards.deadline_pool import DeadlinePool

logger = logging.getLogger(__name__)

# Wall time one answer may take (gold and response parsing and the comparison); beyond it the answer is wrong.
DEFAULT_TIMEOUT_S = 5.0
# Answers per worker call in score_answers: amortises the ~0.2 ms round trip, small enough to spread a batch
# over the workers.
BATCH_SIZE = 32
# The last answer statement: DAPO "Answer: x", GSM8K "#### x" and "A: x", "The final answer is x".
_ANSWER_MARKER = re.compile(
    r"(?:^|\n)\s*(?:\*\*)?(?:final answer|answer|a)\s*(?:\*\*)?\s*[:：]\s*(?:\*\*)?|####|the final answer is",
    re.IGNORECASE,
)
_TAIL_CHARS = 300
_DEGREE_SIGN = re.compile(r"\s*(?:°|\\degree\b)")
_THIN_SPACE_IN_NUMBER = re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))")
_BARE_PERCENT = re.compile(r"(?<!\\)%")
# An answer statement written as a sentence or with math delimiters ("The answer is $x$.", "18 dollars") is read
# by math-verify; a bare LaTeX one ("6 - 5i", "\\sqrt{51}", "3, 5, 7") as the content of a box.
_MATH_DELIMITER = re.compile(r"(?<!\\)\$|\\\(|\\\[")
_TEXT_GROUP = re.compile(r"\\(?:text|textbf|textit|mbox|mathrm|mathbf)\s*\{[^{}]*\}")
_LATEX_COMMAND = re.compile(r"\\(?:begin|end)\s*\{[^{}]*\}|\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]{3,}")
_TRAILING_PUNCTUATION = re.compile(r"(?:\s|\\[,;!]|[.,;])+$")
# markdown bold / italics around an answer ("Answer: **7**"), not a superscript star (z^*)
_LEADING_EMPHASIS = re.compile(r"^(?:\*+|_+)(?=\S)")
_TRAILING_EMPHASIS = re.compile(r"(?<=[^\s^_{])\*+$")
_PARAGRAPH_END = re.compile(r"\n\s*\n")
# what may stand between boxes that together state one answer: separators and math delimiters ("\\boxed{2}, \\boxed{5}",
# "$\\boxed{2}$ or $\\boxed{5}$", "\\[..\\] and \\[..\\]"), then, inside the next box's math, the name it is the value of
# ("$x = \\boxed{2}$ and $y = \\boxed{5}$", "$$y_1 = \\boxed{..}$$"), as math-verify joins boxed environments
_BOX_SEPARATOR = re.compile(
    r"^(?:\s|[,;$]|\\[,;:! ]|\\q?quad\b|\\[\[\]()]|\b(?:and|or)\b|\\text\s*\{\s*(?:and|or|,)\s*\})*"
    r"(?:(?<=[$,(\[])\s*\\?[A-Za-z]+(?:_\{?[A-Za-z0-9]+\}?)?'*\s*=\s*)?$"
)
# what lets math-verify join two boxes outside math a little apart ("\\boxed{1} papers and \\boxed{2} bins")
_PLAIN_BOX_SEPARATOR = re.compile(r"\b(?:and|or)\b|,|;")
# digit groups spaced by thousands ("1 000", "12 345 678"), as math-verify reads an answer line
_SPACED_THOUSANDS = re.compile(r"(?<![\d.,])\d{1,3}(?: \d{3})+(?![\d.,])")
# a single number with a decimal comma ("1,22", "1000,99"): math-verify reads it as a decimal, a box as a pair
_DECIMAL_COMMA = re.compile(r"^-?\d+,(?:\d{1,2}|\d{4,})$")
# a percentage's sign or word after the number ("28\\%", "28 %", "28 percent", "28 percentage", "28 pct"), as
# math-verify's percent suffix reads them
_TRAILING_PERCENT = re.compile(r"\s*(?:\\?%|\\text\s*\{\s*%\s*\}|\bpercent(?:age)?\b|\bpct\b\.?)\s*$", re.IGNORECASE)
# a gold answer in words ("Monday", "\\text{east}", "(C)" is math) and the phrase stating one
_TEXT_ANSWER = re.compile(r"^[A-Za-z][A-Za-z' -]*$")
# a word answer's wrapper, whose content is the answer ("\\text{Monday}")
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
_ANSWER_IS = re.compile(r"\banswer\s+is\s*[:：]?\s*", re.IGNORECASE)
# a math environment as math-verify's extraction finds one ($$..$$, \\[..\\], $..$ and \\(..\\) on one line), and up to
# five of them joined by "and", "or" or commas
_MATH_ENV = (
    r"(?:(?<!\\)\$\$(?:[^$]|\$(?!\$))+?(?<!\\)\$\$|(?<!\\)\\\[(?:[^\\]|\\(?!\]))+?(?<!\\)\\\]"
    r"|(?<![\\\d])\$(?:\\\$|[^\n$])+?(?<!\\)\$|(?<!\\)\\\((?:[^\\\n]|\\(?!\)))+?(?<!\\)\\\))"
)
_MATH_ENVS = rf"{_MATH_ENV}(?:\s*(?:,?and|,?or|,)\s*{_MATH_ENV}){{0,5}}"
# Minerva's "The final answer is $x$. I hope it is correct.": math-verify's first priority, above any box; "final
# answer ... is $x$" without "I hope" ranks with the boxes, and the later of the two wins
_FINAL_ANSWER_HOPE = re.compile(rf"final answer is:?\s*({_MATH_ENVS})\.?\s?I hope", re.IGNORECASE | re.DOTALL)
_FINAL_ANSWER_IS = re.compile(rf"final answer.{{0,100}}?\s+is:?\s*({_MATH_ENVS})", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class Verdict:
    """A response's grade: ``correct``; ``answer``, its final answer as math-verify read it ('' when none);
    ``timed_out`` when the check missed its deadline on both tries (then ``correct`` is False); ``retried`` when
    the first try missed it (on a busy machine the second usually does not)."""

    correct: bool
    answer: str = ""
    timed_out: bool = False
    retried: bool = False


def final_answer_region(text: str, near_boxes: bool = False) -> str:
    """The part of a response that states its final answer: the math of a final-answer statement (see
    :func:`final_statement`), else the last ``\\boxed{}``, else the paragraph after the last answer marker, else
    the last 300 characters."""
    statement = final_statement(text)
    if statement is not None:
        return statement
    spans = final_boxes(text, near_boxes)
    if spans:
        return text[spans[0][0] : spans[-1][1]]
    markers = list(_ANSWER_MARKER.finditer(text))
    if markers:  # the statement ends with its paragraph ("Answer: 7\n\nI hope this helps!" is 7)
        return _PARAGRAPH_END.split(text[markers[-1].end() :].strip(), maxsplit=1)[0]
    return text[-_TAIL_CHARS:]


def final_statement(text: str) -> Optional[str]:
    """The math of the final-answer statement that states the response's answer, as math-verify's priorities pick
    it: the last "final answer is $x$. I hope" whatever follows (remarks, other boxes), else the last "final answer
    ... is $x$" when it ends after the last box; None otherwise, and when the statement's math holds a box (the box
    is read then)."""
    found = _last(_FINAL_ANSWER_HOPE, text)
    if found is None:
        found = _last(_FINAL_ANSWER_IS, text)
        spans = final_boxes(text) if found is not None else []
        if found is not None and spans and found.end() < spans[-1][1]:
            return None
    if found is None or "\\boxed" in found.group(1) or "\\fbox" in found.group(1):
        return None
    return found.group(1)


def _last(pattern: re.Pattern, text: str) -> Optional[re.Match]:
    last = None
    for last in pattern.finditer(text):
        pass
    return last


def final_boxes(text: str, near_boxes: bool = False) -> list[tuple[int, int]]:
    """(start, end) of the last box and of the boxes just before it with nothing but separators (commas, ``$``,
    "and", spaces) between them, or inside the same math environment, in order: ``\\boxed{2}, \\boxed{5}`` states one
    answer, 2, 5. ``near_boxes`` (a gold answer's reading): also boxes outside math close together, as math-verify
    joins them ("\\boxed{1} papers and \\boxed{2} bins" is 1, 2); in a response the last box stands alone then, so
    that "first \\boxed{3}, but fixing a slip: \\boxed{7}" is 7 (math-verify reads 3, 7)."""
    spans = []
    end = len(text)
    environments = None
    while True:
        span = last_boxed(text[:end])
        if span is None:
            return spans
        between = text[span[1] : spans[0][0]] if spans else ""
        if spans and not _BOX_SEPARATOR.match(between):
            # words between them, but one math environment around both ("$$\\boxed{(3, 3)} \\text{ for (a) and }
            # \\boxed{(1, 1)}$$"): math-verify reads the environment, every box in it; and, in a gold, boxes outside
            # any math environment math-verify joins as its plain-box rule does (latex2sympy2_extended's
            # extract_boxed_content): under 10 characters between them, or under 70 with "and", "or", "," or ";"
            if environments is None:
                environments = [m.span() for m in re.finditer(_MATH_ENV, text, re.DOTALL)]
            same = any(start <= span[0] and spans[0][1] <= stop for start, stop in environments)
            outside = not any(start < spans[-1][1] <= stop for start, stop in environments)
            near = len(between) < 10 or (len(between) < 70 and _PLAIN_BOX_SEPARATOR.search(between) is not None)
            if not same and not (near_boxes and outside and near):
                return spans
        spans.insert(0, span)
        end = span[0]


def box_contents(region: str) -> str:
    """The contents of the boxes of a region that starts with a box (:func:`final_answer_region`'s, which holds the
    boxes of one answer and what is between them), joined by ", " when there are several."""
    spans, end = [], len(region)
    while (span := last_boxed(region[:end])) is not None:
        spans.insert(0, span)
        end = span[0]
    return ", ".join(region[a:b][region[a:b].find("{") + 1 : -1] for a, b in spans)


def answer_content(region: str) -> str:
    """The answer itself: a box's content or an answer line's text, without enclosing ``$``s and trailing
    punctuation, with degree signs and thin spaces in numbers normalised (see the module docstring)."""
    text = region.strip()
    if text.startswith(("\\boxed", "\\fbox")):
        text = box_contents(text) if "{" in text and text.endswith("}") else ""
    text = _LEADING_EMPHASIS.sub("", text.strip())
    text = _TRAILING_PUNCTUATION.sub("", _TRAILING_EMPHASIS.sub("", _TRAILING_PUNCTUATION.sub("", text)))
    if len(text) >= 2 and text.startswith("$") and text.endswith("$"):
        text = _TRAILING_PUNCTUATION.sub("", text.strip("$").strip())
    return _normalise(text)


def _normalise(latex: str) -> str:
    latex = _DEGREE_SIGN.sub(lambda _: "^{\\circ}", latex)
    latex = _SPACED_THOUSANDS.sub(lambda m: m.group(0).replace(" ", ""), latex)
    return _BARE_PERCENT.sub(lambda _: "\\%", _THIN_SPACE_IN_NUMBER.sub("", latex))


def _without_percent(content: str) -> str:
    """A percentage as its number ("28\\%" -> "28"): the gold may be written either way."""
    stripped = _TRAILING_PERCENT.sub("", content)
    return stripped if stripped and stripped != content else content


def _words(text: str) -> str:
    """A text answer for comparison: ``\\text{}`` wrappers, ``$``s and punctuation dropped, lower case."""
    text = _TEXT_WRAPPER.sub(r"\1", text)
    return " ".join(re.sub(r"[^A-Za-z' -]", " ", text).lower().split())


def text_gold(gold: str) -> Optional[str]:
    """A gold answer in words ("Monday", "\\text{east}") as :func:`_words` writes it, else None."""
    words = _words(gold)
    raw = _TEXT_WRAPPER.sub(r"\1", gold).strip().strip("$").strip()
    return words if len(words) >= 2 and _TEXT_ANSWER.match(raw) else None


def _stated_words(response: str) -> list[str]:
    """The response's final answer in words: its answer content, and what follows its last "answer is"."""
    region = final_answer_region(response)
    candidates = [_words(answer_content(region))]
    phrases = list(_ANSWER_IS.finditer(response))
    if phrases:
        tail = response[phrases[-1].end() :]
        candidates.append(_words(re.split(r"[.!?\n]", tail, maxsplit=1)[0]))
    return [c for c in candidates if c]


def _has_math(reading: list) -> bool:
    return any(not isinstance(item, str) for item in reading)


# math delimiters a data set may wrap a gold answer in (longest first: "$$" before "$")
_GOLD_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def unwrap_gold(gold: str) -> str:
    """A gold answer without the math delimiters or box a data set wrapped it in (``$28\\%$``, ``$$x$$``,
    ``\\(x\\)``, ``\\[x\\]``, ``\\boxed{x}``, nested), so that every form of one answer is read alike: inside
    ``$...$`` a percent sign, read as a box's content, matched nothing. A gold that is not wrapped as a whole
    (``$1$ and $2$``) is left as it is."""
    text = gold.strip()
    while True:
        for left, right in _GOLD_DELIMITERS:
            inner = text[len(left) : -len(right)] if len(text) > len(left) + len(right) else ""
            if text.startswith(left) and text.endswith(right) and inner.strip() and "$" not in inner:
                text = inner.strip()
                break
        else:
            if (
                text.startswith("\\boxed{")
                and text.endswith("}")
                and _closing_brace(text, len("\\boxed")) == len(text) - 1
            ):
                text = text[len("\\boxed{") : -1].strip()
                continue
            return text


def _closing_brace(text: str, opening: int) -> int:
    """The index of the brace that closes the one at ``opening`` (-1 when none does)."""
    depth = 0
    for index in range(opening, len(text)):
        if text[index] == "{" and (index == 0 or text[index - 1] != "\\"):
            depth += 1
        elif text[index] == "}" and (index == 0 or text[index - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return index
    return -1


@lru_cache(maxsize=4096)  # a group's responses share one gold answer
def _gold_reading(gold: str) -> tuple:
    from math_verify import parse

    unwrapped = unwrap_gold(gold)
    if "\\boxed" in unwrapped or "\\fbox" in unwrapped:
        # a gold that holds boxes of its own (a reference solution, several answers): its final answer, read as a
        # response is read, as math-verify's defaults read it ("\\boxed{1} no no \\boxed{2}" is 2, not 1, 2)
        return tuple(_response_reading(unwrapped, near_boxes=True))
    text = _without_percent(_normalise(unwrapped))
    reading = parse(f"\\boxed{{{text}}}", parsing_timeout=None) + parse(f"${text}$", parsing_timeout=None)
    if _DECIMAL_COMMA.match(text):  # "1,22": also the decimal math-verify reads in plain text
        reading += parse(text, parsing_timeout=None)
    return tuple(reading) if reading else tuple(parse(text, parsing_timeout=None))


def is_bare_latex(content: str) -> bool:
    """True for an answer written as bare LaTeX (no ``$``, ``\\(`` or ``\\[``, no word of three letters or more
    outside ``\\text{}`` and LaTeX commands): math-verify reads it fully only as the content of a box."""
    if _MATH_DELIMITER.search(content):
        return False
    return not _WORD.search(_LATEX_COMMAND.sub(" ", _TEXT_GROUP.sub(" ", content)))


def _response_reading(response: str, near_boxes: bool = False) -> list:
    from math_verify import parse

    region = final_answer_region(response, near_boxes)
    content = _without_percent(answer_content(region))

    def as_box() -> list:
        return parse(f"\\boxed{{{content}}}", parsing_timeout=None) if content else []

    def as_written() -> list:
        return parse(region, parsing_timeout=None)

    if region.lstrip().startswith(("\\boxed", "\\fbox")) or is_bare_latex(content):
        first, second = as_box, as_written
    else:
        first, second = as_written, as_box
    reading = first()
    if _DECIMAL_COMMA.match(content):  # "1,22": a decimal as written, a pair as a box; either may be meant
        return reading + second()
    return reading if _has_math(reading) else reading + second()


def verdict_unbounded(pair: tuple[str, str]) -> tuple[bool, str]:
    """(correct, answer) for a (response, gold) pair, with no time bound: what the pool's workers run. Call
    :func:`score_answers` instead; on a thread of a process you care about this can block for ever."""
    from math_verify import verify

    response, gold = pair
    reading = _response_reading(response)
    answer = next((item for item in reading if isinstance(item, str)), str(reading[0]) if reading else "")
    gold_reading = _gold_reading(gold)
    if reading and gold_reading and verify(list(gold_reading), reading, timeout_seconds=None):
        return True, answer
    words = text_gold(gold)  # a gold in words: the stated answer's words equal (math-verify reads no words)
    if words is not None and words in _stated_words(response):
        return True, answer or words
    return False, answer


def warm_up_worker() -> None:
    """Import math-verify, sympy and the LaTeX parser and compile their patterns: a worker does this before its
    first answer, whose deadline must not pay for it."""
    verdict_unbounded(("So $\\boxed{\\frac{1}{2}}$.", "0.5"))
    verdict_unbounded(("Answer: 1,000", "1000"))


# ----------------------------------------------------------------------------------------------- bounded
_pool: Optional[DeadlinePool] = None
_pool_lock = threading.Lock()


def default_workers() -> int:
    """Worker processes of the scoring pool: ``GCPO_SCORER_WORKERS``, else min(4, CPUs); they start on demand,
    so a caller that scores from one thread uses one."""
    configured = os.environ.get("GCPO_SCORER_WORKERS")
    if configured:
        if not configured.isdigit() or int(configured) < 1:
            raise ValueError(f"GCPO_SCORER_WORKERS must be a positive integer, got {configured!r}")
        return int(configured)
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def scoring_pool() -> DeadlinePool:
    """This process's scoring pool (one per process; a forked child gets its own)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool._pid != os.getpid():
            _pool = DeadlinePool(
                f"{__name__}:verdict_unbounded", workers=default_workers(), initializer=f"{__name__}:warm_up_worker"
            )
        return _pool


def score_answers(
    pairs: Sequence[tuple[str, str]],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    batch_size: int = BATCH_SIZE,
    progress: bool = False,
) -> list[Verdict]:
    """Grade (response, gold) pairs, each within ``timeout_s`` (wall time less the worker's wait for a CPU), batched
    over the pool's workers.

    Safe from any thread. A response or gold that is empty is wrong without a worker call.
    """
    verdicts: list[Optional[Verdict]] = [None] * len(pairs)
    todo = []
    for index, (response, gold) in enumerate(pairs):
        if not response or not str(response).strip() or not str(gold).strip():
            verdicts[index] = Verdict(False)
        else:
            todo.append(index)
    batches = [todo[i : i + batch_size] for i in range(0, len(todo), batch_size)]
    pool = scoring_pool()

    def run(batch: list[int]) -> None:
        outcomes = pool.map([(str(pairs[i][0]), str(pairs[i][1])) for i in batch], timeout_s)
        for index, outcome in zip(batch, outcomes):
            if outcome.timed_out:
                verdicts[index] = Verdict(False, "", True, outcome.retried)
                logger.warning(
                    "an answer missed its %g s bound on both tries and is scored wrong (%d in this "
                    "process); it ends with %r",
                    timeout_s,
                    pool.timeouts,
                    str(pairs[index][0])[-160:],
                )
            else:
                verdicts[index] = Verdict(*outcome.value, retried=outcome.retried)

    if len(batches) <= 1:
        for batch in batches:
            run(batch)
    else:
        from tqdm import tqdm

        with ThreadPoolExecutor(min(pool.workers, len(batches))) as threads:
            for _ in tqdm(
                threads.map(run, batches), total=len(batches), desc="scoring", unit="batch", disable=not progress
            ):
                pass
    return verdicts  # type: ignore[return-value]


def score_answer(response: str, ground_truth: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Verdict:
    """Grade one response against its gold answer (see :func:`score_answers`)."""
    return score_answers([(response, ground_truth)], timeout_s)[0]


def is_correct(response: str, ground_truth: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """True when the final answer of ``response`` is mathematically equal to ``ground_truth``.

    Leading zeros, fractions vs decimals, LaTeX vs plain forms are handled by math-verify (AIME's "025" equals
    25). A response without a parsable answer is wrong; so is an empty one, and one not checked in time.
    """
    return score_answer(response, ground_truth, timeout_s).correct
