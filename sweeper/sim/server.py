"""The simulated SGLang server process: `python -m sweeper.sim --model-path M --port P [flags]`.

Readiness as SGLang (engines.md): the port refuses connections while weights load and graphs
are captured; then /health and /health_generate answer 503 until the built-in warmup generation
has gone through the scheduler, 200 after (/health_generate runs a real 1-token generation each
call); /v1/models answers as soon as the port is open. SIGTERM/SIGINT stop serving, terminate the
scheduler children and exit 0 (like SGLang with SGL_FORCE_SHUTDOWN=1).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from typing import Any, Sequence

from aiohttp import web

from sweeper.sim.args import build_arg_parser, parse_args
from sweeper.sim.boot import TIMES, Boot, BootFailed
from sweeper.sim.config import SimConfig, sim_config_from
from sweeper.sim.failures import SimFailure, failure_of
from sweeper.sim.logs import SimLog
from sweeper.sim.ports import PortTaken, bind_internal_ports
from sweeper.sim.prefix_cache import PrefixCache
from sweeper.sim.procs import terminate_children
from sweeper.sim.profiler import ProfilerError, SimProfiler
from sweeper.sim.scheduler import Jitter, Scheduler, SimRequest
from sweeper.sim.text import (
    GreedyStream, config_seed, garbage_logprob, garbage_token, prompt_key, prompt_length, prompt_tokens,
    sampled_token, token_logprob,
)

__all__ = ["build_arg_parser", "main", "parse_args"]

WARMUP_PROMPT = "The capital city of France is"
SIM_VERSION = "0.5.23-sim"


class BadRequest(ValueError):
    pass


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"object": "error", "message": message, "type": "BadRequestError",
                              "param": None, "code": status}, status=status)


def _parse_prompt(body: dict[str, Any]) -> str | list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt.split():
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return prompt
    raise BadRequest("prompt must be a non-empty string or a non-empty list of token ids")


def _int_field(body: dict[str, Any], name: str, default: int, minimum: int) -> int:
    value = body.get(name, default)
    if value is None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadRequest(f"{name} must be an integer >= {minimum}")
    return value


def _sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n".encode()


class SimServer:
    def __init__(self, args: argparse.Namespace, cfg: SimConfig, failure: SimFailure | None, log: SimLog) -> None:
        self._args = args
        self._cfg = cfg
        self._failure = failure
        self._log = log
        self._ready = False
        self._model_name = args.served_model_name or args.model_path
        self._scheduler = Scheduler(cfg, args.time_scale, Jitter(args.noise, args.random_seed, args.launch_noise,
                                                                      args.run_noise, args.run_noise_steps), log,
                                    hang_after_requests=args.hang_after_requests)
        self._garbage_seed = config_seed(repr(cfg)) if failure is not None and failure.phase == "garbage" else None
        self._request_ids = itertools.count()
        self._runner: web.AppRunner | None = None
        self._profiler = SimProfiler(cfg, args.time_scale)
        self._scheduler.profiler = self._profiler
        self._cache = PrefixCache(enabled=not getattr(args, "disable_radix_cache", False))

    # ---- lifecycle ----

    async def run(self, children: list[subprocess.Popen]) -> None:
        """Boot, open the port, warm up, then serve until cancelled."""
        await Boot(self._args, self._cfg, self._failure, self._log).run(children)
        scheduler_task = asyncio.create_task(self._scheduler.run())
        try:
            await self._open_port()
            await asyncio.sleep(TIMES.warmup_jit * self._args.time_scale)
            await self._generate_one_token(prompt_key(WARMUP_PROMPT), prompt_length(WARMUP_PROMPT))
            self._log.uvicorn(f'127.0.0.1:{40000 + os.getpid() % 20000} - "POST /generate HTTP/1.1" 200 OK')
            self._ready = True
            self._log.info("The server is fired up and ready to roll!")
            await asyncio.Event().wait()
        finally:
            scheduler_task.cancel()

    async def _open_port(self) -> None:
        self._runner = web.AppRunner(self._app(), handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._args.host, self._args.port, shutdown_timeout=0.5)
        self._log.uvicorn(f"Started server process [{os.getpid()}]")
        self._log.uvicorn("Waiting for application startup.")
        try:
            await site.start()
        except OSError as exc:
            self._log.raw(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                          f"('{self._args.host}', {self._args.port}): {exc.strerror}")
            raise BootFailed(1) from exc
        self._log.uvicorn("Application startup complete.")
        self._log.uvicorn(f"Uvicorn running on http://{self._args.host}:{self._args.port} (Press CTRL+C to quit)")

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # ---- requests ----

    def _token_text_fn(self, key: bytes, temperature: float, seed: int | None):
        """Token index -> text: garbage for broken configs, else greedy or sampled."""
        if self._garbage_seed is not None:
            garbage_seed = self._garbage_seed
            return lambda index: garbage_token(garbage_seed, key, index)
        if temperature == 0:
            return GreedyStream(key, self._cfg.tp_size)  # numerics differ slightly across TP sizes
        # Sampling is reproducible per request seed, or per (--random-seed, request number).
        rng = random.Random(seed if seed is not None else f"{self._args.random_seed}:{next(self._request_ids)}")
        return lambda index: sampled_token(rng)

    def _logprob_fn(self, key: bytes):
        """Token index -> logprob of the text under `key` (a prompt, or a continuation's key)."""
        if self._garbage_seed is not None:
            garbage_seed = self._garbage_seed
            return lambda index: garbage_logprob(garbage_seed, key, index)
        numerics = self._cfg.tp_size
        return lambda index: token_logprob(key, index, numerics)

    def _logprobs_block(self, prompt: str | list[int], texts: list[str], echo: bool) -> dict[str, Any]:
        """OpenAI completions `logprobs`: tokens and their logprobs (echo: the prompt's first, the
        first prompt token without one, as vLLM and SGLang answer)."""
        key = prompt_key(prompt)
        tokens, logprobs = [], []
        if echo:
            tokens = prompt_tokens(prompt)
            prompt_lp = self._logprob_fn(b"prompt|" + key)
            logprobs = [None] + [prompt_lp(i) for i in range(1, len(tokens))]
        output_lp = self._logprob_fn(key)
        tokens += texts
        logprobs += [output_lp(i) for i in range(len(texts))]
        return {"tokens": tokens, "token_logprobs": logprobs,
                "top_logprobs": [None if lp is None else {t: lp} for t, lp in zip(tokens, logprobs)],
                "text_offset": None}

    async def _generate_one_token(self, key: bytes, input_len: int) -> None:
        request = SimRequest(input_len=input_len, max_tokens=1, token_text=self._token_text_fn(key, 0.0, None))
        self._scheduler.submit(request)
        try:
            await request.events.get()
        finally:
            if not request.finished:
                self._scheduler.cancel(request)

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/health_generate", self._health_generate)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/model_info", self._model_info)
        app.router.add_get("/get_model_info", self._model_info)
        app.router.add_get("/server_info", self._server_info)
        app.router.add_get("/get_server_info", self._server_info)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_route("*", "/flush_cache", self._flush_cache)
        if getattr(self._args, "enable_metrics", False):
            app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/start_profile", self._start_profile)
        app.router.add_post("/stop_profile", self._stop_profile)
        return app

    async def _health(self, _: web.Request) -> web.Response:
        return web.Response(status=200) if self._ready else web.Response(status=503)

    async def _health_generate(self, _: web.Request) -> web.Response:
        if not self._ready:
            return web.Response(status=503)
        await self._generate_one_token(prompt_key([0]), 1)
        return web.Response(status=200)

    async def _models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": self._model_name, "object": "model", "created": int(time.time()), "owned_by": "sglang",
            "root": self._model_name, "max_model_len": 1_048_576}]})

    async def _model_info(self, _: web.Request) -> web.Response:
        return web.json_response({"model_path": self._args.model_path, "tokenizer_path": self._args.model_path,
                                  "is_generation": True})

    async def _server_info(self, _: web.Request) -> web.Response:
        info = dict(vars(self._args))
        info.update(version=SIM_VERSION, simulated=True, internal_states=[self._scheduler.load_counts()])
        return web.json_response(info)

    async def _tokenize(self, http: web.Request) -> web.Response:
        """SGLang's /tokenize: {"prompt": text | ids} -> its tokens (the simulator's: words)."""
        try:
            body = await http.json()
            prompt = _parse_prompt(body if isinstance(body, dict) else {})
        except (BadRequest, ValueError) as exc:
            return _error(400, str(exc))
        tokens = prompt_tokens(prompt)
        return web.json_response({"tokens": list(range(len(tokens))), "count": len(tokens),
                                  "max_model_len": 1_048_576})

    async def _flush_cache(self, _: web.Request) -> web.Response:
        """As SGLang: refused while requests run, else the radix cache is emptied."""
        if any(self._scheduler.load_counts().values()):
            return web.Response(status=400, text="Cache not flushed because there are pending requests.\n")
        self._cache.flush()
        self._log.info("Cache flushed successfully!")
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details.\n")

    async def _metrics(self, _: web.Request) -> web.Response:
        """The prefix-cache part of SGLang's /metrics (--enable-metrics), Prometheus text."""
        label = f'{{model_name="{self._model_name}"}}'
        lines = ["# HELP sglang:prompt_tokens_total Number of prefill tokens processed.",
                 "# TYPE sglang:prompt_tokens_total counter",
                 f"sglang:prompt_tokens_total{label} {float(self._cache.prompt_tokens)}",
                 "# HELP sglang:cached_tokens_total Number of cached prompt tokens.",
                 "# TYPE sglang:cached_tokens_total counter",
                 f"sglang:cached_tokens_total{label} {float(self._cache.cached_tokens)}",
                 "# HELP sglang:cache_hit_rate The prefix cache hit rate.",
                 "# TYPE sglang:cache_hit_rate gauge",
                 f"sglang:cache_hit_rate{label} {self._cache.hit_rate}"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def _start_profile(self, http: web.Request) -> web.Response:
        try:
            body = await http.json() if http.can_read_body else {}
            if not isinstance(body, dict):
                raise ProfilerError("request body must be a JSON object")
            self._profiler.start(body, dict(os.environ), asyncio.get_running_loop().time())
        except (ProfilerError, ValueError) as exc:
            return web.Response(status=400, text=f"{exc}\n")
        self._log.info("Profiling starts. Traces will be saved to: " + self._profiler.output_dir, rank=0)
        return web.Response(text="Start profiling.\n")

    async def _stop_profile(self, _: web.Request) -> web.Response:
        try:
            recorded = self._profiler.stop()
        except ProfilerError as exc:
            return web.Response(status=400, text=f"{exc}\n")
        # As SGLang: the answer comes once every rank's trace is written.
        paths = await asyncio.to_thread(self._profiler.write, *recorded)
        self._log.info(f"Profiling done. Traces are saved to: {paths[0].parent if paths else ''}", rank=0)
        return web.Response(text="Stop profiling. This will take some time.\n")

    async def _completions(self, http: web.Request) -> web.StreamResponse:
        try:
            body = await http.json()
            if not isinstance(body, dict):
                raise BadRequest("request body must be a JSON object")
            prompt = _parse_prompt(body)
            max_tokens = _int_field(body, "max_tokens", 16, minimum=1)
            temperature = 1.0 if body.get("temperature") is None else float(body["temperature"])
            seed = body.get("seed")
            logprobs = body.get("logprobs")
            echo = bool(body.get("echo", False))
        except (BadRequest, ValueError, TypeError) as exc:
            return _error(400, str(exc))
        stream = bool(body.get("stream", False))
        include_usage = stream and bool((body.get("stream_options") or {}).get("include_usage"))
        input_len = prompt_length(prompt)
        cached = self._cache.admit(prompt_tokens(prompt))  # cached pages skip their prefill
        request = SimRequest(input_len=max(input_len - cached, 1), max_tokens=max_tokens,
                             token_text=self._token_text_fn(prompt_key(prompt), temperature,
                                                            seed if isinstance(seed, int) else None))
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": self._model_name}
        usage = {"prompt_tokens": input_len, "completion_tokens": max_tokens,
                 "total_tokens": input_len + max_tokens}
        self._scheduler.submit(request)
        try:
            if stream:
                return await self._stream(http, request, head, usage if include_usage else None)
            texts = []
            while not request.finished:
                texts.append((await request.events.get()).text)
            block = self._logprobs_block(prompt, texts, echo) if logprobs else None
            prefix = (prompt if isinstance(prompt, str) else "") if echo else ""
            choice = {"index": 0, "text": prefix + "".join(texts), "logprobs": block,
                      "finish_reason": "length", "matched_stop": None}
            return web.json_response({**head, "choices": [choice], "usage": usage})
        finally:
            if not request.finished:
                self._scheduler.cancel(request)  # client disconnected: leave the batch

    async def _stream(self, http: web.Request, request: SimRequest, head: dict[str, Any],
                      usage: dict[str, int] | None) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(http)
        try:
            while True:
                event = await request.events.get()
                choice = {"index": 0, "text": event.text, "logprobs": None,
                          "finish_reason": "length" if event.finished else None, "matched_stop": None}
                data = _sse({**head, "choices": [choice], "usage": None})
                if event.finished:
                    break
                await response.write(data)
            # The tail goes out in one write: the client's turnaround to its next request is
            # wall time that the time scale would otherwise magnify 1/S-fold.
            if usage is not None:
                data += _sse({**head, "choices": [], "usage": usage})
            await response.write(data + _sse("[DONE]"))
            await response.write_eof()
        except ConnectionResetError:
            pass  # the finally in _completions takes the request out of the batch
        return response


def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


async def _serve(args: argparse.Namespace, cfg: SimConfig, failure: SimFailure | None,
                 argv: Sequence[str] = ()) -> int:
    log = SimLog()
    if not _port_is_free(args.host, args.port):
        log.raw("Traceback (most recent call last):\n"
                f"ValueError: port at {args.port} is not available in 30 seconds. Port is already in use.")
        return 1
    try:
        internal = bind_internal_ports(argv, args.host, args.port, log)
    except PortTaken:
        return 1
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    children: list[subprocess.Popen] = []
    server = SimServer(args, cfg, failure, log)
    life = asyncio.create_task(server.run(children))
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({life, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if life.done():
            error = life.exception()
            if isinstance(error, BootFailed):
                return error.exit_code
            raise error if error is not None else RuntimeError("server stopped unexpectedly")
        log.info("Received SIGTERM: shutting down (SGL_FORCE_SHUTDOWN).")
        life.cancel()
        await asyncio.gather(life, return_exceptions=True)
        return 0
    finally:
        stopped.cancel()
        await server.close()
        terminate_children(children)
        for sock in internal:
            sock.close()


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    cfg = sim_config_from(args, os.environ)
    _journal("start", args.port)
    try:
        return asyncio.run(_serve(args, cfg, failure_of(cfg), argv))
    except KeyboardInterrupt:
        return 0
    finally:
        _journal("stop", args.port)


def _journal(event: str, port: int) -> None:
    """Host-side record of server lifetimes (SWEEPER_SIM_JOURNAL): one line per start and stop,
    so tests can check from the host that two servers never overlapped."""
    if path := os.environ.get("SWEEPER_SIM_JOURNAL"):
        with open(path, "a") as out:
            out.write(json.dumps({"event": event, "t": time.time(), "pid": os.getpid(), "port": port,
                                  "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}) + "\n")


if __name__ == "__main__":
    sys.exit(main())
