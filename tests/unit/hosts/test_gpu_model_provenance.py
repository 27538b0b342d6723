"""The study's gpu_model from the host's nvidia-smi (empty before: tests/fixtures/vllm holds the
real H200 answer to the same query)."""

import pytest

from sweeper.hosts.base import CommandResult
from sweeper.hosts.gpu import MODEL_QUERY, GpuParseError, format_gpu_model
from sweeper.study.store import probe_gpu_model
from tests.support.paths import FIXTURE_DIR

REAL = (FIXTURE_DIR / "vllm" / "nvidia_smi_idle.gpu.csv").read_text()


def test_the_real_h200_answer_names_the_gpu_its_memory_and_driver():
    assert format_gpu_model(REAL) == "1 x NVIDIA H200 (143,771 MiB), driver 580.159.04"
    two = REAL + REAL.replace("0, GPU-", "1, GPU-")
    assert format_gpu_model(two) == "2 x NVIDIA H200 (143,771 MiB), driver 580.159.04"
    assert format_gpu_model("") == ""
    with pytest.raises(GpuParseError):
        format_gpu_model("NVIDIA H200, 580.159.04")


class Answering:
    def __init__(self, rc, out):
        self.rc, self.out = rc, out

    def run(self, argv, env=None, timeout_s=120.0):
        assert tuple(argv) == MODEL_QUERY
        return CommandResult(tuple(argv), self.rc, self.out, "")


def test_probe_reads_the_host_and_gives_empty_where_there_is_no_gpu():
    assert probe_gpu_model(Answering(0, REAL)) == "1 x NVIDIA H200 (143,771 MiB), driver 580.159.04"
    assert probe_gpu_model(Answering(127, "")) == ""
    assert probe_gpu_model(Answering(0, "garbage line")) == ""


def test_probe_reads_the_stand_in_through_a_real_local_host(tmp_path):
    """The study's probe over the Host protocol, nvidia-smi a real process (the simulator's stand-in
    on the host entry's PATH), as on the sshd test host."""
    from sweeper.hosts import open_host
    from sweeper.spec.hosts import HostSpec
    from tests.support.sshd import install_stand_in

    bin_dir, _ = install_stand_in(tmp_path)
    host = open_host("local", HostSpec(transport="local", env={"PATH": f"{bin_dir}:/usr/bin:/bin"}))
    try:
        assert probe_gpu_model(host) == ("8 x NVIDIA RTX PRO 6000 Blackwell Server Edition (97,887 MiB), "
                                         "driver 580.159.04")
    finally:
        host.close()
