"""The ports an engine's command line binds, read from its argv and env alone.

Standard library only: the simulator derives its internal ports from here at every start, and
importing the engine adapters instead cost each simulated server about 0.12 s of CPU (pydantic, the
space models), measured with `python -X importtime -m sweeper.sim` (bench/test_suite.md)."""

from __future__ import annotations

from typing import Mapping, Sequence


def argv_value(argv: Sequence[str], *flags: str) -> str | None:
    """The value the last of `flags` takes in argv, as argparse reads it (`--f v` or `--f=v`; the
    last one wins); '' for a bare flag, None where none is given."""
    value = None
    for index, item in enumerate(argv):
        flag, equals, inline = item.partition("=")
        if flag in flags:
            following = argv[index + 1] if index + 1 < len(argv) else ""
            value = inline if equals else ("" if following.startswith("-") else following)
    return value


def port_number(text: str | None) -> int | None:
    """A port given as text (a flag's value, an env var), or None where it is none."""
    return int(text) if text is not None and text.strip().isdigit() and 0 < int(text) < 65536 else None


def flag_ports(argv: Sequence[str], flags: Mapping[tuple[str, ...], str]) -> dict[int, str]:
    """The ports that port flags (each spelling -> what it is) set in argv."""
    ports = {}
    for spellings, what in flags.items():
        if (port := port_number(argv_value(argv, *spellings))) is not None:
            ports[port] = what
    return ports


def env_ports(env: Mapping[str, str], names: Mapping[str, str]) -> dict[int, str]:
    """The ports that environment variables (name -> what it is) set."""
    return {port: what for name, what in names.items() if (port := port_number(env.get(name))) is not None}


# sglang/srt/server_args.py, PortArgs.init_new (0.5.9 to 0.5.23): without DP attention the
# tokenizer, scheduler and detokenizer talk over IPC files and only the NCCL port is TCP (random
# and probed free unless --nccl-port pins it); with DP attention they are TCP ports from
# dist_init_port = --port + 233 (or --dist-init-addr's port) up, in this order.
ZMQ_TCP_PORT_DELTA = 233
DP_ATTENTION_PORTS = ("dist_init_port", "port_base", "detokenizer_port", "rpc_port", "metrics_port",
                      "scheduler_input_port")


def uses_dp_attention(argv: Sequence[str]) -> bool:
    """--enable-dp-attention, or (0.5.20 on, where it replaces that flag) --attn-dp-size above 1."""
    return argv_value(argv, "--enable-dp-attention") is not None or (
        port_number(argv_value(argv, "--attn-dp-size", "--attention-data-parallel-size")) or 1) > 1


def sglang_internal_ports(argv: Sequence[str], port: int) -> dict[int, str]:
    """The TCP ports an SGLang server started with `argv` binds besides --port `port`."""
    ports = flag_ports(argv, {("--nccl-port",): "--nccl-port"})
    if uses_dp_attention(argv):
        dist_init = argv_value(argv, "--dist-init-addr", "--nccl-init-addr")
        first = port_number(dist_init.rpartition(":")[2]) if dist_init else port + ZMQ_TCP_PORT_DELTA
        for offset, name in enumerate(DP_ATTENTION_PORTS if first is not None else ()):
            ports.setdefault(first + offset, f"{name} (DP attention)")
    return ports
