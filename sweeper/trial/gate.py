"""The output-correctness gate run before load: greedy completions of a fixed prompt set, compared
with the study's reference with a tolerance, since numerics legitimately differ across TP sizes.

A MoE backend that misreads FP4 weights serves fast, well-formed HTTP and nonsense text (engines.md),
so a status code proves nothing. Two comparisons:
- token agreement: per prompt, how many of the first K greedy tokens equal the reference's before
  the first difference (a near-tie flipped by another reduction order changes the rest of the
  continuation, so only the common prefix counts); their sum over all prompts, divided by the
  compared tokens, must reach `min_agreement`.
- prompt-logprob fingerprint, where the engine returns logprobs (OpenAI `echo` + `logprobs`): the
  mean absolute difference of the prompt tokens' logprobs from the reference's must stay within
  `max_logprob_diff` nats. It does not depend on sampling, so it catches broken weights even when
  the greedy text happens to agree.
With no reference yet, the garbage detector (sweeper/trial/garbage.py) judges each text.
Pure functions apart from `collect_samples` (HTTP) and the file helpers.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import requests

from sweeper.loadgen.direct import post_direct
from sweeper.spec.space import OutputCheck
from sweeper.errors import ConfigError
from sweeper.trial.garbage import garbage_reasons
from sweeper.loadgen.endpoints import RequestDialect, build_request_body, endpoint_url



@dataclass(frozen=True)
class OutputSample:
    """One prompt's greedy answer; tokens and prompt logprobs when the engine returned them."""

    prompt: str
    text: str
    tokens: list[str] | None = None
    prompt_logprobs: list[float] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "OutputSample":
        return cls(prompt=str(data["prompt"]), text=str(data["text"]), tokens=data.get("tokens"),
                   prompt_logprobs=data.get("prompt_logprobs"))


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reasons: list[str] = field(default_factory=list)
    agreement: float | None = None  # share of the compared tokens in the common prefixes
    logprob_diff: float | None = None  # mean |prompt logprob - reference|, nats
    compared_with: str = "garbage detector"  # or "reference"


class GateError(Exception):
    """The server did not answer a gate request (a generation error, not a bad output)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------- collecting (HTTP)

def _post(url: str, body: dict, timeout_s: float) -> dict:
    try:
        response = post_direct(url, body, timeout_s)
    except requests.Timeout:
        raise GateTimeout(f"no answer from {url} within {timeout_s:g} s") from None
    except requests.RequestException as exc:
        raise GateError(f"request to {url} failed: {exc}") from None
    if response.status_code != 200:
        raise GateError(f"HTTP {response.status_code} from {url}: {response.text[:200]}", response.status_code)
    try:
        return response.json()
    except ValueError:
        raise GateError(f"{url} answered non-JSON: {response.text[:200]!r}") from None


class GateTimeout(GateError):
    """A gate request got no answer in time: on a live server, a hang."""


def _choice(reply: dict, url: str) -> dict:
    try:
        return reply["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise GateError(f"{url} answered without choices: {str(reply)[:200]}") from None


def _tokens_of(choice: dict) -> list[str] | None:
    tokens = (choice.get("logprobs") or {}).get("tokens") if isinstance(choice.get("logprobs"), dict) else None
    return [str(t) for t in tokens] if isinstance(tokens, list) and tokens else None


def _prompt_logprobs(reply: dict) -> list[float] | None:
    """Logprobs of the prompt tokens from an echo reply (the first has none), or None."""
    choice = (reply.get("choices") or [{}])[0]
    values = (choice.get("logprobs") or {}).get("token_logprobs") if isinstance(choice.get("logprobs"), dict) else None
    prompt_tokens = (reply.get("usage") or {}).get("prompt_tokens")
    if not isinstance(values, list) or not isinstance(prompt_tokens, int) or len(values) < prompt_tokens:
        return None
    kept = [float(v) for v in values[:prompt_tokens] if isinstance(v, (int, float)) and math.isfinite(v)]
    return kept or None


def collect_samples(base_url: str, model: str, check: OutputCheck, timeout_s: float = 120.0,
                    dialect: RequestDialect = RequestDialect()) -> list[OutputSample]:
    """Greedy completions of every prompt of `check`, with tokens when the engine gives logprobs,
    and prompt logprobs (a second, 1-token echo request) where it supports them. An engine that
    refuses `logprobs` or `echo` (HTTP 4xx) is asked again without. A chat-only server (its
    dialect) is asked through chat, without logprobs: its words are compared."""
    chat = dialect.api == "chat"
    url = endpoint_url(base_url, "chat" if chat else "completions")
    max_tokens = max(check.max_tokens, check.k_tokens)
    with_logprobs = with_echo = check.logprobs and not chat
    samples = []
    for prompt in check.prompt_set:
        body = build_request_body("chat" if chat else "completions", model, prompt, max_tokens, stream=False)
        if dialect.ignore_eos:
            body["ignore_eos"] = True
        reply = None
        if with_logprobs:
            try:
                reply = _post(url, {**body, "logprobs": 1}, timeout_s)
            except GateError as exc:
                if exc.status is None or not 400 <= exc.status < 500:
                    raise
                with_logprobs = False  # the engine does not do logprobs: compare words
        if reply is None:
            reply = _post(url, body, timeout_s)
        choice = _choice(reply, url)
        text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
        if not isinstance(text, str):
            raise GateError(f"{url} answered without text: {str(choice)[:200]}")
        prompt_logprobs = None
        if with_logprobs and with_echo:
            try:
                prompt_logprobs = _prompt_logprobs(_post(url, {**body, "max_tokens": 1, "echo": True,
                                                                "logprobs": 1}, timeout_s))
            except GateTimeout:
                raise
            except GateError:
                pass
            with_echo = prompt_logprobs is not None  # no echo logprobs: the token comparison alone decides
        samples.append(OutputSample(prompt, text, _tokens_of(choice) if with_logprobs else None, prompt_logprobs))
    return samples


# ---------------------------------------------------------------- judging (pure)

def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    count = 0
    for x, y in zip(a, b):
        if x != y:
            break
        count += 1
    return count


def comparable(sample: OutputSample, ref: OutputSample) -> tuple[list[str], list[str]]:
    """Both sides' engine tokens, or both sides' words when either has no tokens."""
    if sample.tokens is not None and ref.tokens is not None:
        return list(sample.tokens), list(ref.tokens)
    return sample.text.split(), ref.text.split()


def token_agreement(samples: Sequence[OutputSample], reference: Sequence[OutputSample], k: int) -> float:
    """Share of the first-k reference tokens, over all prompts, inside each prompt's common prefix."""
    agreed = compared = 0
    for sample, ref in zip(samples, reference):
        tokens, ref_tokens = comparable(sample, ref)
        agreed += common_prefix(tokens[:k], ref_tokens[:k])
        compared += len(ref_tokens[:k])
    return agreed / compared if compared else 1.0


def logprob_difference(samples: Sequence[OutputSample], reference: Sequence[OutputSample]) -> float | None:
    """Mean |prompt logprob - reference| over the prompt tokens both have; None when either lacks them."""
    diffs = []
    for sample, ref in zip(samples, reference):
        if sample.prompt_logprobs is None or ref.prompt_logprobs is None:
            return None
        if len(sample.prompt_logprobs) != len(ref.prompt_logprobs):
            return None  # another tokenizer: the fingerprint does not apply
        diffs += [abs(a - b) for a, b in zip(sample.prompt_logprobs, ref.prompt_logprobs)]
    return sum(diffs) / len(diffs) if diffs else None


def judge(samples: Sequence[OutputSample], reference: Sequence[OutputSample] | None,
          check: OutputCheck) -> Verdict:
    """Pass or fail `samples` against the reference (same prompts, in order), else the detector."""
    if reference is None:
        reasons = [f"prompt {s.prompt!r}: {'; '.join(r)}: {s.text[:60]!r}"
                   for s in samples if (r := garbage_reasons(s.text))]
        return Verdict(passed=not reasons, reasons=reasons)
    by_prompt = {r.prompt: r for r in reference}
    missing = [s.prompt for s in samples if s.prompt not in by_prompt]
    if missing:
        return Verdict(False, [f"the reference has no answer for prompt {missing[0]!r}"],
                       compared_with="reference")
    matched = [by_prompt[s.prompt] for s in samples]
    agreement = token_agreement(samples, matched, check.k_tokens)
    diff = logprob_difference(samples, matched)
    reasons = []
    if agreement < check.min_agreement:
        worst = min(zip(samples, matched), key=lambda pair: common_prefix(*comparable(*pair)))
        reasons.append(f"first-{check.k_tokens}-token agreement {agreement:.0%} < {check.min_agreement:.0%} "
                       f"(e.g. {worst[0].text[:60]!r} vs reference {worst[1].text[:60]!r})")
    if diff is not None and diff > check.max_logprob_diff:
        reasons.append(f"prompt logprobs differ from the reference by {diff:.2f} nats on average "
                       f"(> {check.max_logprob_diff:g})")
    return Verdict(not reasons, reasons, agreement, diff, "reference")


def agree(a: Sequence[OutputSample], b: Sequence[OutputSample], check: OutputCheck) -> bool:
    """Whether two configs' samples agree within the tolerance (both ways: the reference is either)."""
    return judge(a, b, check).passed and judge(b, a, check).passed


# ---------------------------------------------------------------- files

def write_check_file(trial_dir: Path, samples: Sequence[OutputSample], verdict: Verdict | None,
                     error: str | None = None) -> Path:
    """output_check.json in the trial folder: every sample and the verdict (kept for failures too)."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    path = trial_dir / "output_check.json"
    path.write_text(json.dumps({"samples": [asdict(s) for s in samples],
                                "verdict": asdict(verdict) if verdict else None, "error": error},
                               indent=2, ensure_ascii=False))
    return path


def write_reference_file(path: Path, samples: Sequence[OutputSample], source: str) -> None:
    """A reference file (`check.reference_file` reads it back)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"source": source, "samples": [asdict(s) for s in samples]},
                               indent=2, ensure_ascii=False))


def load_reference_file(path: Path, check: OutputCheck) -> list[OutputSample]:
    """A user's reference outputs: {"samples": [{"prompt", "text", "tokens"?, "prompt_logprobs"?}]},
    covering every prompt of the check (errors name the file, the key and what was expected)."""
    where = str(path)
    if not path.is_file():
        raise ConfigError(where, "", "reference file not found (check.reference_file)")
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(where, "", f"not JSON: {exc}") from None
    items = data.get("samples") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise ConfigError(where, "samples", "expected a non-empty list of {prompt, text} objects")
    samples = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str) or not isinstance(item.get("text"), str):
            raise ConfigError(where, f"samples[{index}]", "expected an object with string 'prompt' and 'text'")
        for key in ("tokens", "prompt_logprobs"):
            if item.get(key) is not None and not isinstance(item[key], list):
                raise ConfigError(where, f"samples[{index}].{key}", "expected a list or null")
        samples.append(OutputSample.from_dict(item))
    covered = {s.prompt for s in samples}
    if missing := [p for p in check.prompt_set if p not in covered]:
        raise ConfigError(where, "samples", f"no answer for the check prompt {missing[0]!r}")
    return samples
