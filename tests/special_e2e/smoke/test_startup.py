"""A run's start-up phases: lines stamped as they arrive, each phase at the first line that marks it."""

import io

from tests.special_e2e.smoke.report import startup_table
from tests.special_e2e.smoke.startup import STARTUP_MARKERS, TimedLog, read_timed_log, startup_phases

# the marker lines of a CPU smoke's first run (2026-11-26), with Ray's colours, in the order they came
RUN = [
    (6.8, "ray init kwargs: {'num_cpus': 24}"),
    (12.6, "2026-11-26 19:45:22,853\tINFO worker.py:2029 -- Started a local Ray instance."),
    (22.2, "\x1b[36m(GCPOTaskRunner pid=7967)\x1b[0m INFO:2026-11-26 19:45:32,407:Platform override"),
    (55.1, "\x1b[36m(GCPOTaskRunner pid=7967)\x1b[0m INFO:...:Total training steps: 2"),
    (65.6, "\x1b[36m(WorkerDict pid=8794)\x1b[0m INFO:...:Platform override from VERL_PLATFORM: cpu"),
    (69.6, "\x1b[36m(GCPOTaskRunner pid=7967)\x1b[0m INFO:...:actor and ref model engine initialized"),
    (70.1, "\x1b[36m(GCPOTaskRunner pid=7967)\x1b[0m INFO:...:reward loop manager initialized"),
    (101.3, "\x1b[36m(vLLMHttpServer pid=9070)\x1b[0m ['serve',"),
    (167.5, "\x1b[36m(GCPOTaskRunner pid=7967)\x1b[0m LLMServerManager: ['192.0.2.2:33525']"),
    (180.2, "\x1b[36m(GCPOTaskRunner pid=7967)\x1b[0m \rTraining Progress:   0%|          | 0/2"),
    (211.6, "\x1b[36m(GCPOTaskRunner pid=7967)\x1b[0m step:1 - global_seqlen/min:4016.0"),
]


def test_each_phase_ends_at_its_first_marker_line_in_the_order_a_run_starts():
    noise = [(30.0, "(GCPOTaskRunner pid=7967) {'actor_rollout_ref': ...}"), (200.0, "step:1 is not at a line start")]
    phases = startup_phases(sorted(RUN + noise))
    assert [p.label for p in phases] == [label for label, _ in STARTUP_MARKERS]
    assert [p.at_s for p in phases] == [t for t, _ in RUN]
    assert phases[0].took_s == 6.8 and abs(phases[-1].took_s - (211.6 - 180.2)) < 1e-9
    # the first marker wins: a later line of the same kind changes nothing
    assert startup_phases(RUN + [(300.0, RUN[8][1])])[8].at_s == 167.5


def test_a_phase_whose_marker_never_came_is_not_seen_and_the_next_counts_from_the_last_seen():
    without_vllm = [entry for entry in RUN if "vLLMHttpServer" not in entry[1]]
    phases = {p.label: p for p in startup_phases(without_vllm)}
    assert phases["vLLM server process started"].at_s is None and phases["vLLM server process started"].took_s is None
    assert abs(phases["vLLM server ready"].took_s - (167.5 - 70.1)) < 1e-9
    table = startup_table({"run 1": list(phases.values())})
    assert "| vLLM server process started | not seen | — |" in table


def test_lines_are_stamped_when_their_newline_arrives_and_a_carriage_return_stays_inside_its_line(tmp_path):
    out = io.StringIO()
    log = TimedLog(out, started=100.0)
    log.feed("first li", now=101.0)
    log.feed("ne\nsecond\rredrawn\nthi", now=102.5)
    log.close(now=104.0)
    assert out.getvalue() == "     2.50 first line\n     2.50 second\rredrawn\n     4.00 thi\n"
    path = tmp_path / "timed.txt"
    path.write_text(out.getvalue() + "not a stamped line\n", newline="")
    assert read_timed_log(path) == [(2.5, "first line"), (2.5, "second\rredrawn"), (4.0, "thi")]


def test_the_table_has_a_column_pair_per_run():
    runs = {"run 1": startup_phases(RUN), "run 2": startup_phases(RUN[:3])}
    lines = startup_table(runs).splitlines()
    assert lines[0] == "| start-up phase | run 1 at (s) | run 1 took (s) | run 2 at (s) | run 2 took (s) |"
    assert lines[3] == "| Ray up | 12.6 | 5.8 | 12.6 | 5.8 |"
    assert lines[-1] == "| first step logged | 211.6 | 31.4 | not seen | — |"
