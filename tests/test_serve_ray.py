"""The endpoint on Ray Serve: the engine and two ingress replicas on a real local Ray cluster, the pool's
WorkerPool actors and a caller key's rate limit shared by the replicas, the official client over HTTP to
Serve's proxy."""

import secrets

import openai
import pytest
import ray

from cluster.serve import run_ray_serve
from conductor.config_loader import load_config
from conductor.tasks.toy import toy_tasks
from conductor.weight_transfer import free_port

pytestmark = pytest.mark.slow
BURST = 6  # per key; the first key makes three requests



def test_the_ray_serve_deployment_answers_the_official_client(ray_local, toy_warm_start, monkeypatch):
    from ray import serve

    key, other_key = ("sk-caller-" + secrets.token_hex(16) for _ in range(2))
    monkeypatch.setenv("CONDUCTOR_API_KEYS", f"{key},{other_key}")  # read in the driver: replicas get hashes only
    port = free_port()
    config = load_config("configs/serve-toy.yaml", [f"serve.policy={toy_warm_start}", "serve.runtime=ray_serve",
                                                    f"serve.port={port}", "engine.num_cpus=0.5",
                                                    "serve.deployment.ingress_num_cpus=0.25",
                                                    "serve.deployment.min_replicas=2",
                                                    "serve.deployment.max_replicas=2",
                                                    f"serve.limits.burst={BURST}",
                                                    "serve.limits.requests_per_minute=0.5"])
    stack = run_ray_serve(config, block=False)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=120)
        assert "conductor-ultra" in {m.id for m in client.models.list()}
        question = [{"role": "user", "content": toy_tasks(200)[0].prompt}]
        reply = client.chat.completions.create(model="conductor-ultra", messages=question,
                                               extra_body={"conductor": {"trace": True}})
        assert reply.choices[0].message.content and reply.usage.model_extra["worker_tokens"] > 0
        assert reply.model_extra["conductor_trace"]["rounds"]
        text = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
            model="conductor-mini", messages=question, stream=True) if chunk.choices)
        assert text
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-wrong", max_retries=0).models.list()
        status = serve.status().applications["conductor"]
        assert set(status.deployments) == {"ConductorEngine", "ConductorIngress"}
        assert status.deployments["ConductorIngress"].replica_states.get("RUNNING") == 2
        # One key's limit across both ingress replicas: its burst once in all (a token back every two minutes)
        other = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=other_key, max_retries=0)
        answered = 0
        for _ in range(2 * BURST):
            try:
                other.models.list()
                answered += 1
            except openai.RateLimitError:
                pass
        assert answered == BURST
    finally:
        serve.shutdown()
        for name in ray.util.list_named_actors(all_namespaces=True):
            if name["name"].startswith(("conductor-worker-pool", "conductor-key-limit")):
                ray.kill(ray.get_actor(name["name"], namespace=name["namespace"]))
        stack.close()
