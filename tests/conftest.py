import logging
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The encoder and every model in the tests are local: never reach a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# verl's default trainer.logger has wandb, which the entry point refuses without an API key unless W&B is offline
# (verl_preflight/machine.py): the tests log nowhere; the logger checks pass their own environment
os.environ.setdefault("WANDB_MODE", "offline")

# Everything the tests and what they start write to the temporary folder (Ray's session folders, verl's checkpoint
# locks, vLLM's and TransferQueue's sockets, pytest's own tmp_path) goes into one folder of this session, removed
# when the session ends: the machine's temporary folder is left as it was. Short, for Ray's socket paths. An xdist
# worker takes its controller's (where pytest's tmp_path lives); whoever made the folder removes it.
_MADE_HERE = not (os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("GCPO_TESTS_TMP"))
if _MADE_HERE:
    os.environ["GCPO_TESTS_TMP"] = tempfile.mkdtemp(prefix="gcpo-tests-", dir="/tmp" if os.path.isdir("/tmp") else None)
SESSION_TMP = os.environ["GCPO_TESTS_TMP"]
os.environ["TMPDIR"] = os.environ["RAY_TMPDIR"] = SESSION_TMP
tempfile.tempdir = SESSION_TMP


def pytest_sessionfinish(session, exitstatus):
    if _MADE_HERE:
        shutil.rmtree(SESSION_TMP, ignore_errors=True)


# The suite runs on two pytest-xdist workers (pyproject.toml: most of its time is single-threaded: subprocesses that
# import verl, a Ray actor's calls), in groups (--dist loadscope, with the scopes below): a file's tests stay on one worker (its module
# fixtures start once), and every file that starts Ray in its process (ray.init), and the smoke's and the image's
# tests (clusters, containers), share one group: one such thing runs on a machine at a time.
EXCLUSIVE_FOLDERS = ("special_e2e", "docker")
EXCLUSIVE_MARKS = ("ray.init(", "ray.shutdown(")


def _exclusive(path: Path) -> bool:
    if any(part in EXCLUSIVE_FOLDERS for part in path.parts):
        return True
    text = path.read_text(encoding="utf-8", errors="replace")
    return any(mark in text for mark in EXCLUSIVE_MARKS)


def pytest_xdist_make_scheduler(config, log):
    """The groups above as xdist's scheduler sees them: a scope per test file, one scope for the exclusive ones. Not
    ``--dist loadgroup`` with ``xdist_group`` marks: xdist 3.8 groups by suffixing ``item._nodeid``, which pytest 9
    no longer reads (its node ids are ``item._id``), so the marks grouped nothing and a file's tests spread over both
    workers, its module fixtures built twice and two Ray clusters up at once."""
    if config.getvalue("dist") != "loadscope":
        return None  # another --dist on the command line: xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    class FileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = root / nodeid.split("::", 1)[0]
            return "exclusive" if _exclusive(path) else str(path)

    return FileGroups(config, log)


@pytest.fixture(autouse=True)
def _no_log_handler_on_a_closed_stream():
    """A library that set up logging inside an earlier test on this worker holds that test's captured stderr, closed
    since, and every later log line through it prints ``--- Logging error ---`` into whatever test logs it (one seen:
    sentence-transformers' INFO line inside a CLI test that pins its stderr). Such handlers are dropped before each
    test; a handler on a live stream is left as it is."""
    manager = logging.Logger.manager
    for logger in [logging.getLogger(), *(lg for lg in manager.loggerDict.values() if isinstance(lg, logging.Logger))]:
        for handler in list(logger.handlers):
            if getattr(getattr(handler, "stream", None), "closed", False):
                logger.removeHandler(handler)


settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The real public math sets some tests read (see the README's "Set up"): ../shared/data beside the checkout, or
# wherever GCPO_SHARED_DATA points.
SHARED_DATA = Path(os.environ.get("GCPO_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
SHARED_DATA_MISSING = (
    f"shared data not found at {SHARED_DATA}: put the math data folder there or set GCPO_SHARED_DATA "
    "(README.md, 'Set up')"
)


@pytest.fixture
def shared_data() -> Path:
    """The real public math sets (SHARED_DATA); skip, saying where to get them, where they are absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(SHARED_DATA_MISSING)
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 on the CPU (bundled weights, offline), loaded once per test session."""
    from gcpo_core.encoding.encoder import EncoderConfig, RolloutEncoder

    return RolloutEncoder(EncoderConfig(device="cpu"))
