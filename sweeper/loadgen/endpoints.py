"""The OpenAI-style endpoints the client speaks: their URLs, request bodies and streamed text.

`completions` (/v1/completions) takes a text prompt or a list of token ids; `chat`
(/v1/chat/completions) takes text only, wrapped in one user message (the server's chat template
adds tokens, so the input length is what the server's usage reports, not what was drawn);
`generate` is SGLang's native /generate (`text` or `input_ids`, `sampling_params`; each streamed
event carries the text so far and `meta_info` with the cumulative completion_tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Union

Api = Literal["completions", "chat", "generate"]
# One request's prompt: text, token ids, or (datasets, drawn output lengths, shared prefixes) a
# JSON-able dict {"prompt": text | ids} or {"messages": [...]}, with its own "max_tokens" when
# it has one. Dicts travel to the host as they are (loadgen/onhost.py).
Prompt = Union[str, list[int], dict]
APIS: tuple[str, ...] = ("completions", "chat", "generate")
_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions", "generate": "/generate"}


@dataclass(frozen=True)
class RequestDialect:
    """What a server accepts and how it streams, declared by its engine adapter (EngineInfo), so
    the trial's requests are shaped by data rather than by engine name. The defaults are SGLang's
    and vLLM's: token-id prompts on /v1/completions, ignore_eos and min_tokens accepted, usage in
    every chunk on request."""

    api: Api = "completions"
    text_prompts: bool = False  # the server takes text only (no token-id prompts)
    ignore_eos: bool = True  # accepts `ignore_eos` (a strict schema answers 422 to unknown fields)
    min_tokens: bool = True  # accepts `min_tokens`
    continuous_usage: bool = True  # honours stream_options.continuous_usage_stats
    # One network read can bring several tokens and no chunk says how many: events of one read are
    # one chunk, and the final usage count is spread over the chunks (marked as estimated).
    coalesced_stream: bool = False


def request_parts(prompt: Prompt) -> tuple[str | list[int] | list[dict], int | None]:
    """What a prompt sends (text, token ids or chat messages) and its own output length (None:
    the level's)."""
    if not isinstance(prompt, dict):
        return prompt, None
    content = prompt["messages"] if "messages" in prompt else prompt["prompt"]
    return content, prompt.get("max_tokens")


@dataclass(frozen=True)
class TokenizeApi:
    """An engine's own tokenizer endpoint (POST): vLLM's and SGLang's take {"model", "prompt"} and
    answer {"count", "tokens", ...}; llama-server's takes {"content"} and answers {"tokens"}."""

    path: str = "/tokenize"
    text_field: str = "prompt"
    sends_model: bool = True


def build_tokenize_body(api: TokenizeApi, model: str, text: str) -> dict[str, Any]:
    return {api.text_field: text} | ({"model": model} if api.sends_model else {})


def parse_token_count(reply: Any) -> int:
    """The token count of a /tokenize answer; ValueError when it has none."""
    if isinstance(reply, dict):
        if isinstance(reply.get("count"), int):
            return reply["count"]
        if isinstance(reply.get("tokens"), list):
            return len(reply["tokens"])
    raise ValueError(f"no token count in {str(reply)[:200]!r}")


def endpoint_url(base_url: str, api: Api) -> str:
    if api not in _PATHS:
        raise ValueError(f"unknown api {api!r} (known: {', '.join(APIS)})")
    return base_url.rstrip("/") + _PATHS[api]


def build_request_body(
    api: Api,
    model: str,
    prompt: str | list[int] | list[dict],
    max_tokens: int,
    *,
    stream: bool,
    extra_body: dict | None = None,
    min_tokens: bool = False,
    continuous_usage: bool = False,
    ignore_eos: bool = True,
) -> dict[str, Any]:
    """Greedy request body. A streamed load request also ignores EOS (unless ignore_eos=False, for
    servers that refuse the field; and, with min_tokens, asks for at least max_tokens) so it runs
    to max_tokens, and asks for the usage report; with continuous_usage, for a cumulative usage in
    every chunk too (SGLang, vLLM). A list of dicts is chat messages, sent as they are."""
    messages = isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], dict)
    if messages and api != "chat":
        raise ValueError(f"chat messages need the chat api, not {api}")
    if api == "generate":
        return _native_body(prompt, max_tokens, stream=stream, min_tokens=min_tokens) | (extra_body or {})
    body: dict[str, Any] = {"model": model}
    if api == "chat":
        if not isinstance(prompt, str) and not messages:
            raise ValueError("the chat api takes text prompts, not token ids")
        body["messages"] = list(prompt) if messages else [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body |= {"max_tokens": max_tokens, "temperature": 0}
    if stream:
        options: dict[str, bool] = {"include_usage": True}
        if continuous_usage:
            options["continuous_usage_stats"] = True
        body |= {"stream": True, "stream_options": options}
        if ignore_eos:
            body["ignore_eos"] = True
        if min_tokens:
            body["min_tokens"] = max_tokens
    return body | (extra_body or {})


def _native_body(prompt: str | list[int], max_tokens: int, *, stream: bool, min_tokens: bool) -> dict[str, Any]:
    """SGLang /generate: no model field; sampling_params as bench_serving's `sglang` backend sends
    them (greedy; a streamed load request ignores EOS)."""
    params: dict[str, Any] = {"max_new_tokens": max_tokens, "temperature": 0}
    if stream:
        params["ignore_eos"] = True
        if min_tokens:
            params["min_new_tokens"] = max_tokens
    body: dict[str, Any] = {"input_ids": prompt} if isinstance(prompt, list) else {"text": prompt}
    return body | {"sampling_params": params, "stream": stream}


def choice_text(choice: dict) -> str:
    """The text a streamed or whole choice carries: `text` (completions) or the message/delta
    `content` (chat); empty when it carries none."""
    text = choice.get("text")
    if text is None:
        part = choice.get("delta") or choice.get("message") or {}
        text = part.get("content") if isinstance(part, dict) else None
    return text if isinstance(text, str) else ("" if text is None else str(text))
