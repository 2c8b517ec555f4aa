import json

from gcpo_core.math_reward import extracted_answer, final_answer_region, is_correct


def test_common_answer_formats():
    assert is_correct("So the total is \\boxed{\\frac{1}{2}}.", "0.5")
    assert is_correct("Reasoning...\nAnswer: 025", "25")
    assert is_correct("He runs 9*60=<<9*60=540>>540 meters\nA: 540", "540")
    assert is_correct("blah\n#### 18", "18")
    assert not is_correct("Answer: 24", "25")
    assert not is_correct("", "25") and not is_correct("   ", "25")
    assert not is_correct("no answer here at all", "25")


def test_the_final_answer_wins_over_numbers_on_the_way():
    assert final_answer_region("x = 3\nAnswer: 7") == "7"
    assert is_correct("First I got \\boxed{3}, but fixing a slip: \\boxed{7}", "7")
    assert extracted_answer("Answer: 7") == "7"


def test_works_off_the_main_thread():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(lambda r: is_correct(r, "540"), ["A: 540", "A: 54"])) == [True, False]


def test_agrees_with_the_recorded_math_verify_labels_on_real_gsm8k_outputs(shared_data):
    rows = [json.loads(line) for line in (shared_data / "rollout_groups.jsonl").read_text().splitlines()[:50]]
    pairs = [(text, row["answer"], label) for row in rows for text, label in zip(row["responses"], row["correct_math_verify"])]
    agree = sum(is_correct(text, answer) == label for text, answer, label in pairs)
    assert agree == len(pairs)


def test_aime_leading_zeros(shared_data):
    rows = [json.loads(line) for line in (shared_data / "aime24.jsonl").read_text().splitlines()]
    padded = [r for r in rows if r["answer"].startswith("0")]
    assert padded, "aime24 has answers such as 025"
    for r in padded:
        assert is_correct(f"Answer: {int(r['answer'])}", r["answer"])


def test_bare_latex_answer_lines_are_read_whole():
    # without a box, math-verify alone reads "Answer: 6 - 5i" as 5 and "Answer: \sqrt{51}" as nothing
    assert is_correct("Work...\nAnswer: 6 - 5i", "6 - 5i")
    assert is_correct("Work...\nAnswer: \\sqrt{51}", "\\sqrt{51}")
    assert is_correct("Answer: $3\\sqrt{13}$.", "3\\sqrt{13}")
    assert is_correct("Answer: 3, 5, 7", "3, 5, 7")
    assert not is_correct("Work...\nAnswer: 6 + 5i", "6 - 5i")
    assert not is_correct("Answer: \\sqrt{52}", "\\sqrt{51}")


def test_every_gold_answer_of_math500_verifies_against_itself(shared_data):
    rows = [json.loads(line) for line in (shared_data / "math500.jsonl").read_text().splitlines()]
    for r in rows:
        assert is_correct(f"Reasoning.\nAnswer: {r['answer']}", r["answer"]), r["answer"]
        assert is_correct(f"So the answer is \\boxed{{{r['answer']}}}.", r["answer"]), r["answer"]
