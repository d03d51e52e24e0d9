import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

# CI runs the fuzz tests at full strength (>= 2,000 examples each); locally they stay quick.
settings.register_profile("ci", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"../shared/data not found at {SHARED_DATA}: CI and developers always have it")
    return SHARED_DATA


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3-compatible server (SeaweedFS) on 127.0.0.1 for the whole session."""
    from tests.support.seaweed import start_s3_server

    server = start_s3_server(tmp_path_factory.mktemp("seaweed"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray cluster (no dashboard) for the session; workers can import this repo's tests/."""
    import tempfile

    import ray

    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths have a length limit
    ray.init(num_cpus=2, include_dashboard=False, namespace="conductor-tests", _temp_dir=temp_dir,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}}, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def toy_warm_start(tmp_path_factory) -> Path:
    """The toy run's SFT warm start (tests/support/toy_warm_start.py), made once for the session."""
    from tests.support.toy_warm_start import build_toy_warm_start

    return build_toy_warm_start(tmp_path_factory.mktemp("toy-warm-start"))


@pytest.fixture(scope="session")
def serve_endpoint(tmp_path_factory, request):
    """The endpoint in a process of its own, shared by the serving tests (tests/support/serve_endpoint.py)."""
    from tests.support.serve_endpoint import SERVE_POLICY, start_endpoint
    from tests.support.served_process import stop_process

    policy = SERVE_POLICY or request.getfixturevalue("toy_warm_start")
    server, endpoint = start_endpoint(policy, tmp_path_factory.mktemp("serve") / "serve.log")
    try:
        yield endpoint
    finally:
        endpoint.http.close()
        stop_process(server)
