"""No object a plugin fixture hands out shows a key, in any mode.

An inner suite takes every plugin fixture, runs a job to completion, then walks everything
reachable from each fixture value (attributes, dataclass fields, slots, mappings, sequences) and
checks ``repr`` and pytest's ``saferepr`` of every object for the secrets, in any encoded form.
The inner test then fails on purpose under ``-l -vv --junitxml``, so pytest prints every
argument and local; that output and the XML must not show a key either. The suite runs offline,
online against a served fake, recording a cassette from it, and replaying that cassette offline
with no key at all.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from pytest_synth_rl.fake import FakeSynthBackend
from pytest_synth_rl.fake.backend import DEFAULT_API_KEY
from pytest_synth_rl.secrets.forms import contains
from pytest_synth_rl.secrets.masking import mask_secret

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

SYNTH_KEY = "sk_live_walk_synth_key_4f2a9c1e7b"
ENV_KEY = "env_walk_task_app_key_8d3b61a0c5"
#: The key of the fake the ``synth_fake_server`` fixture serves (and of the offline fake with no key).
SECRETS = {"SYNTH_API_KEY": SYNTH_KEY, "ENVIRONMENT_API_KEY": ENV_KEY, "fake key": DEFAULT_API_KEY}

FIXTURES = (
    "synth_settings",
    "synth_backend",
    "synth_fake",
    "synth_task_app",
    "synth_rl_config",
    "synth_rl_job",
    "synth_expect",
    "synth_fake_server",
    "synth_cassette",
    "synth_baseline",
    "synth_clock",
    "synth_policy",
)

WALKER = '''
"""A bounded walk over the objects reachable from a value, reporting where a secret shows."""

import collections.abc
import dataclasses
import types

from _pytest._io.saferepr import saferepr

from pytest_synth_rl.secrets.masking import Secret, SecretHeaders
from pytest_synth_rl.secrets.forms import contains

#: Where a key is meant to live: checked by repr, never entered.
HOLDERS = (Secret, SecretHeaders)

MAX_DEPTH = 7
MAX_OBJECTS = 20_000
MAX_ITEMS = 200
MAX_REPR = 200_000

OPAQUE = (
    types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
    types.CodeType, types.FrameType, types.TracebackType, types.GeneratorType,
    types.CoroutineType, types.MethodWrapperType, types.WrapperDescriptorType,
)


def _ours(obj):
    return type(obj).__module__.split(".")[0] == "pytest_synth_rl" or dataclasses.is_dataclass(obj)


def _children(obj):
    """What *obj* holds: the plugin's objects, dataclasses and plain containers are entered;
    any other library's object is a leaf whose repr is checked but whose insides are its own."""
    plain = type(obj).__module__ in ("builtins", "collections")
    if isinstance(obj, collections.abc.Mapping) and (plain or _ours(obj)):
        for index, (key, value) in enumerate(list(obj.items())[:MAX_ITEMS]):
            yield f"[{key!r:.40}]", value
            yield f"<key {index}>", key
        return
    if isinstance(obj, (list, tuple, set, frozenset, collections.deque)) and (plain or _ours(obj)):
        for index, item in enumerate(list(obj)[:MAX_ITEMS]):
            yield f"[{index}]", item
        return
    if not _ours(obj):
        return
    if dataclasses.is_dataclass(obj):
        for field in dataclasses.fields(obj):
            try:
                yield f".{field.name}", getattr(obj, field.name)
            except Exception:
                pass
    try:
        attributes = vars(obj)
    except TypeError:
        attributes = {}
    for name, value in list(attributes.items())[:MAX_ITEMS]:
        yield f".{name}", value
    if type(obj).__module__.split(".")[0] == "pytest_synth_rl":
        # The plugin's own public properties are what users read (``served.api_key``).
        for klass in type(obj).__mro__:
            for name, attribute in list(vars(klass).items()):
                if isinstance(attribute, property) and not name.startswith("_"):
                    try:
                        yield f".{name}", getattr(obj, name)
                    except Exception:
                        pass
    for klass in type(obj).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            try:
                yield f".{name}", getattr(obj, name)
            except Exception:
                pass


def _texts(obj):
    for kind, show in (("repr", repr), ("saferepr", saferepr)):
        try:
            yield kind, show(obj)[:MAX_REPR]
        except Exception as exc:
            yield kind, f"<{kind} failed: {type(exc).__name__}>"


def walk(root, label, secrets):
    """(objects visited, findings): each finding names the path, the repr kind and the secret."""
    findings = []
    seen = {}
    stack = [(root, label, 0)]
    while stack and len(seen) < MAX_OBJECTS:
        obj, path, depth = stack.pop()
        if id(obj) in seen or isinstance(obj, OPAQUE):
            continue
        seen[id(obj)] = obj  # kept alive so no id is reused during the walk
        for kind, text in _texts(obj):
            for name, secret in secrets.items():
                if contains(text, secret):
                    findings.append(f"{path} ({type(obj).__name__}): {kind} shows {name}")
        if isinstance(obj, HOLDERS) or depth >= MAX_DEPTH:
            continue
        for step, child in _children(obj):
            stack.append((child, path + step, depth + 1))
    return len(seen), findings
'''

INNER = """
import json
import os

import pytest
from walker import walk

pytestmark = [
    pytest.mark.synth_task_app("arithmetic_task_app.py"),
    pytest.mark.synth_rl(config="arithmetic.toml"),
]

with open("secrets.json", encoding="utf-8") as _file:
    SECRETS = json.load(_file)


def test_every_fixture(
    request, synth_settings, synth_backend, synth_task_app, synth_rl_config, synth_rl_job,
    synth_expect, synth_fake_server, synth_cassette, synth_baseline, synth_clock, synth_policy,
):
    # The fake is skipped online, so it is asked for only where it exists.
    synth_fake = request.getfixturevalue("synth_fake") if synth_settings.is_offline else None
    job = synth_rl_job()
    job.submit()
    result = synth_expect(job).to_succeed(within=7200)
    values = {name: request.getfixturevalue(name) for name in json.loads(os.environ["WALK_FIXTURES"])
              if name != "synth_fake" or synth_fake is not None}
    values["job"] = job
    values["result"] = result
    report = {}
    for name, value in values.items():
        report[name] = walk(value, name, SECRETS)
    with open(os.environ["WALK_REPORT"], "w", encoding="utf-8") as out:
        json.dump(report, out)
    assert job.job_id == "walked on purpose", "fails so that -l prints every argument and local"
"""


def _suite(pytester: pytest.Pytester) -> pytest.Pytester:
    for name in ("arithmetic_task_app.py", "arithmetic.toml"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    pytester.makepyfile(walker=WALKER, test_walk=INNER)
    (pytester.path / "secrets.json").write_text(json.dumps(SECRETS), "utf-8")
    return pytester


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("SYNTH_API_KEY", SYNTH_KEY)
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.setenv("WALK_FIXTURES", json.dumps(FIXTURES))
    return _suite(pytester)


def _deepest(findings: list[str]) -> list[str]:
    """Only where a key is held: a finding whose path has no deeper finding below it (the
    containers above a leaked string all show it too)."""
    paths = {finding.split(" (", 1)[0] for finding in findings}
    return sorted(
        {
            finding
            for finding in findings
            if not any(
                other.startswith(finding.split(" (", 1)[0]) and other != finding.split(" (", 1)[0]
                for other in paths
            )
        }
    )


def _run(pytester: pytest.Pytester, mode: str, monkeypatch: pytest.MonkeyPatch, *args: str) -> None:
    """Run the inner suite once and check the walk, the printed output and the JUnit XML."""
    report_path = pytester.path / f"walk-{mode}.json"
    junit = pytester.path / f"junit-{mode}.xml"
    monkeypatch.setenv("WALK_REPORT", str(report_path))
    result = pytester.runpytest_subprocess(
        "-l", "-vv", "-p", "no:randomly", "-p", "no:cacheprovider", f"--junitxml={junit}", *args
    )
    out, err = result.stdout.str(), result.stderr.str()
    result.assert_outcomes(failed=1)
    assert "fails so that -l prints every argument and local" in out
    # -l really printed the fixture values (the backend's masked key is among them).
    assert "synth_backend = SynthBackend(" in out
    report = json.loads(report_path.read_text("utf-8"))
    walked = {"synth_fake"} if mode in ("online", "record") else set()
    assert set(report) == (set(FIXTURES) - walked) | {"job", "result"}
    assert report["synth_rl_job"][0] > 100, "the walk reached into the job factory"
    if mode in ("record", "replay"):
        assert report["synth_cassette"][0] > 100, "the walk reached into the cassette's interactions"
    assert all(count < 20_000 for count, _ in report.values()), "no walk stopped at its cap"
    findings = _deepest([finding for _, found in report.values() for finding in found])
    assert findings == [], f"{mode}: secrets shown by reachable objects"
    texts = {"stdout": out, "stderr": err, "junit": junit.read_text("utf-8")}
    leaks = [
        f"{where} shows {name} ({mask_secret(secret)})"
        for where, text in texts.items()
        for name, secret in SECRETS.items()
        if contains(text, secret)
    ]
    assert leaks == [], mode


def test_the_walker_finds_a_plain_key_and_not_a_masked_one(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk can fail: a key in a plain attribute, a dict value or a base64 blob is found."""
    monkeypatch.syspath_prepend(str(_suite(pytester).path))
    import walker  # type: ignore[import-not-found]

    from pytest_synth_rl.secrets.masking import Secret

    @dataclasses.dataclass
    class Holder:
        masked: Secret = dataclasses.field(default_factory=lambda: Secret(SYNTH_KEY))
        nested: object = dataclasses.field(
            default_factory=lambda: {"headers": [("authorization", "Bearer " + ENV_KEY)]}
        )

    count, findings = walker.walk(Holder(), "holder", SECRETS)
    assert findings == [
        f"{path} ({kind}): {shown} shows ENVIRONMENT_API_KEY"
        for path, kind in (
            ("holder", "Holder"),
            ("holder.nested", "dict"),
            ("holder.nested['headers']", "list"),
            ("holder.nested['headers'][0]", "tuple"),
            ("holder.nested['headers'][0][1]", "str"),
        )
        for shown in ("repr", "saferepr")
    ]
    # The holder, its Secret (not entered), the dict, its key, the list, the pair and its two strings.
    assert count == 8
    _, base64_findings = walker.walk({"blob": "c2tfdGVzdF9mYWtlX2JhY2tlbmRfa2V5"}, "d", SECRETS)
    assert base64_findings == [
        "d (dict): repr shows fake key",
        "d (dict): saferepr shows fake key",
        "d['blob'] (str): repr shows fake key",
        "d['blob'] (str): saferepr shows fake key",
    ]


def test_offline(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(suite, "offline", monkeypatch)


def test_online_against_a_served_fake(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSynthBackend(api_key=SYNTH_KEY)
    try:
        with fake.serve() as url:
            _run(suite, "online", monkeypatch, f"--synth-backend={url}", "--synth-poll-interval=0.01")
    finally:
        fake.close()


def test_record_then_replay(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSynthBackend(api_key=SYNTH_KEY)
    try:
        with fake.serve() as url:
            _run(
                suite,
                "record",
                monkeypatch,
                f"--synth-backend={url}",
                "--synth-poll-interval=0.01",
                "--synth-record=once",
            )
    finally:
        fake.close()
    cassettes = list((suite.path / "tests" / "cassettes").glob("*.json"))
    assert len(cassettes) == 1, "the record run wrote the test's cassette"
    assert "rl/jobs" in cassettes[0].read_text("utf-8")
    monkeypatch.delenv("SYNTH_API_KEY")
    _run(suite, "replay", monkeypatch)


def _plugin_errors() -> list[type[Exception]]:
    """Every exception class of the package that derives from ``SynthError``."""
    import importlib
    import pkgutil

    import pytest_synth_rl
    from pytest_synth_rl.errors import SynthError

    for module in pkgutil.walk_packages(pytest_synth_rl.__path__, "pytest_synth_rl."):
        if ".plugin." not in module.name and not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found, pending = [], [SynthError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def test_problem_lists_and_exception_attributes_show_no_key(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Before, str(error) was masked but error.problems[0].message, read by users' own reporting
    # code, held a key pasted into a numeric TOML field.
    monkeypatch.setenv("SYNTH_API_KEY", SYNTH_KEY)
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    monkeypatch.syspath_prepend(str(_suite(pytester).path))
    import walker

    from pytest_synth_rl.assertions import eventually
    from pytest_synth_rl.baselines import BaselineMissing
    from pytest_synth_rl.config.loader import load_rl_config
    from pytest_synth_rl.config.validate import validate_rl_config
    from pytest_synth_rl.errors import (
        Attempt,
        BackendError,
        ConfigError,
        SynthUsageError,
        TaskAppError,
    )

    toml = tmp_path / "pasted.toml"
    minimal = (EXAMPLES / "rl_minimal.toml").read_text("utf-8")
    toml.write_text(minimal.replace("num_epochs = 1", f'num_epochs = "{SYNTH_KEY}"'), "utf-8")
    with pytest.raises(ConfigError) as config_error:
        validate_rl_config(load_rl_config(toml))
    assert (
        config_error.value.problems[0].message
        == f"expected an integer, got '{mask_secret(SYNTH_KEY)}' (string)"
    )
    with pytest.raises(SynthUsageError) as usage_error:
        eventually(lambda: True, timeout=SYNTH_KEY)  # type: ignore[arg-type]
    url = f"http://127.0.0.1:9/api?key={ENV_KEY}"
    errors: dict[str, Exception] = {
        "config_error": config_error.value,
        "usage_error": usage_error.value,
        "backend_error": BackendError(
            "failed", method="GET", url=url, attempts=[Attempt("GET", url, error=ENV_KEY)]
        ),
        "task_app_error": TaskAppError("down", url=url, details={"echo": [SYNTH_KEY], SYNTH_KEY: 1}),
        "baseline_missing": BaselineMissing(f"t.py::test[{SYNTH_KEY}]", tmp_path / f"{SYNTH_KEY}.json"),
    }
    # Every plugin exception, present and future, masks whatever attribute it is given.
    for cls in _plugin_errors():
        error = cls.__new__(cls)
        error.extra = {"text": SYNTH_KEY, "list": (ENV_KEY,)}  # type: ignore[attr-defined]
        errors[cls.__name__] = error
    assert {"ConfigError", "MergeError", "CassetteError", "FakeRouteError"} <= set(errors)
    findings = [
        finding for label, error in errors.items() for finding in walker.walk(error, label, SECRETS)[1]
    ]
    assert _deepest(findings) == []
