"""No API key ever leaves the plugin in clear text, and nothing it starts listens beyond loopback.

A small suite over the example task app runs in a subprocess with known secrets in the
environment, passing and failing on purpose (a job error that echoes a key, a rejected task app
key, a rejected backend key, a backend outage, a timeout), at the noisiest settings: ``-vv
--tb=long``, live DEBUG logs, a JSON report, JUnit XML, and (online, against a served fake)
recorded cassettes. Every byte it produced is then searched for the secrets.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from xml.etree import ElementTree

import pytest

from pytest_synth_rl.plugin.session import ServedFake
from pytest_synth_rl.secrets.masking import mask_secret

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

SYNTH_KEY = "sk_live_hardening_synth_key_6c1e93d7"
ENV_KEY = "env_hardening_task_app_key_0b77f2a4e1"
#: Third-party key the "trainer" echoes back in a job error (a secret env var the plugin knows).
ECHOED_KEY = "sk-openai-hardening-echoed-key-93ad51"
#: Wrong keys the suite itself passes in; given as api_key=/task_app_api_key=, they are secrets too.
WRONG_BACKEND_KEY = "sk_live_hardening_wrong_backend_5d2e"
WRONG_TASK_KEY = "env_hardening_wrong_task_key_77c3aa"
SECRETS = (SYNTH_KEY, ENV_KEY, ECHOED_KEY, WRONG_BACKEND_KEY, WRONG_TASK_KEY)

# Writes every log record (message, raw args, exception text) to a per-process file, so that
# records are checked as records, not only as whatever a handler chose to print.
CONFTEST = """
import logging, os, traceback

class _Dump(logging.Handler):
    def __init__(self, path):
        super().__init__(logging.DEBUG)
        self.file = open(path, "a", encoding="utf-8")

    def emit(self, record):
        try:
            text = record.getMessage()
        except Exception:
            text = repr(record.msg)
        extra = "".join(traceback.format_exception(*record.exc_info)) if record.exc_info else ""
        self.file.write(f"{record.name} {text} {record.args!r} {extra}\\n")
        self.file.flush()

def pytest_configure(config):
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    root.addHandler(_Dump(f"logrecords-{os.getpid()}.txt"))
"""

SUITE = '''
import os
from urllib.parse import urlsplit

import pytest

from pytest_synth_rl import check_task_app_contract

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]

WRONG_BACKEND_KEY = "{wrong_backend}"
WRONG_TASK_KEY = "{wrong_task}"


def test_contract_passes(synth_task_app):
    check_task_app_contract(synth_task_app.url, synth_task_app.api_key).raise_for_problems()


def test_job_succeeds(synth_rl_job, synth_expect, synth_cassette):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)


@pytest.mark.synth_scenario(
    outcome="failed", fail_at_step=1, error="trainer rejected credentials " + os.environ["OPENAI_API_KEY"]
)
def test_job_error_echoes_a_key(synth_rl_job, synth_expect, synth_cassette):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)


@pytest.mark.synth_scenario(outcome="failed", error="synth key " + os.environ["SYNTH_API_KEY"] + " expired")
def test_job_error_echoes_the_synth_key_and_the_result_is_printed(synth_rl_job):
    job = synth_rl_job()
    job.submit()
    result = job.poll_until_complete(raise_on_failure=True)


def test_task_app_rejects_the_key(synth_rl_job):
    synth_rl_job(task_app_api_key=WRONG_TASK_KEY).submit()


def test_backend_rejects_the_key(synth_rl_job):
    synth_rl_job(api_key=WRONG_BACKEND_KEY).submit()


@pytest.mark.synth_offline
def test_backend_outage_exhausts_retries(synth_rl_job, synth_fake):
    job = synth_rl_job()
    job.submit()
    synth_fake.fault("status", status=503)
    job.get_status()


@pytest.mark.synth_offline
def test_job_times_out(synth_rl_job, synth_expect):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=20)


def _listening_addresses():
    """(ip, port) of every listening TCP socket this process owns, from /proc (Linux)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{{fd}}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state != "0A" or inode not in inodes:  # 0A = LISTEN
                continue
            host, port = local.split(":")
            if v6:
                ip = "::1" if host == "0" * 24 + "01000000" else host
            else:
                ip = ".".join(str(int(host[i:i + 2], 16)) for i in (6, 4, 2, 0))
            found.append((ip, int(port, 16)))
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc (Linux)")
def test_everything_listens_on_loopback_only(
    synth_task_app, synth_fake, synth_fake_server, synth_rl_job, synth_expect
):
    job = synth_rl_job()
    job.submit()
    synth_expect(job).to_succeed(within=7200)  # real rollouts: the stub model server is up
    urls = [synth_task_app.url, synth_fake_server.url, synth_fake.inference.base_url]
    assert all(urlsplit(u).hostname == "127.0.0.1" for u in urls), urls
    ports = {{urlsplit(u).port for u in urls}}
    listening = _listening_addresses()
    assert ports <= {{port for _, port in listening}}, (ports, listening)
    assert listening and all(ip == "127.0.0.1" for ip, _ in listening), listening
'''


@pytest.fixture
def secret_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_leaky=SUITE.format(wrong_backend=WRONG_BACKEND_KEY, wrong_task=WRONG_TASK_KEY))
    monkeypatch.setenv("SYNTH_API_KEY", SYNTH_KEY)
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", ECHOED_KEY)
    return pytester


NOISY = ("-vv", "--tb=long", "-o", "log_cli=true", "--log-cli-level=DEBUG", "-p", "no:cacheprovider")


def _leaks(text: str) -> list[str]:
    return [mask_secret(s) for s in SECRETS if s in text]


def _everything_written(root: Path) -> dict[str, str]:
    """Every file the run left in *root* except the inputs we wrote ourselves."""
    inputs = {"arithmetic_task_app.py", "arithmetic.toml", "conftest.py", "test_leaky.py"}
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and path.name not in inputs and "__pycache__" not in path.parts:
            found[str(path.relative_to(root))] = path.read_text("utf-8", "replace")
    return found


def test_offline_run_leaks_no_secret_anywhere(secret_env: pytest.Pytester) -> None:
    result = secret_env.runpytest_subprocess(
        *NOISY, "--synth-report=out/report.json", "--junitxml=out/junit.xml"
    )
    result.assert_outcomes(passed=3, failed=6)
    out, err = result.stdout.str(), result.stderr.str()
    written = _everything_written(secret_env.path)
    # The failures happened for the intended reasons, so the secrets really were in play...
    for expected in (
        "JobFailedError",  # the job errors that echo keys
        "trainer rejected credentials",
        "TaskAppError",
        "JobSubmitError",
        "HTTP 401",
        "HTTP 503 after",
        "to finish within 20.0s, but it was still",  # the timeout
    ):
        assert expected in out, expected
    assert mask_secret(ECHOED_KEY) in out
    assert any(name.startswith("logrecords-") for name in written)
    assert {"out/report.json", "out/junit.xml"} <= set(written)
    assert "DEBUG" in out  # live logs at DEBUG really ran
    # ...and none of them is anywhere.
    assert _leaks(out) == [], "stdout"
    assert _leaks(err) == [], "stderr"
    for name, text in written.items():
        assert _leaks(name + text) == [], name


@pytest.mark.slow
def test_online_run_and_its_cassettes_leak_no_secret(secret_env: pytest.Pytester) -> None:
    with ServedFake.start(polls_to_finish=3, api_key=SYNTH_KEY, task_app_api_key=ENV_KEY) as served:
        # Online, the backend's own job error carries the echoed key (markers script only the fake).
        served.fake.scenario(polls=3, outcome="failed", error="trainer rejected credentials " + ECHOED_KEY)
        result = secret_env.runpytest_subprocess(
            *NOISY,
            f"--synth-backend={served.url}",
            "--synth-poll-interval=0.01",
            "--synth-timeout=60",
            "--synth-record=rewrite",
            "--synth-report=out/report.json",
            "--junitxml=out/junit.xml",
            "-k",
            "job_succeeds or echoes_a_key or rejects",
        )
        jobs = served.fake.jobs
    # Every job failed with the echoed key; the backend rejected the wrong key (401, no job).
    result.assert_outcomes(failed=4)
    assert jobs
    assert all(job.status == "failed" and ECHOED_KEY in (job.error or "") for job in jobs)
    written = _everything_written(secret_env.path)
    cassettes = [name for name in written if name.endswith(".json") and not name.startswith("out/")]
    assert cassettes, f"no cassette was recorded: {sorted(written)}"
    assert any("rl/jobs" in written[name] for name in cassettes)
    assert _leaks(result.stdout.str()) == [], "stdout"
    assert _leaks(result.stderr.str()) == [], "stderr"
    for name, text in written.items():
        assert _leaks(name + text) == [], name


USER_LOGS = """
import logging, os


def test_my_own_code_logs_the_keys():
    logging.getLogger("mine").warning(
        "backend key=%s task key=%s", os.environ["SYNTH_API_KEY"], os.environ["ENVIRONMENT_API_KEY"]
    )
"""


def test_keys_the_users_own_code_logs_are_masked_in_live_logs_and_the_log_file(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: masked in the report's captured log, but in clear in the live log and log file.
    monkeypatch.setenv("SYNTH_API_KEY", SYNTH_KEY)
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    pytester.makepyfile(test_user_logs=USER_LOGS)
    result = pytester.runpytest_subprocess(
        "-o", "log_cli=true", "--log-file=out/log.txt", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    masked = f"backend key={mask_secret(SYNTH_KEY)} task key={mask_secret(ENV_KEY)}"
    live = result.stdout.str()
    logged = (pytester.path / "out" / "log.txt").read_text()
    assert masked in live
    assert masked in logged
    assert _leaks(live + logged) == []


KEYED = """
import os

import pytest

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]


@pytest.mark.parametrize("key", [os.environ["SYNTH_API_KEY"]])
def test_keyed(key, synth_rl_job, synth_expect, synth_baseline, synth_cassette):
    job = synth_rl_job()
    job.submit()
    synth_baseline(synth_expect(job).to_succeed(within=7200).result)
"""


@pytest.mark.slow
def test_a_key_in_a_test_id_shows_in_no_written_file_name_or_field(secret_env: pytest.Pytester) -> None:
    # Before, the baseline was written as ``test_keyed[sk_live_…]-<hash of the key>.json`` with the
    # key in its test_id, the cassette was refused as holding a key, and JUnit properties held it.
    secret_env.makepyfile(test_keyed=KEYED)
    outputs = (
        "--synth-report=out/report.json",
        "--junitxml=out/junit.xml",
        "-p",
        "no:cacheprovider",
        "test_keyed.py",
    )
    with ServedFake.start(polls_to_finish=3, api_key=SYNTH_KEY, task_app_api_key=ENV_KEY) as served:
        recorded = secret_env.runpytest_subprocess(
            f"--synth-backend={served.url}",
            "--synth-poll-interval=0.01",
            "--synth-record=once",
            "--synth-update-baselines",
            *outputs,
        )
    recorded.assert_outcomes(passed=1)
    written = _everything_written(secret_env.path)
    baselines = [name for name in written if name.startswith("tests/baselines/")]
    cassettes = [name for name in written if name.startswith("tests/cassettes/")]
    assert len(baselines) == len(cassettes) == 1, sorted(written)
    masked_stem = f"test_keyed.py__test_keyed[{mask_secret(SYNTH_KEY).replace('…', '_')}]-"
    assert Path(baselines[0]).name.startswith(masked_stem)
    masked_id = f"test_keyed.py::test_keyed[{mask_secret(SYNTH_KEY)}]"
    assert json.loads(written[baselines[0]])["test_id"] == masked_id
    assert json.loads(written[cassettes[0]])["test_id"] == masked_id
    # Offline, the same test finds the cassette and the baseline again under their masked names.
    replayed = secret_env.runpytest_subprocess(*outputs)
    replayed.assert_outcomes(passed=1)
    written = _everything_written(secret_env.path)
    assert sorted(name for name in written if name.startswith("tests/")) == sorted([*baselines, *cassettes])
    replayed_job = json.loads(written["out/report.json"])["jobs"][0]
    # The job id is the served fake's, so the cassette recorded online served the offline run.
    assert (replayed_job["test_id"], replayed_job["job_id"]) == (masked_id, "job_rl_000001")
    junit = ElementTree.fromstring(written["out/junit.xml"])
    properties = [f"{p.get('name')}={p.get('value')}" for p in junit.iter("property")]
    assert any(p.startswith("synth_rl_job=") for p in properties)
    assert _leaks("\n".join(properties)) == []
    for name, text in written.items():
        assert _leaks(name) == [], name
        if name != "out/junit.xml":  # pytest itself names the test case there after its id
            assert _leaks(text) == [], name
