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
