from pathlib import Path

import pytest

from conductor.config import Config
from conductor.config_loader import ConfigError, apply_override, config_from_cli, load_config

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_unknown_key_names_its_path(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "executor:\n  max_stpes: 3\n"))
    assert "executor.max_stpes: unknown key" in str(info.value)


def test_wrong_type_names_its_path(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "executor:\n  max_steps: five\n"))
    assert "executor.max_steps" in str(info.value) and "'five'" in str(info.value)


def test_out_of_range_names_its_path(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "reward:\n  cost_penalty_per_usd: -1\n"))
    assert "reward.cost_penalty_per_usd" in str(info.value) and "greater than or equal to 0" in str(info.value)


@pytest.mark.parametrize("override", ["output.dir=runs/out[1]", "rollout.store_path=s3://bucket/x*/rollouts"])
def test_a_store_root_with_a_glob_character_is_refused_naming_its_setting(override):
    """The replay store finds its files by a glob under its root: under out[1] it found none of its own, so a
    retried write was stored twice and training waited out its stall timeout for groups it had."""
    with pytest.raises(ConfigError, match=rf"{override.split('=')[0]}: .*holds a glob character"):
        load_config(None, [override])


def test_nested_list_error_path(tmp_path):
    text = "pool:\n  workers:\n    - {id: a, description: x}\n    - {id: b, description: x, price_in_per_m: -3}\n"
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert "pool.workers.1.price_in_per_m" in str(info.value)


def test_all_problems_reported_at_once(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "seed: x\nexecutor:\n  max_steps: 0\n  bogus: 1\n"))
    message = str(info.value)
    assert "3 problem(s)" in message and "seed" in message and "executor.bogus" in message


def test_dotted_overrides_are_typed_and_validated(tmp_path):
    config = load_config(write(tmp_path, "executor:\n  max_steps: 5\n"),
                         ["executor.max_steps=3", "executor.question_visibility=first", "prompt.show_prices=false"])
    assert config.executor.max_steps == 3 and config.executor.question_visibility == "first"
    assert config.prompt.show_prices is False
    with pytest.raises(ConfigError, match="executor.max_steps"):
        load_config(None, ["executor.max_steps=99"])
    with pytest.raises(ConfigError, match="executor.nope: unknown key"):
        load_config(None, ["executor.nope=1"])


def test_override_into_a_list_item():
    raw = {"pool": {"workers": [{"id": "a", "description": "x"}]}}
    apply_override(raw, "pool.workers.0.description=changed")
    assert raw["pool"]["workers"][0]["description"] == "changed"
    with pytest.raises(ConfigError, match="not an index"):
        apply_override(raw, "pool.workers.3.description=x")
    with pytest.raises(ConfigError, match="expected dotted.key=value"):
        apply_override(raw, "novalue")


def test_duplicate_worker_ids_rejected():
    with pytest.raises(ConfigError, match="duplicate worker ids"):
        load_config(None, ["pool.workers=[{id: a, description: x}, {id: a, description: y}]"])


def test_unreadable_or_non_mapping_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(write(tmp_path, "- 1\n- 2\n"))


@pytest.mark.parametrize("preset", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_preset_loads(preset):
    assert isinstance(load_config(preset), Config)


def test_cli_exits_with_the_message(capsys):
    with pytest.raises(SystemExit) as info:
        config_from_cli(["--set", "executor.max_steps=0"])
    assert info.value.code == 2
    assert "executor.max_steps" in capsys.readouterr().err


def test_a_key_pasted_where_the_env_var_name_goes_is_refused_and_not_echoed(tmp_path):
    secret = "sk-proj-abcdef0123456789"
    text = f"pool:\n  providers:\n    - id: p\n      base_url: https://x/v1\n      api_key_env: {secret}\n"
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert "pool.providers.0.api_key_env" in str(info.value) and secret not in str(info.value)


def test_a_whole_section_check_names_the_problem_without_echoing_the_section():
    """A check over a whole section (here the top level's: the judge must be a pool worker) fails with that
    section as its input; echoed, it would print every secret beside it (S3 keys in storage_options)."""
    with pytest.raises(ConfigError, match=r"judge\.worker 'zzz' is not a worker of the pool") as failure:
        load_config(None, ["output.storage_options={key: AKIAEXAMPLE, secret: wJalrSECRET}",
                           "pool.providers=[{id: o, base_url: 'https://api.example.com/v1'}]",
                           "pool.workers=[{id: a, provider: o, description: x}]", "judge.worker=zzz"])
    assert "wJalrSECRET" not in str(failure.value) and "AKIAEXAMPLE" not in str(failure.value)


def test_engine_bundles_follow_the_engine_config():
    from cluster.placement import engine_bundles
    from conductor.config import EngineConfig

    assert engine_bundles(EngineConfig(replicas=2, num_cpus=1)) == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert engine_bundles(EngineConfig(replicas=1, num_cpus=4, num_gpus=1)) == [{"CPU": 4.0, "GPU": 1.0}]


def test_the_7b_recipe_differs_from_the_smollm2_preset_only_where_size_demands():
    """configs/paper-7b.yaml is configs/smollm2-paper7.yaml scaled up: the model, where and how it runs
    (GPUs, bf16, ZeRO-3), the paper's samples, tokens, steps and lr, and no SFT (so no KL term holding a warm
    start); prompt, pool, reward, split, checkpoint choice and seed stay the same."""
    import yaml

    def flat(node, prefix=""):
        if not isinstance(node, dict):
            return {prefix[:-1]: node}
        return {k: v for key, value in node.items() for k, v in flat(value, f"{prefix}{key}.").items()}

    small, large = (flat(yaml.safe_load((REPO / "configs" / name).read_text()))
                    for name in ("smollm2-paper7.yaml", "paper-7b.yaml"))
    differ = {key for key in small.keys() | large.keys() if small.get(key) != large.get(key)}
    size = {"run_name", "evaluate.title", "policy.model_path", "rollout.group_size", "rollout.max_new_tokens",
            "rollout.actors", "rollout.max_concurrent_episodes", "train.steps", "train.eval_every"}
    size |= {f"learner.{key}" for key in (
        "zero_stage", "ranks", "num_cpus_per_rank", "num_gpus_per_rank", "dtype", "torch_threads", "lr",
        "lr_schedule", "warmup_steps", "micro_batch_size", "gradient_checkpointing", "weight_sync", "sync_bucket_mb",
        "checkpoint_every", "kl_coef")}
    unexplained = {key for key in differ - size if key.split(".")[0] not in ("engine", "sft")}
    assert not unexplained, unexplained
    for same in ("prompt.num_fewshot", "simulator.preset", "reward.wrong", "reward.cost_penalty_per_1k_worker_tokens",
                 "learner.advantage_scale",
                 "reward.penalty_free_worker_tokens", "train.domain_weights.code", "train.val_questions",
                 "train.best_by", "train.val_max_worker_tokens",
                 "train.heldout_questions", "train.questions_per_step", "seed", "executor.max_steps"):
        assert small[same] == large[same], same
    assert load_config(REPO / "configs/paper-7b.yaml").learner.zero_stage == 3


def test_an_env_var_name_that_looks_like_a_key_is_never_printed():
    from conductor.config_section import shown_env_name

    assert shown_env_name("OPENAI_API_KEY") == "OPENAI_API_KEY"
    assert "gsk_8fQz" not in shown_env_name("gsk_8fQz3LrT0pvalue42")  # fits the name pattern, yet a Groq key
