"""`sweeper doctor`: everything a sweep of a space on a host needs, checked without launching a
server or writing results. Each check is a small function over the Host protocol returning Checks.
Here, not in trial/, because it reads configs as the search does (seeds, derived values): imports go
cli -> search -> trial -> (engines, hosts)."""

from __future__ import annotations

import itertools
import shlex
from dataclasses import asdict, dataclass
from typing import Callable, Iterator

from sweeper.engines import get_engine, installed
from sweeper.engines.adapter import Engine, config_gpus, flag_args, gpus_beyond_host, space_flag_args
from sweeper.errors import InfraError, UserError
from sweeper.hosts import Host, open_host
from sweeper.hosts.gpu_gate import format_holders
from sweeper.hosts.gpu import MODEL_QUERY, GpuParseError, GpuSnapshot, gpus_needed, holders_above, parse_gpu_names
from sweeper.redact import redact_env, redacted_command_line
from sweeper.search.configs import parameter_values, with_derived
from sweeper.workflows.ablation import sampled_config
from sweeper.spec.hosts import HostSpec
from sweeper.spec.expr import Missing, parse_expr
from sweeper.spec.rules import excluded_by_rule, violated_constraints
from sweeper.spec.space import Space

MIN_FREE_DISK_MIB = 1024  # trial folders hold logs and launch files: a little, but never none
# `~/x` as the host's shell would read it (Host.run takes no shell: the check script expands it)
_EXPAND_HOME = 'p=$1; case $p in "~"|"~/"*) p=$HOME${p#"~"};; esac; '


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    skipped: bool = False  # not run: a check it needs failed (one cause, one problem line)
    warning: bool = False  # ok for the sweep, but worth knowing (exit 0)

    def to_dict(self) -> dict:
        return asdict(self)


def run_checks(space: Space, host_name: str, spec: HostSpec) -> list[Check]:
    """Every check, in the order a sweep meets them; after a failed connection only that one."""
    try:
        host = open_host(host_name, spec)
    except Exception as exc:  # a refused key, a dead address: a problem line, not a traceback
        return [Check("connection", False, f"{host_name}: {exc}",
                      "check address, port, user, identity_file and the host key in known_hosts")]
    try:
        checks = [Check("connection", True, f"{host_name} ({spec.transport})")]
        python = host.python()
        engine = get_engine(space.engine)
        checks += (python_checks := guarded("python", "check `python:` of the host and that the host answers",
                                            lambda: check_python(host, python)))
        if python_checks[0].ok:
            checks += (engine_checks := guarded("engine", "check that the host answers",
                                                lambda: check_engine(host, engine, space.engine, python)))
        else:
            checks += (engine_checks := [skipped("engine", "python")])
        checks += guarded("flags", "run the engine's --help on the host to see why it fails",
                          lambda: check_flags(host, engine, space, python)) if engine_checks[0].ok and not engine_checks[0].skipped else [
            skipped("flags", "engine" if python_checks[0].ok else "python")]
        checks += guarded("model", "check `model:` of the space and that the host answers",
                          lambda: check_model_path(host, space.model))
        checks += guarded("gpus", "make nvidia-smi run on the host (on its PATH, or the PATH of the host "
                          "entry's env), or set gpu_gate: off for the host to skip the GPU checks",
                          lambda: check_gpus(host, spec))
        checks += guarded("ports", "check base_port of the host and that the host answers",
                          lambda: check_ports(host, engine, space, spec, python))
        checks += guarded("disk", "check work_dir of the host", lambda: check_disk(host, spec.work_dir))
        checks += guarded("gpus: space", "check `gpus:` of the host and the space's parallel sizes",
                          lambda: check_space_gpus(engine, space, host_name, spec))
        checks += guarded("seeds", "fix the space's seeds",
                          lambda: list(seed_commands(engine, space, host_name, spec, python)))
        return checks
    finally:
        host.close()


def skipped(name: str, cause: str) -> Check:
    """A check not run because `cause` failed: not a problem line of its own."""
    return Check(name, True, f"not checked: needs the {cause} check above to pass", skipped=True)


def guarded(name: str, fix: str, check: Callable[[], Check | list[Check]]) -> list[Check]:
    """A check's own error (a UserError or InfraError: nvidia-smi failing, the connection dropping)
    as its problem line, so that the checks after it still run."""
    try:
        made = check()
    except (UserError, InfraError) as exc:
        return [Check(name, False, str(exc), fix)]
    return [made] if isinstance(made, Check) else made


def check_python(host: Host, python: str) -> Check:
    result = host.run([python, "-c", "import sys; print(sys.version.split()[0])"], timeout_s=60)
    if result.returncode != 0:
        return Check("python", False, f"{python}: {result.describe_briefly()}",
                     "set `python:` of the host to an interpreter that exists there")
    return Check("python", True, f"{python}: Python {result.stdout.strip()}")


def check_engine(host: Host, engine: Engine, name: str, python: str) -> Check:
    result = installed.read_version(host, engine, python)
    if result.returncode != 0:
        return Check("engine", False, f"{name} is not installed for {python}: {result.describe_briefly()}",
                     f"install {name} into that interpreter, or point the host's `python:` at one that has it")
    return Check("engine", True, f"{name} {installed.version_text(result)}")


def check_flags(host: Host, engine: Engine, space: Space, python: str) -> list[Check]:
    """The fixed flags, then every value of every flagged parameter, against the engine's --help."""
    try:
        flags = installed.read_help_flags(host, engine, python)
    except UserError as exc:
        return [Check("flags", False, str(exc), "run the engine's --help on the host to see why it fails")]
    checks = [_flag_check("flags: fixed", installed.argv_problems(installed.fixed_argv(space, engine, python),
                                                                  engine, flags))]
    for name, param in space.parameters.items():
        if not param.flag:
            continue
        try:
            values = parameter_values(param)
        except ValueError:  # a float without a step: its flag is what can be checked
            values = [param.low]
        problems = [p for v in values for p in installed.argv_problems(flag_args(param.flag, v), engine, flags)]
        checks.append(_flag_check(f"flags: {name}", problems, f"{param.flag}: {len(values)} value(s)"))
    return checks


def _flag_check(name: str, problems: list[str], detail: str = "known to the installed engine") -> Check:
    if problems:
        return Check(name, False, "; ".join(dict.fromkeys(problems)),
                     "change the space's values to ones the installed engine's --help lists, or upgrade it")
    return Check(name, True, detail)


def model_is_path(model: str) -> bool:
    """A local path (absolute, ~, ./, or a GGUF file) rather than a hub id like org/name."""
    return model.startswith(("/", "~", ".")) or model.endswith(".gguf")


def check_model_path(host: Host, model: str) -> Check:
    if not model_is_path(model):
        return Check("model", True, f"{model}: a hub id, not checked (the engine downloads it)")
    result = host.run(["sh", "-c", _EXPAND_HOME + 'test -e "$p"', "sh", model], timeout_s=30)
    if result.returncode != 0:
        return Check("model", False, f"{model}: no such file or folder on {host.name}",
                     "fix `model:` in the space, or copy the model to that path on the host")
    return Check("model", True, f"{model}: exists on {host.name}")


def check_gpus(host: Host, spec: HostSpec) -> list[Check]:
    snapshot = host.gpu_snapshot()
    if snapshot is None:
        return [Check("gpus", True, "not checked: the GPU gate is off (no nvidia-smi, or gpu_gate: off)")]
    needed = gpus_needed(spec.gpus, snapshot, spec.env.get("CUDA_VISIBLE_DEVICES"))
    checks = [Check("gpus", True, gpu_inventory(host, snapshot))]
    if len(needed) < spec.gpus:
        checks.append(Check("gpus: count", False, f"the host entry says gpus: {spec.gpus}, "
                            f"{len(needed)} usable", "set `gpus:` of the host to what it has"))
    holders = holders_above(snapshot, needed, spec.gpu_busy_mib)
    if holders:
        details = host.process_details([h.pid for h in holders])
        listed = [(h, details[h.pid].cmdline if h.pid in details else "?") for h in holders]
        checks.append(Check("gpus: free", False, format_holders(host.name, listed),
                            "stop those processes, or raise gpu_busy_mib for this host"))
    else:
        checks.append(Check("gpus: free", True, f"no process above {spec.gpu_busy_mib} MiB on GPUs "
                            f"{','.join(map(str, needed))}"))
    return checks


def gpu_inventory(host: Host, snapshot: GpuSnapshot) -> str:
    """`0: NVIDIA H200 (143771 MiB, 0 used, driver 580.159.04)` per GPU; name and driver `?` where
    nvidia-smi does not answer that query."""
    result = host.run(list(MODEL_QUERY), timeout_s=30)
    try:
        names = parse_gpu_names(result.stdout) if result.returncode == 0 else {}
    except GpuParseError:
        names = {}
    return "; ".join(f"{g.index}: {names.get(g.index, ('?', '?'))[0]} ({g.total_mib} MiB, "
                     f"{g.used_mib} used, driver {names.get(g.index, ('?', '?'))[1]})" for g in snapshot.gpus)


def check_ports(host: Host, engine: Engine, space: Space, spec: HostSpec, python: str) -> Check:
    """Every port the server binds at the host's base_port (its HTTP port and the engine's internal
    ones, for each seed's config): a taken one the preflight steps over to another base port,
    unless the config pins it (--nccl-port and the like), which no other base port frees."""
    ports: dict[int, str] = {}
    for config in seed_configs(space):
        ports.update(engine.bound_ports(engine.build_launch_spec(space, config, spec, spec.base_port, python)))
    taken = [f"{p} ({what})" for p, what in sorted(ports.items()) if not host.port_is_free(p)]
    listed = ", ".join(f"{p} ({what})" for p, what in sorted(ports.items()))
    if taken:
        return Check("ports", False, f"in use on {host.name}: {', '.join(taken)} (of {listed})",
                     "stop what listens there, or set another base_port for the host (the preflight "
                     "steps over a taken derived port, never over a pinned one)")
    return Check("ports", True, f"free on {host.name}, including the engine's internal ones: {listed}")


def seed_configs(space: Space) -> list[dict]:
    """Each seed's full config (derived values added); with no seeds, the space's fixed part alone."""
    return [with_derived(space, sampled_config(space, seed.params)) for seed in space.seeds] or [{}]


def check_disk(host: Host, work_dir: str) -> Check:
    """Free space where the trial folders go (the nearest existing folder when work_dir is not made yet)."""
    script = _EXPAND_HOME + 'while [ ! -e "$p" ]; do p=$(dirname "$p"); done; df -Pk "$p"'
    result = host.run(["sh", "-c", script, "sh", work_dir], timeout_s=30)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or len(lines) < 2 or len(lines[-1].split()) < 4:
        return Check("disk", False, f"df in {work_dir}: {result.describe()}", "check work_dir of the host")
    free_mib = int(lines[-1].split()[3]) // 1024
    if free_mib < MIN_FREE_DISK_MIB:
        return Check("disk", False, f"{free_mib} MiB free in {work_dir}",
                     "free some space there, or set another work_dir for the host")
    return Check("disk", True, f"{free_mib / 1024:.1f} GiB free in {work_dir}")


def seed_commands(engine: Engine, space: Space, host_name: str, spec: HostSpec, python: str) -> Iterator[Check]:
    """Each seed's exact command line at the base port, secrets masked; a problem where its
    parallel sizes need more GPUs than the host has (the preflight would refuse it)."""
    for seed, config in zip(space.seeds, seed_configs(space)):
        launch = engine.build_launch_spec(space, config, spec, spec.base_port, python)
        env = redact_env({k: v for k, v in launch.env.items() if spec.env.get(k) != v})  # the space's own
        exports = "".join(f"{k}={shlex.quote(v)} " for k, v in sorted(env.items()))
        command = exports + redacted_command_line(launch.argv)
        needed = config_gpus(space, engine.info, config, launch.argv)
        if too_many := gpus_beyond_host(needed, host_name, spec.declared_gpus):
            yield Check(f"seed {seed.name}", False, f"{too_many}: {command}",
                        "lower the seed's parallel sizes, drop the seed, or run it on a host with more GPUs "
                        "(the sweep would refuse it at preflight: too_many_gpus)")
        else:
            yield Check(f"seed {seed.name}", True, command)


def check_space_gpus(engine: Engine, space: Space, host_name: str, spec: HostSpec) -> Check:
    """Whether the space's parameter ranges allow configs that need more GPUs than the host has:
    a note, not a problem (the preflight refuses those without a launch, and the search learns
    to avoid them), so a space meant for a bigger host still runs its smaller configs here."""
    if spec.declared_gpus is None:
        return Check("gpus: space", True, "not checked: the host entry has no `gpus:`")
    if (most := most_gpus(space, engine)) is None:
        return Check("gpus: space", True, "not checked: the GPUs a config needs are not known (no parallel-size "
                     "flags of the engine with finite values, no `gpus:` in the space)")
    gpus, config = most
    if too_many := gpus_beyond_host(gpus, host_name, spec.declared_gpus):
        shown = ", ".join(f"{k}={v}" for k, v in config.items()) or "the fixed flags"
        return Check("gpus: space", True, f"the space allows configs larger than the host ({shown} {too_many}); "
                     "the sweep refuses those at preflight, without a launch (too_many_gpus)", warning=True)
    return Check("gpus: space", True, f"every config fits: at most {gpus} GPUs, host {host_name} has "
                 f"{spec.declared_gpus}")


def most_gpus(space: Space, engine: Engine) -> tuple[int, dict] | None:
    """The most GPUs a config of the space needs, with the values of the parameters that set it
    (its parallel-size flags, the names in its `gpus:`), within its constraints; None where the
    engine and the space do not say, or a parameter of it has no finite values."""
    spellings = {flag for factor in engine.info.parallel_flags for flag in factor}
    in_gpus = parse_expr(space.gpus).names if space.gpus is not None else frozenset()
    names = [n for n, p in space.parameters.items() if p.flag in spellings or n in in_gpus]
    if not spellings and space.gpus is None:
        return None
    try:
        value_lists = [parameter_values(space.parameters[n]) for n in names]
    except ValueError:  # a float without a step
        return None
    best: tuple[int, dict] | None = None
    for combo in itertools.product(*value_lists):
        config = dict(zip(names, combo))
        if violated_constraints(space, config) or excluded_by_rule(space, config):
            continue
        try:
            gpus = config_gpus(space, engine.info, config, space_flag_args(space, config))
        except Missing:  # its `gpus:` names a parameter that does not set the count here
            return None
        if gpus is not None and (best is None or gpus > best[0]):
            best = (gpus, config)
    return best
