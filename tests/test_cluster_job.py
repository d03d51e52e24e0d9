"""The project as a user runs it on a cluster: a Ray head started with `ray start` (loopback), training
submitted with `ray job submit` and the project's runtime env, outputs on S3 (SeaweedFS), metrics scraped
from the head's Prometheus export port while the job runs; then a second job resumes from the first one's
checkpoint on S3, and `ray job stop` stops it after its step, checkpointed. The command both jobs run is the
entrypoint of k8s/rayjob-toy.yaml, read from the manifest, so the command KubeRay submits is known to work;
the test only appends `--set` overrides (later ones win) that make the run small and point output.dir at its
own S3 server, and `train.resume=true` for the second job. Last, the GPU RayJob's entrypoint
(k8s/rayjob-train.yaml) as written: on this CPU head it gets as far as its preflight check, which must name
every missing piece.

The training jobs score their questions with a user's Python reward (README, "Your own reward"): the toy
preset's own questions as a JSONL on S3, and a function in a module outside the repository that reaches the
job only through the runtime env's ``py_modules``, as a user ships one. It gives a stated reference 1 and
anything else 0.25 and notes each call, so the test sees it imported and called inside the rollout actors,
from the copy Ray unpacked, and its scores in the run's records."""

import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import s3fs
import yaml

from conductor.replay_store import ReplayStore
from conductor.tasks.toy import toy_tasks
from tests.support.toy_warm_start import TOY_WARM_START

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))
TOY_JOB = REPO / "k8s" / "rayjob-toy.yaml"  # the RayJob whose entrypoint the jobs run
GPU_JOB = REPO / "k8s" / "rayjob-train.yaml"  # its entrypoint runs up to its preflight check here
SMALL = [*TOY_WARM_START, "train.questions_per_step=3", "rollout.group_size=4", "train.eval_every=2",
         "learner.checkpoint_every=2", "learner.micro_batch_size=4", "train.format_floor=0", "train.plot=false",
         "simulator.latency_scale=0.5"]
REWARD = '''
import json

import ray

CALLS = {calls!r}


def score(task, response):
    actor = ray.get_runtime_context().get_actor_id() if ray.is_initialized() else None
    with open(CALLS, "a") as handle:
        handle.write(json.dumps({{"actor": actor, "id": task["id"], "module": __file__}}) + "\\n")
    stated = response.strip().splitlines()[-1].replace("####", "").replace("Answer:", "").strip()
    return 1.0 if stated == task["answer"] else 0.25
'''
FAMILIES_SEEN = {  # one family per actor kind, the ones every run emits
    "engine": "ray_conductor_engine_generated_tokens_total",
    "rollout actor": "ray_conductor_rollouts_total",
    "pool": "ray_conductor_pool_calls_total",
    "learner": "ray_conductor_learner_step_seconds",
    "driver": "ray_conductor_train_phase",
}


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: every socket is held until all are chosen."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


class Head:
    """`ray start --head` on loopback with the project's environment on PATH, in a session of its own;
    stopped by killing that session's processes and their descendants (``ray stop`` would kill every Ray
    on the machine, and some of the head's processes, such as the client server and the agents, name
    neither its temp dir nor its port)."""

    def __init__(self, env: dict):
        self.temp = tempfile.mkdtemp(prefix="rayh-", dir="/tmp")  # short: socket paths have a length limit
        self.dashboard, self.metrics, self.gcs, client_port, agent_port = free_ports(5)
        self.address = f"http://127.0.0.1:{self.dashboard}"
        self.env = env
        command = [RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={self.gcs}", "--num-cpus=2",
                   "--dashboard-host=127.0.0.1", f"--dashboard-port={self.dashboard}",
                   f"--metrics-export-port={self.metrics}", f"--ray-client-server-port={client_port}",
                   f"--dashboard-agent-listen-port={agent_port}", "--disable-usage-stats", f"--temp-dir={self.temp}"]
        start = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 start_new_session=True)
        self.session = start.pid  # the session's id is its leader's pid
        try:
            output, _ = start.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            output = "ray start did not finish within 120 s"
        if start.returncode != 0:
            self.stop()
            raise AssertionError(output[-3000:])

    def job(self, command: str, *args: str, timeout: float = 120, check: bool = True) -> str:
        """``ray job <command> --address <head> <args>`` (the address before ``--``, or the entrypoint would
        get it); its stdout and stderr, where the CLI prints a job's status."""
        done = subprocess.run([RAY, "job", command, "--address", self.address, *args], env=self.env,
                              capture_output=True, text=True, timeout=timeout, cwd=REPO)
        assert done.returncode == 0 or not check, done.stdout[-2000:] + done.stderr[-3000:]
        return done.stdout + done.stderr

    def scrape(self) -> set[str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/metrics", timeout=5) as response:
                text = response.read().decode()
        except OSError:
            return set()
        return set(re.findall(r"^(ray_conductor_[a-z_]+?)(?:_bucket|_sum|_count)?[{ ]", text, re.M))

    def stop(self) -> None:
        for pid in self.session_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        while self.session_pids() and time.monotonic() < deadline:  # dead once reaped
            time.sleep(0.5)
        shutil.rmtree(self.temp, ignore_errors=True)

    def session_pids(self) -> list[int]:
        """Every live process of the head's session (``ray start`` led it; GCS, raylet, dashboard, agents
        and workers stay in it) and their descendants: a job's driver runs in a session of its own."""
        table = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,sid=,stat="], capture_output=True,
                               text=True).stdout.split()
        rows = [(int(pid), int(ppid), int(sid), stat)
                for pid, ppid, sid, stat in zip(table[::4], table[1::4], table[2::4], table[3::4])]
        found = {pid for pid, _, sid, stat in rows if sid == self.session and not stat.startswith("Z")}
        grown = True
        while grown:
            more = {pid for pid, ppid, _, stat in rows if ppid in found and not stat.startswith("Z")} - found
            found |= more
            grown = bool(more)
        return sorted(found)


def manifest_command(manifest: Path = TOY_JOB) -> list[str]:
    """A RayJob's entrypoint, split as a shell would: the command KubeRay submits."""
    command = shlex.split(yaml.safe_load(manifest.read_text())["spec"]["entrypoint"])
    assert command[:3] == ["python", "-m", "cluster.train"], command
    return command


def submit_and_wait(head: Head, overrides: list[str], runtime_env: Path, timeout_s: float = 900,
                    manifest: Path = TOY_JOB, outcome: str = "succeeded",
                    stop_once_logged: str | None = None) -> tuple[str, set]:
    """The manifest's command, then ``--set`` for each override (later on the command line wins); the
    job's logs and the metric families scraped while it ran. With ``stop_once_logged``, ``ray job stop``
    once the job's logs match that pattern."""
    job = f"conductor-test-{uuid.uuid4().hex[:8]}"
    args = ["--no-wait", "--submission-id", job, "--working-dir", ".",
            "--runtime-env", str(runtime_env), "--", *manifest_command(manifest)]
    for override in overrides:
        args += ["--set", override]
    seen: set[str] = set()
    done = threading.Event()

    def scrape_each_second() -> None:
        """A rank's gauges live only as long as the rank (seconds in a 2-step job): scrape at the report
        interval, not between the status command's seconds-long runs."""
        while not done.wait(1.0):
            seen.update(head.scrape())

    scraper = threading.Thread(target=scrape_each_second, daemon=True)
    scraper.start()
    head.job("submit", *args)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            status = head.job("status", job, check=False)  # "Job '<id>' succeeded" (failed, was stopped)
            if re.search(rf"Job '{job}' (succeeded|failed|was stopped)", status, re.I):
                break
            if stop_once_logged and re.search(stop_once_logged, head.job("logs", job, check=False), re.M):
                head.job("stop", "--no-wait", job)
                stop_once_logged = None
            time.sleep(0.5 if stop_once_logged else 3)
    finally:
        done.set()
        scraper.join(timeout=10)
    seen.update(head.scrape())
    logs = head.job("logs", job)
    assert re.search(rf"Job '{job}' {outcome}", status, re.I), f"{status[-2000:]}\n{logs[-4000:]}"
    return logs, seen


def test_a_job_trains_with_a_shipped_reward_to_s3_exports_metrics_and_a_second_job_resumes(s3_server, toy_warm_start,
                                                                                           tmp_path):
    bucket, run = "jobs", f"job-{uuid.uuid4().hex[:6]}"
    fs = s3fs.S3FileSystem(**s3_server.storage_options)
    fs.mkdirs(bucket, exist_ok=True)
    # The session's SFT warm start, where the driver looks for one (<output.dir>/<run>/sft): its workflows
    # parse, so the job's rollouts call the pool and its learner trains (an untrained format would leave
    # the pool and learner families empty).
    for file in toy_warm_start.iterdir():
        fs.put_file(str(file), f"{bucket}/runs/{run}/sft/{file.name}")
    # The job's credentials and endpoint travel as its runtime env, as KubeRay pods carry them in theirs.
    runtime_env = tmp_path / "runtime_env.yaml"
    spec = yaml.safe_load((REPO / "cluster" / "runtime_env.yaml").read_text())
    spec["env_vars"].update(AWS_ACCESS_KEY_ID=s3_server.access_key, AWS_SECRET_ACCESS_KEY=s3_server.secret_key,
                            AWS_ENDPOINT_URL_S3=s3_server.endpoint)
    # The user's reward, a package in a folder of its own that is neither the working dir nor on any path:
    # the job imports it (config load in the driver, each rollout actor) only from the runtime env's
    # py_modules. A package folder: Ray 2.60's job client uploads no single .py file.
    user_code, calls = tmp_path / "user_code", tmp_path / "reward_calls.jsonl"
    (user_code / "job_reward").mkdir(parents=True)
    (user_code / "job_reward" / "__init__.py").write_text(REWARD.format(calls=str(calls)))
    spec["py_modules"] = [str(user_code / "job_reward")]
    runtime_env.write_text(yaml.safe_dump(spec))
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps({"question": t.prompt, "gold": t.answer, "key": t.id, "area": t.domain})
                                 + "\n" for t in toy_tasks(10, seed=0)))
    fs.put_file(str(questions), f"{bucket}/data/questions.jsonl")
    dataset = {"path": f"s3://{bucket}/data/questions.jsonl", "id_prefix": "", "instruction": "",
               "fields": {"question": "question", "answer": "gold", "id": "key", "domain": "area"},
               "verifier": "python", "reward_function": "job_reward:score"}
    # Every Ray process of the head reports its metrics each second instead of Ray's 10 s, so that a job
    # of seconds shows every family before its actors exit (what an actor never reported is lost).
    # Token auth with the test's own token: `ray start` does not create one, and on a new machine
    # ~/.ray/auth_token does not exist yet.
    token_file = tmp_path / "ray_auth_token"
    token_file.write_text(secrets.token_hex(32))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN_PATH=str(token_file), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
               RAY_USAGE_STATS_ENABLED="0", RAY_metrics_report_interval_ms="1000")
    env.pop("RAY_ADDRESS", None)
    head = Head(env)
    try:
        # Small, isolated (its own run_name) and on the test's bucket: overrides of the manifest's output.dir.
        common = [*SMALL, f"run_name={run}", f"output.dir=s3://{bucket}/runs", f"data.datasets=[{json.dumps(dataset)}]"]
        logs, seen = submit_and_wait(head, [*common, "train.steps=2"], runtime_env)
        assert f"outputs: s3://{bucket}/runs/{run}" in logs
        missing = {kind: name for kind, name in FAMILIES_SEEN.items() if name not in seen}
        assert not missing, f"not scraped from the head during the job: {missing}; seen {sorted(seen)}"

        root = f"{bucket}/runs/{run}"
        summary = json.loads(fs.cat(f"{root}/summary.json"))
        assert summary["steps"] == 2 and summary["policy_dir"] == f"s3://{root}/policy"
        assert json.loads(fs.cat(f"{root}/checkpoints/latest.json")) == {"tag": "step-2"}
        assert fs.exists(f"{root}/checkpoints/step-2/trainer_state.json") and fs.exists(f"{root}/policy/config.json")
        assert fs.glob(f"{root}/rollouts/policy_version=*/batch-*.parquet")
        assert not (REPO / "runs" / run).exists()  # nothing written into the working dir

        # The reward ran inside the job's rollout actors, from the copy of py_modules Ray unpacked on the
        # head, and its scores (1 or 0.25) are the records' verdicts and rewards.
        seen_calls = [json.loads(line) for line in calls.read_text().splitlines()]
        assert any(call["actor"] for call in seen_calls)
        assert {call["id"] for call in seen_calls} <= {t.id for t in toy_tasks(10, seed=0)}
        assert all("runtime_resources" in call["module"] and not call["module"].startswith(str(user_code))
                   for call in seen_calls), {call["module"] for call in seen_calls}
        records = ReplayStore(f"s3://{root}/rollouts", s3_server.storage_options).dataset().to_table().to_pylist()
        assert records and not any(r["infra_error"] for r in records)
        judged = [r for r in records if r["score"] is not None]
        assert judged and {r["score"] for r in judged} <= {0.25, 1.0}
        for record in judged:  # no cost penalty in this recipe: wrong + score * (correct - wrong)
            assert record["reward"] == pytest.approx(0.5 + 0.5 * record["score"])
            assert record["correct"] == (record["score"] == 1.0)

        # The second job resumes from step 2's checkpoint on S3, with rollouts sampled past the checkpoint's
        # policy version (v3: the step-2 weights), added to the first job's. `ray job stop` once step 3 is
        # logged: SIGTERM to the driver, SIGKILL only after the runtime env's RAY_JOB_STOP_WAIT_TIME_S (Ray's
        # default, 3 s, is shorter than a real run's step and checkpoint; this toy's take about a second, so
        # the value is asserted, not timed). The run ends the step it is on, checkpoints it and exits without
        # a held-out evaluation or a summary of its own.
        assert int(spec["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"]) >= 60
        logs, _ = submit_and_wait(head, [*common, "train.steps=400", "train.resume=true"], runtime_env,
                                  outcome="was stopped", stop_once_logged=r"^step +3 ")
        assert "resumed from step-2 (step 2" in logs
        steps = [int(line.split()[1]) for line in logs.splitlines() if line.startswith("step ")]
        stopped_at = int(re.search(r"SIGTERM: stopping after step (\d+)", logs)[1])
        assert steps == list(range(3, stopped_at + 1)) and 3 <= stopped_at < 400, logs[-3000:]
        assert json.loads(fs.cat(f"{root}/checkpoints/latest.json")) == {"tag": f"step-{stopped_at}"}
        state = json.loads(fs.cat(f"{root}/checkpoints/step-{stopped_at}/trainer_state.json"))
        assert state["step"] == stopped_at
        assert json.loads(fs.cat(f"{root}/summary.json"))["steps"] == 2  # the first job's: no summary of its own
        versions = ReplayStore(f"s3://{root}/rollouts", s3_server.storage_options).versions()
        first_job, second_job = [v for v in versions if v <= 3], [v for v in versions if v > 3]
        assert first_job and max(first_job) <= 2 and second_job  # none at v3: no step past the first job's last

        # The GPU RayJob's entrypoint, as written, on this CPU head: it starts, checks what it needs, and
        # fails in seconds naming every missing piece (its bucket, datasets, baked-in model, API keys),
        # with no traceback. Past that it needs GPUs and real APIs: not run here.
        logs, _ = submit_and_wait(head, [], runtime_env, manifest=GPU_JOB, outcome="failed", timeout_s=300)
        assert "cannot start:" in logs and "Traceback" not in logs, logs[-3000:]
        for problem in ("output.dir s3://conductor-runs: cannot write (the bucket conductor-runs does not exist)",
                        "data.datasets[0].path s3://conductor-data/", "policy.model_path /models/",
                        "environment variable OPENAI_API_KEY is not set",
                        "environment variable GEMINI_API_KEY is not set"):
            assert problem in logs, (problem, logs[-3000:])
    finally:
        head.stop()
