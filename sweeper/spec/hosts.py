"""hosts.yaml: the typed model of a host (transport, GPUs, ports, gate, load placement) and its loader."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from sweeper.errors import ConfigError, did_you_mean
from sweeper.spec.loading import Strict, load_model

class HostSpec(Strict):
    transport: Literal["local", "ssh"]
    address: str | None = None
    port: int | None = Field(None, ge=1, le=65535, description="ssh: default Port of ~/.ssh/config, else 22")
    user: str | None = None
    identity_file: str | None = None
    gpus: int = Field(8, ge=0, le=1024)
    work_dir: str = "~/.sweeper"
    python: str | None = Field(None, description="interpreter on the host; default: this one (local)")
    env: dict[str, str] = {}
    base_port: int = Field(31000, ge=1024, le=65000, description="first port tried for servers")
    # ssh transport (sweeper/hosts/ssh.py); `address` may be a ~/.ssh/config alias; the keys set here win
    ssh_config: str | None = Field(None, description="the OpenSSH config read (as ssh -F); default "
                                   "~/.ssh/config then /etc/ssh/ssh_config; none: no config")
    host_key_policy: Literal["strict", "accept-new"] = Field(
        "strict", description="accept-new: record an unknown host key in ~/.sweeper/known_hosts")
    forward: bool = Field(True, description="reach servers through an SSH port forward")
    connect_timeout_s: float = Field(10.0, gt=0)
    keepalive_s: float = Field(15.0, ge=0)
    reconnect_timeout_s: float = Field(60.0, ge=0, description="give up reconnecting after a drop")
    # GPU gate (sweeper/hosts/gpu_gate.py): auto = on when the host has nvidia-smi
    gpu_gate: Literal["auto", "on", "off"] = "auto"  # unquoted on/off too (Strict: YAML 1.1 booleans)
    gpu_busy_mib: int = Field(1024, ge=0, description="a foreign process above this blocks a launch")
    gpu_release_timeout_s: float = Field(120.0, gt=0)
    # where the load client runs (sweeper/loadgen/onhost.py): auto = on the host when its python is >= 3.9
    load_from: Literal["auto", "controller", "host"] = "auto"
    # many hosts (sweeper/fleet/workers.py): disjoint GPU sets, each a slot with its own lease and worker,
    # e.g. ["0,1,2,3", "4,5,6,7"]; a config whose space `gpus` fits in one set runs in it
    gpu_sets: list[str] = []

    @property
    def declared_gpus(self) -> int | None:
        """The GPUs the host entry says it has; None where it does not say (`gpus` then keeps its
        default for the GPU gate, but no config is refused for needing more)."""
        return self.gpus if "gpus" in self.model_fields_set else None

    @model_validator(mode="after")
    def _ssh_needs_address(self) -> "HostSpec":
        if self.transport == "ssh" and not self.address:
            raise ValueError("an ssh host needs 'address'")
        return self

    @field_validator("gpu_sets")
    @classmethod
    def _disjoint_sets(cls, sets: list[str]) -> list[str]:
        seen: set[int] = set()
        for gpu_set in sets:
            parts = gpu_set.split(",")
            if not all(p.strip().isdigit() for p in parts):
                raise ValueError(f"a GPU set is a comma-separated list of GPU indices like \"0,1,2,3\", got {gpu_set!r}")
            indices = {int(p) for p in parts}
            if indices & seen:
                raise ValueError(f"GPU sets must not overlap ({gpu_set!r})")
            seen |= indices
        return [",".join(str(int(p)) for p in s.split(",")) for s in sets]


class HostsFile(Strict):
    hosts: dict[str, HostSpec]


# ---------------------------------------------------------------- search spaces

DEFAULT_HOSTS_FILE = Path("hosts.yaml")
BUILTIN_HOSTS = HostsFile(hosts={"local": HostSpec(transport="local")})


def load_hosts(path: Path) -> HostsFile:
    """The hosts file; with none at the default path, the built-in `local` host (this machine)."""
    if path == DEFAULT_HOSTS_FILE and not path.exists():
        return BUILTIN_HOSTS
    return load_model(path, HostsFile)


def load_host(path: Path, name: str) -> HostSpec:
    hosts = load_hosts(path).hosts
    if name not in hosts:
        known = ", ".join(sorted(hosts)) or "none"
        raise ConfigError(str(path), f"hosts.{name}", f"no such host (known: {known})" + did_you_mean(name, hosts))
    return hosts[name]

