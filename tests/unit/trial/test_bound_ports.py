"""The ports each engine adapter declares it will bind for a launch (engines/*.py bound_ports), and
the preflight's choice of a base port from them (trial/launch.free_base_port) against the real
local host's port probe, with real sockets holding ports."""

from __future__ import annotations

import socket

import pytest

from sweeper.engines import get_engine
from sweeper.errors import InfraError
from sweeper.hosts.local import LocalHost
from sweeper.spec.hosts import HostSpec
from sweeper.spec.space_file import parse_space
from sweeper.trial.launch import free_base_port
from tests.support.ports import free_port_on


def space(engine: str, fixed: str = "", env: str = "") -> object:
    return parse_space(f"name: t\nengine: {engine}\nmodel: m\nfixed_flags: {{{fixed}}}\nfixed_env: {{{env}}}\n"
                       "parameters:\n  tp: {type: categorical, choices: [1], flag: --tp-size}\n", "inline")


def ports(engine: str, port: int = 30000, **kw) -> dict[int, str]:
    adapter = get_engine(engine)
    spec = adapter.build_launch_spec(space(engine, **kw), {"tp": 1}, HostSpec(transport="local"), port, "py")
    return adapter.bound_ports(spec)


def test_sglang_without_dp_attention_binds_its_port_and_what_flags_pin():
    assert ports("sglang") == {30000: "--port"}  # IPC inside; the NCCL port is probed free by SGLang
    assert ports("sglang", fixed="--nccl-port: 29600", env="MASTER_PORT: '29500'") == {
        30000: "--port", 29600: "--nccl-port", 29500: "MASTER_PORT (torch.distributed)"}


def test_sglang_with_dp_attention_binds_the_tcp_ports_derived_from_its_port():
    derived = {30233: "dist_init_port", 30234: "port_base", 30235: "detokenizer_port", 30236: "rpc_port",
               30237: "metrics_port", 30238: "scheduler_input_port"}
    want = {30000: "--port", **{p: f"{name} (DP attention)" for p, name in derived.items()}}
    assert ports("sglang", fixed="--enable-dp-attention: true") == want
    assert ports("sglang", fixed="--attn-dp-size: 2") == want  # 0.5.20 on
    assert ports("sglang", fixed="--attn-dp-size: 1") == {30000: "--port"}
    moved = ports("sglang", fixed="--enable-dp-attention: true, --dist-init-addr: '127.0.0.1:5000'")
    assert sorted(moved) == [5000, 5001, 5002, 5003, 5004, 5005, 30000]
    assert ports("sim", fixed="--attn-dp-size: 2") == want  # the simulator binds the same


def test_vllm_binds_its_port_and_the_internal_ports_it_is_told():
    assert ports("vllm", 8000) == {8000: "--port"}  # the engine core asks the kernel for free ports
    told = ports("vllm", 8000, fixed="-dpp: 29550, --master-port: 29501, --grpc-port: 50051",
                 env="VLLM_PORT: '40000'")
    assert told == {8000: "--port", 29550: "--data-parallel-rpc-port", 29501: "--master-port (torch.distributed)",
                    50051: "--grpc-port", 40000: "VLLM_PORT (internal ports count up from it)"}


@pytest.fixture
def host():
    h = LocalHost("local", HostSpec(transport="local"))
    yield h
    h.close()


def held(port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_a_held_internal_port_moves_the_base_port_and_a_clash_seen_is_avoided(host):
    base = free_port_on(host, 43000, 10)
    ports_at = lambda port: ports("sglang", port, fixed="--enable-dp-attention: true")  # noqa: E731
    with held(base + 236):  # rpc_port of the first candidate
        assert free_base_port(host, base, ports_at) == base + 10
    assert free_base_port(host, base, ports_at) == base
    assert free_base_port(host, base, ports_at, avoid=frozenset({base})) == base + 10


def test_a_pinned_port_in_use_is_an_infra_fault_at_once(host):
    pinned = free_port_on(host, 44000)
    ports_at = lambda port: ports("sglang", port, fixed=f"--nccl-port: {pinned}")  # noqa: E731
    with held(pinned), pytest.raises(InfraError, match=f"port {pinned} \\(--nccl-port\\) is in use"):
        free_base_port(host, free_port_on(host, 45000, 10), ports_at)
