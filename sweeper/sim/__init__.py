"""Simulated SGLang server: DeepSeek-V4-Flash (FP4 experts) on 8x RTX PRO 6000 Blackwell (sm_120).

A real HTTP server process, started as SGLang is (`python -m sweeper.sim --model-path M --host H
--port P [SGLang flags] [--time-scale S --load-seconds L --noise N]`), with SGLang's readiness
behaviour, logs, failure lines and process model, whose speed comes from a pure model calibrated
on the case study in /work/shared/seed. Modules:

- config.py    SimConfig (flags + NCCL env) and sim_config_from(args, env)
- perf.py      pure step/prefill/throughput model (calibration table in its docstring)
- failures.py  failure_of(cfg): which configs crash, hang or emit garbage, with their log lines
- args.py      the SGLang-compatible argparse parser (build_arg_parser, parse_args)
- scheduler.py continuous batching on absolute deadlines, in modelled time * time scale
- boot.py      start-up sequence: distributed init, weight load, memory pool, graph capture
- server.py    aiohttp app (/health, /health_generate, /v1/models, /v1/completions, /tokenize,
               /flush_cache, /metrics with --enable-metrics, ...) + main
- profiler.py  /start_profile, /stop_profile: torch-format traces whose kernels follow perf.py
- prefix_cache.py  the radix cache in pages (--disable-radix-cache), /flush_cache, /metrics counters
- procs.py     the per-GPU scheduler children that survive a SIGKILLed parent (kill the group)
- text.py      deterministic greedy tokens, garbage tokens
- logs.py      SGLang-style log lines
- ports.py     the internal ports SGLang binds besides --port (NCCL, DP attention), held while it lives
- gpumem.py    the simulator's bookkeeping of "GPU memory", read by the nvidia-smi stand-in
- nvidia_smi.py a stand-in for `nvidia-smi` on hosts without a GPU (the real tool's formats)
- best.py      the model's exact optimum (or Pareto front) of a space, against a study's pick

The optimum (C=16, input 128, output 32): tp=8, ep=8 (ep = tp), moe_runner_backend
flashinfer_mxfp4 (or auto, which resolves to it), moe_a2a_backend none, attention triton (or
auto), CUDA graphs on with cuda_graph_max_bs >= 16, NCCL_PROTO=LL, NCCL_ALGO=Ring, any safe
mem_fraction_static, max_running_requests >= 16 (or unset), chunked_prefill_size >= 2048 (or
unset): 605 ms/step at b=16, 26.5 tok/s, against 23.0 tok/s for the case study's baseline (tp=8,
ep=1, marlin, mem 0.70). Attention is ~60% of a step at b=1 and 63% (baseline) to 73% (optimum)
at b=16, and no lever touches it: nothing gets within 30x of 1,000 tok/s. At C=1 ep=1 is slightly better (EP dispatch costs more than it saves).

Crash regions (checked in this order; see failures.py):
- startup, invalid_argument: mem_fraction_static outside (0, 1), cuda_graph_max_bs < 1,
  max_running_requests < 1, chunked_prefill_size 0 or < -1.
- startup, invalid_parallel: tp_size > GPUs (8), ep_size > tp_size or not dividing it,
  tp_size not dividing the 64 attention heads.
- startup, unsupported (`... is only supported on ...`, `Scheduler hit an exception`,
  `Received sigquit from a child process`): attention fa3 / fa4 / flashmla / trtllm_mla /
  cutlass_mla; moe_a2a_backend deepep; moe_a2a_backend flashinfer with ep_size == 1.
- hang: NCCL_P2P_DISABLE=0 with tp_size >= 4 (log stops at `Init torch distributed begin.`,
  port never opens, process stays alive).
- load, not_enough_memory (`Not enough memory. Please try to increase --mem-fraction-static`):
  mem_fraction * 96 GB < 160 GB / tp + 4 GB, i.e. tp=1 always, tp=2 below 0.875, tp=4 below
  0.458, tp=8 below 0.25.
- load, oom (`torch.OutOfMemoryError: CUDA out of memory`): mem_fraction > 0.906.
- capture, oom: with CUDA graphs, mem_fraction > 1 - (9 + 0.008 * cuda_graph_max_bs) / 96:
  0.905 (bs 16), 0.893 (bs 160, the default), 0.885 (bs 256).
- capture, cuda_graph_capture (`Capture cuda graph failed`): moe_a2a_backend flashinfer with CUDA
  graphs on (it runs only with --disable-cuda-graph, a little cheaper a2a but no graphs).
- garbage, garbage_output: moe_runner_backend other than marlin, flashinfer_mxfp4, auto: the
  server is healthy and fast but answers nonsense (check outputs, not just status codes).
- mid-load hang (only with `--hang-after-requests N`): after N finished requests no step completes;
  /health answers 200, requests get no token (the controller's load watchdog ends the trial `hang`).

Greedy answers depend on the TP size at a few near-tied positions (text.py, TIE_RATE), so a
correctness gate comparing TP 4 with a TP 8 reference needs its tolerance, as on real GPUs.
"""
