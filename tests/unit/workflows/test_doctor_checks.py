"""The pure parts of `sweeper doctor`: which models are paths, and command lines with secrets masked."""

from __future__ import annotations

from sweeper.redact import redact_argv
from sweeper.workflows.doctor_checks import model_is_path


def test_paths_are_checked_and_hub_ids_are_not():
    for path in ("/data/models/dsv4", "~/models/q.gguf", "./m", "tinyllama-q4.gguf"):
        assert model_is_path(path), path
    for hub_id in ("deepseek-ai/DeepSeek-V4-Flash", "Qwen/Qwen3-8B"):
        assert not model_is_path(hub_id), hub_id


def test_secret_flag_values_are_masked_in_command_lines():
    argv = ["python", "-m", "sglang.launch_server", "--api-key", "s3cr3t", "--hf-token=hf_abc",
            "--max-total-tokens", "4096", "--model-path", "/m"]
    assert redact_argv(argv) == ["python", "-m", "sglang.launch_server", "--api-key", "***", "--hf-token=***",
                                 "--max-total-tokens", "4096", "--model-path", "/m"]
