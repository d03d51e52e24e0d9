"""`make venv`'s translation of pip's configured sources into uv flags (scripts/install_venv.py)."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install_venv.py"
spec = importlib.util.spec_from_file_location("install_venv", SCRIPT)
install_venv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(install_venv)


def test_pip_sources_become_uv_flags_once_and_missing_local_ones_are_skipped(tmp_path):
    wheels, index = tmp_path / "wheels", tmp_path / "simple"
    wheels.mkdir()
    index.mkdir()
    listing = "\n".join([
        f"global.find-links='{wheels} {tmp_path / 'absent'}'",
        f":env:.find-links='{wheels}'",  # the same location again, from PIP_FIND_LINKS
        f"global.constraint='{tmp_path}'",
        f"global.extra-index-url='file://{index} file://{tmp_path / 'gone'} https://example.org/simple'",
        "global.cert='/etc/ssl/certs/ca-certificates.crt'",  # not a source
        "global.timeout='180'",
    ])
    assert install_venv.uv_source_flags(listing) == [
        "--find-links", str(wheels), "--constraint", str(tmp_path),
        "--extra-index-url", f"file://{index}", "--extra-index-url", "https://example.org/simple"]
    assert install_venv.uv_source_flags("") == []
