"""Config mistakes are caught where they are made: new override keys, unknown TOML keys, typos."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from pytest_synth_rl.client import RLJob
from pytest_synth_rl.config import SynthConfigWarning, apply_overrides, build_rl_payload, load_rl_config
from pytest_synth_rl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = ROOT / "examples" / "rl_minimal.toml"
TASK_URL = "http://127.0.0.1:8001"


def _config(tmp_path: Path, extra: str = "", *, replace: tuple[str, str] | None = None) -> Path:
    text = MINIMAL.read_text(encoding="utf-8")
    if replace is not None:
        text = text.replace(*replace)
    path = tmp_path / "rl.toml"
    path.write_text(text + extra, encoding="utf-8")
    return path


def test_an_override_that_adds_a_misspelled_key_is_refused_with_a_suggestion() -> None:
    with pytest.raises(ConfigError) as caught:
        build_rl_payload(MINIMAL, task_url=TASK_URL, overrides={"training.batch_sise": 2})
    assert str(caught.value) == (
        f"RL config {MINIMAL} is invalid: training.batch_sise: override 'training.batch_sise' adds "
        "'batch_sise', which [training] does not have; did you mean 'training.batch_size'? "
        "(hint: fix the key, or pass allow_new_keys=True to add keys the config does not know)"
    )


def test_a_misspelled_section_in_an_override_is_refused_too() -> None:
    with pytest.raises(
        ConfigError, match=r"adds 'trainig', which the top level does not have; did you mean 'training'\?"
    ):
        apply_overrides({"training": {"batch_size": 1}}, {"trainig": {"batch_size": 2}})


def test_nested_override_mappings_are_checked_leaf_by_leaf() -> None:
    with pytest.raises(
        ConfigError,
        match=r"adds 'group_sise', which \[training\] does not have; did you mean 'training.group_size'\?",
    ):
        load_rl_config(MINIMAL, overrides={"training": {"batch_size": 4, "group_sise": 4}})


def test_opting_in_adds_the_new_key_and_it_is_forwarded() -> None:
    with pytest.warns(SynthConfigWarning, match=r"unknown key training.batch_sise"):
        built = build_rl_payload(
            MINIMAL, task_url=TASK_URL, overrides={"training.batch_sise": 2}, allow_new_keys=True
        )
    assert built.payload["data"]["config"]["training"]["batch_sise"] == 2
    assert built.payload["data"]["config"]["training"]["batch_size"] == 2


def test_schema_keys_free_form_tables_removals_and_special_keys_need_no_opt_in() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        built = build_rl_payload(
            MINIMAL,
            task_url=TASK_URL,
            overrides={
                "training.weight_sync_interval": 3,  # not in the file, known to the schema
                "tags.team": "rl",
                "rollout.env_config.difficulty": "easy",
                "vllm": {"max_model_len": 4096},
                "training.batch_size": None,  # removals never add anything
                "training.batch_size ": 8,
                "task_url": "http://127.0.0.1:9",
                "backend": "http://127.0.0.1:8000",
                "model": "Qwen/Qwen3-0.6B",
            },
        )
    config = built.payload["data"]["config"]
    assert config["training"]["weight_sync_interval"] == 3
    assert config["training"]["batch_size"] == 8
    assert config["tags"] == {"team": "rl"}
    assert config["rollout"]["env_config"] == {"difficulty": "easy"}
    assert config["vllm"] == {"max_model_len": 4096}
    assert built.task_url == "http://127.0.0.1:9"


def test_rl_job_from_config_refuses_a_new_override_key_unless_allowed() -> None:
    kwargs = {
        "backend_url": "http://127.0.0.1:8000",
        "api_key": "sk_test_strict_keys_0001",
        "task_app_url": TASK_URL,
        "skip_health_check": True,
    }
    with pytest.raises(ConfigError, match=r"did you mean 'training.learning_rate'\?"):
        RLJob.from_config(MINIMAL, overrides={"training.learning_rat": 1e-5}, **kwargs)  # type: ignore[arg-type]
    with (
        pytest.warns(SynthConfigWarning),
        RLJob.from_config(
            MINIMAL,
            overrides={"training.learning_rat": 1e-5},
            allow_new_keys=True,
            **kwargs,  # type: ignore[arg-type]
        ) as job,
    ):
        assert job.build().payload["data"]["config"]["training"]["learning_rat"] == 1e-5


def test_unknown_toml_sections_and_keys_warn_with_a_suggestion_and_are_forwarded(tmp_path: Path) -> None:
    path = _config(
        tmp_path,
        "weight_sync_intervall = 5\n\n[lroa]\nr = 16\n",
    )
    with pytest.warns(SynthConfigWarning) as record:
        built = build_rl_payload(path, task_url=TASK_URL)
    assert [str(w.message) for w in record] == [
        f"{path}: unknown key training.weight_sync_intervall is not part of the RL config schema; it is "
        "forwarded to the backend unchanged; did you mean 'training.weight_sync_interval'?",
        f"{path}: unknown section [lroa] is not part of the RL config schema; it is forwarded to the "
        "backend unchanged; did you mean 'lora'?",
    ]
    config = built.payload["data"]["config"]
    assert config["lroa"] == {"r": 16}
    assert config["training"]["weight_sync_intervall"] == 5


def test_a_key_written_one_table_too_high_points_at_the_table_it_belongs_to(tmp_path: Path) -> None:
    path = _config(
        tmp_path,
        "\n[verifier]\nrubric_id = 'r1'\n\n[verifier.options]\nprovider = 'openai'\nmodel = 'gpt-5-nano'\n",
    )
    with pytest.warns(SynthConfigWarning) as record:
        build_rl_payload(path, task_url=TASK_URL)
    assert [str(w.message) for w in record] == [
        f"{path}: unknown key verifier.rubric_id is not part of the RL config schema; it is forwarded "
        "to the backend unchanged; did you mean 'verifier.options.rubric_id'?"
    ]


def test_an_unknown_key_far_from_any_known_one_warns_without_a_guess(tmp_path: Path) -> None:
    path = _config(tmp_path, "\n[zzz_custom]\nx = 1\n")
    with pytest.warns(SynthConfigWarning) as record:
        build_rl_payload(path, task_url=TASK_URL)
    assert [str(w.message) for w in record] == [
        f"{path}: unknown section [zzz_custom] is not part of the RL config schema; it is forwarded "
        "to the backend unchanged"
    ]


def test_known_extras_and_free_form_sections_do_not_warn(tmp_path: Path) -> None:
    path = _config(
        tmp_path,
        "reward_shaping = 1.0\n\n"
        "[tags]\nteam = 'rl'\n\n[vllm]\nmax_model_len = 4096\n\n[reference]\nplacement = 'none'\n\n"
        "[smoke]\nmax_steps = 3\n\n[data]\nsplit = 'train'\nseed_start = 0\n\n"
        "[lora]\nanything = 1\n\n[policy]\nmodel_name = 'Qwen/Qwen3-0.6B'\ntrainer_mode = 'lora'\n"
        "label = 'x'\nmax_model_len = 2048\nvllm_tensor_parallel_size = 1\n",
        replace=(
            "max_concurrent_rollouts = 2\n",
            "max_concurrent_rollouts = 2\nops = ['agent']\n"
            "rubric_rewards_only = false\n[rollout.env_config]\nlevel = 3\n",
        ),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        built = build_rl_payload(path, task_url=TASK_URL)
    assert built.payload["data"]["config"]["rollout"]["ops"] == ["agent"]


def test_a_misspelled_required_key_is_reported_missing_and_points_at_the_near_miss(tmp_path: Path) -> None:
    path = _config(tmp_path, replace=("batch_size = 2", "batch_sise = 2"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SynthConfigWarning)
        with pytest.raises(ConfigError) as caught:
            build_rl_payload(path, task_url=TASK_URL)
    problems = {p.key: p.message for p in caught.value.problems}
    assert problems["training.batch_size"] == (
        "missing; expected the batch size (required whenever [training] is present); "
        "found 'batch_sise'; did you mean 'batch_size'?"
    )


def test_a_misspelled_required_schema_key_points_at_the_near_miss(tmp_path: Path) -> None:
    path = _config(tmp_path, replace=('gpu_type = "H100"', 'gpu_typ = "H100"'))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SynthConfigWarning)
        with pytest.raises(ConfigError) as caught:
            build_rl_payload(path, task_url=TASK_URL)
    problems = {p.key: p.message for p in caught.value.problems}
    assert problems["compute.gpu_type"] == (
        'missing or empty; expected a GPU type like "H100", got nothing; '
        "found 'gpu_typ'; did you mean 'gpu_type'?"
    )


def test_a_misspelled_required_section_points_at_the_near_miss(tmp_path: Path) -> None:
    path = _config(tmp_path, replace=("[algorithm]", "[algoritm]"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SynthConfigWarning)
        with pytest.raises(ConfigError) as caught:
            build_rl_payload(path, task_url=TASK_URL)
    problems = {p.key: p.message for p in caught.value.problems}
    assert problems["algorithm"] == (
        "missing or empty; expected an [algorithm] table; found 'algoritm'; did you mean 'algorithm'?"
    )


def test_counts_no_trainer_can_run_are_warned_about_at_every_build() -> None:
    # Before, num_epochs = 0 or episodes_per_batch = true built without a word (the SDK types
    # them as plain ints), and the fake then ran a different number of steps or rollouts.
    overrides = {
        "training.num_epochs": 0,
        "rollout.episodes_per_batch": True,
        "rollout.max_concurrent_rollouts": -1,
    }
    for _ in range(2):  # the second build is remembered: its warnings come again
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            built = build_rl_payload(MINIMAL, task_url=TASK_URL, overrides=overrides)
        messages = [str(w.message) for w in caught if w.category is SynthConfigWarning]
        assert messages == [
            f"{MINIMAL}: training.num_epochs = 0 is not a count a trainer can run (the SDK sends it "
            "unchecked); write a whole number >= 1",
            f"{MINIMAL}: rollout.episodes_per_batch = true is a boolean where a count belongs (the SDK "
            "sends it as 1); write a whole number >= 1",
            f"{MINIMAL}: rollout.max_concurrent_rollouts = -1 is not a count a trainer can run (the SDK "
            "sends it unchecked); write a whole number >= 1",
        ]
        assert {Path(w.filename).name for w in caught} == {Path(__file__).name}
    # Sent as the SDK sends them: the warning changes nothing.
    assert built.payload["data"]["config"]["training"]["num_epochs"] == 0
    assert built.payload["data"]["config"]["rollout"]["max_concurrent_rollouts"] == -1
    assert built.payload["data"]["config"]["rollout"]["episodes_per_batch"] == 1


def test_plausible_counts_build_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_rl_payload(
            MINIMAL, task_url=TASK_URL, overrides={"training.num_epochs": 1, "rollout.max_turns": 1}
        )
