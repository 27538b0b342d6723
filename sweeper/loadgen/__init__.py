"""Load generator: seeded prompts, a streaming client of our own, statistics, the level loop.

- workload.py   seeded prompts (token ids or text of a length), shared prefixes, arrival schedules
- probe.py      the server's side of a level: prefix-cache flush and hit rate, prompt token counts
- endpoints.py  request bodies and URLs per API (completions, chat, SGLang's /generate), dialects
- client.py     the async send loops (closed loop, open loop) and the streamed request they send
- oneshot.py    one-shot requests, none streamed: a greedy completion, a GET, a POST, a status
- stream.py     a streamed reply parsed as it arrives: events counted into a per-request tally
- sse.py        server-sent-events framing of raw reads into `data:` payloads
- http1.py      the lean HTTP/1.1 client with kept connections
- sockio.py     http1.py's socket layer
- lag.py        the client's own event-loop lag, measured during every run
- metrics.py    pure statistics of a level (bench_serving's definitions), repeats combined
- ladder.py     the level loop (warmup, repeats, hooks) for the sweep and `sweeper load`
- standalone.py the level loop against a server already up (`sweeper load`), its capacity search and records
- precision.py  precision-driven levels: batch means over the MSER-5 steady state, the stop rule
- pinning.py    the load client on a core apart from a local server, for a harness retry
- onhost.py     running a level next to the server (the shipped modules)
- hostmain.py   the entry point of a level run on the host
- native_results.py engine-native benchmark results (bench_serving, vllm bench) read into level records
- capacity.py   SLO capacity: the highest load at which a p99 TTFT / TPOT SLO holds
- vocab.py      the served model's vocabulary, so prompt token ids stay inside it
- direct.py     control-plane requests that bypass HTTP(S)_PROXY
"""
