import pytest

from gcpo_core.encoding.text_span import last_boxed, select_span

DAPO = "<think>\nLet x = 3. Then 2x = 6.\n</think>\nSo the value is \\boxed{6}.\nAnswer: 6"
GSM8K = "He runs 3*3=<<3*3=9>>9 sprints\nSo he runs 9*60=<<9*60=540>>540 meters\nA: 540"


def test_full_keeps_everything():
    assert select_span(DAPO, "full") == DAPO.strip()


def test_reasoning_drops_think_markers_answer_line_and_last_boxed():
    reasoning = select_span(DAPO, "reasoning")
    assert "<think>" not in reasoning and "</think>" not in reasoning
    assert "Let x = 3. Then 2x = 6." in reasoning
    assert "Answer:" not in reasoning and "\\boxed" not in reasoning
    assert select_span(GSM8K, "reasoning").endswith("540 meters")


def test_answer_only_prefers_the_last_boxed_then_the_answer_line():
    assert select_span(DAPO, "answer") == "6"
    assert select_span(GSM8K, "answer") == "540"
    assert select_span("first \\boxed{1} then \\boxed{\\frac{1}{2}}", "answer") == "\\frac{1}{2}"
    assert select_span("no marker\nlast line 42", "answer") == "last line 42"
    assert select_span("   ", "answer") == ""


def test_last_boxed_balances_braces_and_survives_unclosed_ones():
    text = "a \\boxed{\\frac{a}{b}} b"
    start, end = last_boxed(text)
    assert text[start:end] == "\\boxed{\\frac{a}{b}}"
    assert last_boxed("\\boxed{unclosed") is None
    assert last_boxed("nothing") is None


def test_unknown_span_is_rejected():
    with pytest.raises(ValueError, match="allowed: answer, full, reasoning"):
        select_span("x", "middle")
