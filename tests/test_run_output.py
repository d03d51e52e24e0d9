"""A run's output root, on a local disk and on a real S3 server (SeaweedFS): small files, directories
published from staging and fetched back, listing, archiving, pickling, and the per-node model cache."""

import pickle

import pytest
import s3fs

from conductor.run_output import RunOutput, local_copy


def fill(directory, files):
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def tree(directory):
    return {str(p.relative_to(directory)): p.read_text() for p in sorted(directory.rglob("*")) if p.is_file()}


FILES = {"mp_rank_00_model_states.pt": "model", "zero_pp_rank_0_optim.pt": "optim0", "sub/latest": "step-2"}


@pytest.fixture(params=["local", "s3"])
def output(request, tmp_path):
    if request.param == "local":
        return RunOutput(str(tmp_path / "out"), "run-1")
    server = request.getfixturevalue("s3_server")
    s3fs.S3FileSystem(**server.storage_options).mkdirs("outputs", exist_ok=True)
    return RunOutput("s3://outputs/team", f"run-{tmp_path.name}", server.storage_options)


def test_small_files_directories_listing_and_archiving(output):
    assert not output.exists("checkpoints", "latest.json")
    output.write_text("checkpoints", "latest.json", text='{"tag": "step-2"}')
    assert output.read_text("checkpoints", "latest.json") == '{"tag": "step-2"}'
    fill(output.staged("checkpoints", "step-2"), FILES)
    assert output.publish("checkpoints", "step-2") == output.path("checkpoints", "step-2")
    fill(output.staged("checkpoints", "step-4"), {"a": "1"})
    output.publish("checkpoints", "step-4")
    output.discard_staged("checkpoints")
    assert output.list_dirs("checkpoints") == ["step-2", "step-4"]
    assert tree(output.fetch("checkpoints", "step-2")) == FILES
    output.remove("checkpoints", "step-2")
    assert output.list_dirs("checkpoints") == ["step-4"]
    output.move(("checkpoints",), ("previous", "t0", "checkpoints"))
    assert not output.exists("checkpoints", "latest.json")
    assert output.read_text("previous", "t0", "checkpoints", "latest.json") == '{"tag": "step-2"}'
    assert output.list_dirs("nothing-here") == []


def test_a_single_file_is_published_and_fetched(output):
    output.staged("summary.json").parent.mkdir(parents=True, exist_ok=True)
    output.staged("summary.json").write_text("{}")
    output.publish("summary.json")
    output.discard_staged()
    assert output.fetch("summary.json").read_text() == "{}"


def test_it_pickles_without_its_filesystem_and_works_in_the_other_process(output):
    output.write_text("x.txt", text="hello")
    clone = pickle.loads(pickle.dumps(output))
    assert clone.url == output.url and clone._fs is None
    assert clone.read_text("x.txt") == "hello"


def test_a_remote_model_directory_is_copied_once_per_node(s3_server, tmp_path):
    fs = s3fs.S3FileSystem(**s3_server.storage_options)
    fs.mkdirs("models", exist_ok=True)
    fill(tmp_path / "model", {"config.json": "{}", "model.safetensors": "weights"})
    fs.put(str(tmp_path / "model") + "/", f"models/{tmp_path.name}/policy/", recursive=True)
    uri = f"s3://models/{tmp_path.name}/policy"
    first = local_copy(uri, s3_server.storage_options)
    assert tree(tmp_path / "model") == {k: v for k, v in tree(__import__("pathlib").Path(first)).items()
                                       if k != ".complete"}
    fs.rm(f"models/{tmp_path.name}", recursive=True)
    assert local_copy(uri, s3_server.storage_options) == first  # cached: no second download
    assert local_copy(str(tmp_path / "model")) == str(tmp_path / "model")
