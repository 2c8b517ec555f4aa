"""Answer instructions wrapped around a bare problem (training data and evaluation share them)."""

INSTRUCTIONS = {
    # DAPO-Math-17K's own: the last line states the answer
    "dapo": (
        "Solve the following math problem step by step. The last line of your response should be of the form "
        "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
        'Remember to put your answer on its own line after "Answer:".'
    ),
    # the Qwen2.5-Math / verl MATH convention
    "boxed": "{problem}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}.",
}


def instruct(problem: str, instruction: str = "dapo") -> str:
    try:
        return INSTRUCTIONS[instruction].format(problem=problem)
    except KeyError:
        raise ValueError(f"unknown instruction {instruction!r}; allowed: {', '.join(sorted(INSTRUCTIONS))}") from None
