"""What every engine adapter provides. Adapters are pure: they build argv and env from a config,
and hold their readiness paths and failure signatures as data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

from sweeper.spec.engine_ports import env_ports
from sweeper.spec.hosts import HostSpec
from sweeper.spec.space import Space, gpu_count_of
from sweeper.loadgen.endpoints import RequestDialect, TokenizeApi
from sweeper.loadgen.probe import PrefixCacheApi
from sweeper.outcomes import FailureKind


@dataclass(frozen=True)
class LaunchSpec:
    argv: tuple[str, ...]
    env: Mapping[str, str]
    port: int


@dataclass(frozen=True)
class Signature:
    """A log substring that means the server failed, and the kind of failure it is."""

    substring: str
    kind: FailureKind

    def __post_init__(self) -> None:  # the tables spell kinds as strings: a typo fails at import
        object.__setattr__(self, "kind", FailureKind(self.kind))


@dataclass(frozen=True)
class Readiness:
    health_path: str
    ready_line: str | None = None  # logged after readiness; informative, not required


@dataclass(frozen=True)
class EngineInfo:
    name: str
    readiness: Readiness
    signatures: Sequence[Signature] = field(default_factory=tuple)
    dialect: RequestDialect = RequestDialect()  # what its HTTP API accepts and how it streams
    # log lines meaning requests waited on a one-time compile: a measured run that logs one did
    # not measure the steady state, so its level is invalid (never ranked)
    stall_lines: Sequence[str] = field(default_factory=tuple)
    # its prefix cache's flush endpoint and /metrics names, and its own tokenizer endpoint
    # (loadgen/probe.py): the cache is emptied before each level, its hit rate recorded per level
    prefix_cache: PrefixCacheApi = PrefixCacheApi()
    tokenize: TokenizeApi | None = None
    # the flags whose values multiply into the GPUs a launch uses (TP x DP x PP), each factor with
    # its spellings; empty: the engine does not say (per-GPU metrics need the space's `gpus:`)
    parallel_flags: Sequence[Sequence[str]] = field(default_factory=tuple)
    # how its closed-loop levels are measured under `workload.measure: auto`: steady (a window at
    # the target concurrency, sent until its CI is narrow: a real server's rate moves with what
    # its CPU and GPU are doing) or rounds (fixed runs: the simulator's model is its own referee)
    measure: str = "steady"


def gpus_in_argv(argv: Sequence[str], parallel_flags: Sequence[Sequence[str]]) -> int | None:
    """The GPUs a launch command asks for: the product of its parallel sizes (a factor it leaves
    out is 1), or None when the engine declares no parallel flags."""
    if not parallel_flags:
        return None
    values: dict[str, str] = {}
    for i, item in enumerate(argv):
        name, eq, value = item.partition("=")
        if eq:
            values[name] = value
        elif i + 1 < len(argv):
            values.setdefault(item, argv[i + 1])
    gpus = 1
    for spellings in parallel_flags:
        given = next((values[s] for s in spellings if s in values), "1")
        gpus *= int(given) if given.isdigit() else 1
    return gpus


def config_gpus(space: Space, info: EngineInfo, config: Mapping[str, Any], argv: Sequence[str]) -> int | None:
    """The GPUs the config runs on: the space's `gpus:` expression, else the engine's parallel
    sizes in its argv (TP x DP x PP), else unknown."""
    return gpu_count_of(space, dict(config)) or gpus_in_argv(argv, info.parallel_flags)


def gpus_beyond_host(needed: int | None, host_name: str, host_gpus: int | None) -> str | None:
    """Why a config cannot run on the host ('needs 2 GPUs, host local has 1'), or None when it fits
    or either count is unknown (an engine that does not say, a host entry without `gpus:`)."""
    if needed is None or host_gpus is None or needed <= host_gpus:
        return None
    return f"needs {needed} GPUs, host {host_name} has {host_gpus}"


class Engine(Protocol):
    info: EngineInfo
    checks_short_flags: bool  # whether its help lists short flags (-t), so they are checked too
    flag_family: str | None  # whose flag history (versions.py) explains a refused flag

    def build_launch_spec(self, space: Space, config: Mapping[str, Any], host: HostSpec,
                          port: int, python: str) -> LaunchSpec: ...

    def bound_ports(self, spec: LaunchSpec) -> dict[int, str]:
        """Every TCP port the server will bind on the host, each with what it is for: the
        preflight checks all of them free before a launch."""
        ...

    def served_model(self, space: Space) -> str:
        """The `model` every request names (a server pinned to its launch path refuses others)."""
        ...

    def clock_scale(self, space: Space) -> float:
        """Wall seconds per modelled second (1.0 for real engines)."""
        ...

    def help_argv(self, python: str) -> list[str]:
        """The command whose output lists the installed engine's flags (checked before launch)."""
        ...

    def version_argv(self, python: str) -> list[str]:
        """The command that prints the installed engine's version (the flag table's cache key)."""
        ...

    def native_bench_argv(self, python: str, base_url: str, model: str, input_len: int, output_len: int,
                          requests: int, concurrency: int, seed: int, result_file: str) -> list[str] | None:
        """The engine's own benchmark for one level (workload.load: native), or None."""
        ...


class EngineAdapter:
    """The Engine protocol's common half: an adapter gives its `info`, `distribution` and
    `build_argv`, and overrides what differs."""

    info: EngineInfo
    distribution: str  # the package whose version the flag table is cached under
    checks_short_flags = False
    flag_family: str | None = None

    def build_argv(self, space: Space, config: Mapping[str, Any], port: int, python: str) -> list[str]:
        raise NotImplementedError

    def build_launch_spec(self, space: Space, config: Mapping[str, Any], host: HostSpec,
                          port: int, python: str) -> LaunchSpec:
        argv = self.build_argv(space, config, port, python)
        return LaunchSpec(argv=tuple(argv), env=build_env(space, config, host), port=port)

    def bound_ports(self, spec: LaunchSpec) -> dict[int, str]:
        """Its --port, and the torch.distributed rendezvous port when the environment pins one;
        adapters add the internal ports their engine derives or is told."""
        return {spec.port: "--port", **env_ports(spec.env, {"MASTER_PORT": "MASTER_PORT (torch.distributed)"})}

    def served_model(self, space: Space) -> str:
        return space.model

    def clock_scale(self, space: Space) -> float:
        return 1.0

    def version_argv(self, python: str) -> list[str]:
        return package_version_argv(python, self.distribution)

    def native_bench_argv(self, python: str, base_url: str, model: str, input_len: int, output_len: int,
                          requests: int, concurrency: int, seed: int, result_file: str) -> list[str] | None:
        """The engine's own benchmark for one closed-loop level, writing its JSON to result_file;
        None where the engine has none (workload.load: native is then refused)."""
        return None



class ModuleEngine(EngineAdapter):
    """An engine served by `python -m <module>` (SGLang, vLLM, transformers): the argv is built
    here once; an adapter names its module, the words before the model and how it asks for help."""

    module: str
    command: tuple[str, ...] = ()  # vLLM's and transformers' "serve"
    model_flag: tuple[str, ...] = ()  # SGLang names the model with --model-path
    help_words: tuple[str, ...] = ("--help",)

    def help_argv(self, python: str) -> list[str]:
        return [python, "-m", self.module, *self.command, *self.help_words]

    def build_argv(self, space: Space, config: Mapping[str, Any], port: int, python: str) -> list[str]:
        return [python, "-m", self.module, *self.command, *self.model_flag, self.served_model(space),
                "--host", "127.0.0.1", "--port", str(port), *space_flag_args(space, config)]

def build_env(space: Space, config: Mapping[str, Any], host: HostSpec) -> dict[str, str]:
    """Host env, then the space's fixed env, then parameters: the most specific wins."""
    env = {**host.env, **space.fixed_env}
    for name, value in config.items():
        target = space.target(name)
        if target.env:
            env[target.env] = env_value(value)
    return env


def classify_log(text: str, signatures: Sequence[Signature]) -> Signature | None:
    """The first failure signature found in `text`, in table order (most specific first)."""
    for signature in signatures:
        if signature.substring in text:
            return signature
    return None


def first_stall_line(text: str, stall_lines: Sequence[str]) -> str | None:
    """The first log line of `text` holding one of the engine's stall lines, or None."""
    if not stall_lines or not text:
        return None
    return next((line.strip() for line in text.splitlines() if any(s in line for s in stall_lines)), None)


def flag_args(flag: str, value: Any) -> list[str]:
    """A flag and its value as argv items: True is the bare flag, False and None are absent."""
    if value is True:
        return [flag]
    if value is False or value is None:
        return []
    return [flag, str(value)]


def space_flag_args(space: Space, config: Mapping[str, Any]) -> list[str]:
    """The space's fixed flags, then each sampled or derived parameter that maps to a flag."""
    argv: list[str] = []
    for flag, value in space.fixed_flags.items():
        argv += flag_args(flag, value)
    for name, value in config.items():
        target = space.target(name)
        if target.flag:
            argv += flag_args(target.flag, value)
    return argv


def package_version_argv(python: str, distribution: str) -> list[str]:
    """Prints an installed Python distribution's version (the flag table's cache key)."""
    return [python, "-c", "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))", distribution]


def env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)
