"""Runs the ``>>>`` examples of a docstring, so that the examples users copy stay true."""

import doctest


def run_examples(obj: object) -> None:
    """Run the examples in ``obj``'s own docstring (not its members') in its module's namespace; fail if it has
    none (an example that is never run proves nothing) or if any gives other output than it shows."""
    tests = doctest.DocTestFinder(recurse=False).find(obj)
    examples = sum(len(test.examples) for test in tests)
    assert examples, f"{obj.__qualname__} has no example in its docstring"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
    assert runner.tries == examples
