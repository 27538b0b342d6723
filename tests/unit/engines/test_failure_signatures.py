"""Every failure line of engines.md classified from a realistic log excerpt (SGLang and vLLM), with
the table order deciding when a crash logs several of them. The substrings were checked in the
released sources (sglang 0.5.23: decode_cuda_graph_runner.py, prefill_cuda_graph_runner.py,
pool_configurator.py, tp_worker.py, distributed/bootstrap.py, scheduler.py, entrypoints/engine.py,
http_server.py, server_args.py; vllm 0.33.0: v1/core/kv_cache_planning.py, v1/worker/utils.py,
v1/engine/utils.py)."""

import pytest

from sweeper.engines.adapter import classify_log
from sweeper.engines.sglang import SGLANG_SIGNATURES
from sweeper.engines.vllm import VLLM_SIGNATURES
from tests.support.paths import FIXTURE_DIR

FIXTURES = FIXTURE_DIR / "vllm"
TS = "[2026-11-29 10:00:01 TP3]"
SIGQUIT = "[2026-11-29 10:00:02] Received sigquit from a child process. It usually means the child failed."
LOADING = "Loading safetensors checkpoint shards:  46% Completed | 21/46 [00:31<00:37,  1.50s/it]"

SGLANG_EXCERPTS = {
    "cuda_graph_capture (decode)": ("cuda_graph_capture", f"""\
{TS} Capture cuda graph begin. This can take up to several minutes. avail mem=10.12 GB
Capturing batches (bs=16 avail_mem=10.10 GB):   0%|          | 0/7 [00:00<?, ?it/s]
{TS} Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", line 603, in __init__
Exception: Capture cuda graph failed: CUDA error: operation not permitted when stream is capturing
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
{SIGQUIT}"""),
    "cuda_graph_capture (prefill)": ("cuda_graph_capture", f"""\
{TS} Scheduler hit an exception: Traceback (most recent call last):
Exception: Capture prefill CUDA graph failed: CUDA error: an illegal memory access was encountered
{SIGQUIT}"""),
    "not_enough_memory": ("not_enough_memory", f"""\
{TS} Load weight end. type=DeepseekV4ForCausalLM, dtype=torch.bfloat16, avail mem=14.97 GB, mem usage=80.00 GB.
{TS} Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/pool_configurator.py", line 96, in configure
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
{SIGQUIT}"""),
    "kv_cache_too_small": ("kv_cache_too_small", f"""\
{TS} Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/tp_worker.py", line 425, in __init__
    assert max_req_len > 0, "Memory pool size is too small"
AssertionError: Memory pool size is too small
{SIGQUIT}"""),
    "gpus_not_clean": ("gpus_not_clean", f"""\
{TS} Init torch distributed begin.
{TS} Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/distributed/bootstrap.py", line 445, in check_memory
RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. min_per_gpu_memory=12.5, local_gpu_memory=95.0, local_gpu_memory * 0.9=85.5
{SIGQUIT}"""),
    "oom": ("oom", f"""\
{TS} Scheduler hit an exception: Traceback (most recent call last):
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.25 GiB. GPU 3 has a total capacity of 94.97 GiB of which 1.02 GiB is free.
{SIGQUIT}"""),
    "nccl watchdog": ("nccl", f"""\
{TS} Decode batch. #running-req: 16, #token: 4480, token usage: 0.01, cuda graph: True, gen throughput (token/s): 23.10, #queue-req: 0
[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=40211, OpType=ALLREDUCE, NumelIn=7168, NumelOut=7168, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."""),
    "nccl warn": ("nccl", "gpu-box:80503:80711 [3] NCCL WARN Cuda failure 'peer access is not supported between these two devices'"),
    "nccl error": ("nccl", f"""\
{TS} Scheduler hit an exception: Traceback (most recent call last):
torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled cuda error
{SIGQUIT}"""),
    "triton shared memory": ("triton_shared_memory", f"""\
{TS} Scheduler hit an exception: Traceback (most recent call last):
triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072, Hardware limit: 101376. Reducing block sizes or `num_stages` may help.
{SIGQUIT}"""),
    "scheduler exception": ("child_crash", f"""\
{TS} Scheduler hit an exception: Traceback (most recent call last):
KeyError: 'model.layers.3.mlp.experts.w13_weight_scale'
{SIGQUIT}"""),
    "sigquit alone": ("child_crash", f"{LOADING}\n{SIGQUIT}"),
    "warmup failed": ("child_crash", "[2026-11-29 10:05:00] Initialization failed. warmup error: Traceback (most recent call last):\n"
                                     "RuntimeError: generation stalled"),
    "port busy": ("port_busy", """\
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/server_args.py", line 886, in __post_init__
ValueError: Port is already in use. dist_init_port=30233 port_base=30000 detokenizer_port=30235 nccl_port=30236 scheduler_input_port=30237"""),
    "uvicorn bind": ("port_busy", "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use"),
    # internal ports: pyzmq's bind error (sgl-project/sglang#9396) and torch.distributed's store on the
    # NCCL port (as torch 2.x words it, vllm-project/vllm#39015)
    "zmq bind": ("port_busy", f"""\
{TS} Scheduler hit an exception: Traceback (most recent call last):
  File "zmq/backend/cython/_zmq.py", line 1009, in zmq.backend.cython._zmq.Socket.bind
zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:30235')
{SIGQUIT}"""),
    "torch store": ("port_busy", f"""\
{TS} Scheduler hit an exception: Traceback (most recent call last):
torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use
{SIGQUIT}"""),
    "unsupported": ("unsupported", f"""\
{TS} Scheduler hit an exception: Traceback (most recent call last):
AssertionError: fa3 attention backend is only supported on sm_90/sm_100 (this GPU is sm_120)
{SIGQUIT}"""),
}

VLLM_EXCERPTS = {
    "no cache memory": ("not_enough_memory", """\
(EngineCore_DP0 pid=4242) ERROR 11-29 10:00:01 [core.py:842] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}"""),
    "max seq len": ("kv_cache_too_small", """\
(EngineCore_DP0 pid=4242) ERROR 11-29 10:00:01 [core.py:842] ValueError: To serve at least one request with the model's max seq len (1048576), (61.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.50 GiB). Based on the available memory, the estimated maximum model length is 163328.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}"""),
    "utilization above free memory": ("memory_utilization_too_high", """\
(EngineCore_DP0 pid=4242) ValueError: Free memory on device cuda:0 (12.1/94.97 GiB) on startup is less than desired GPU memory utilization (0.92, 87.37 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."""),
    "oom": ("oom", "(Worker_TP1 pid=4250) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB."),
    "nccl": ("nccl", "(Worker_TP1 pid=4250) torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled system error"),
    "port": ("port_busy", "(APIServer pid=4200) ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): address already in use"),
    "unsupported": ("unsupported", "(EngineCore_DP0 pid=4242) AssertionError: FlashAttnMLA is not supported on this device"),
    "engine core zmq": ("port_busy", """\
(APIServer pid=4200)   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core_client.py", line 465, in __init__
(APIServer pid=4200) zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5570')"""),
    "master port": ("port_busy", "(Worker_TP0 pid=4250) torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29501, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"),
    "nccl watchdog": ("nccl", "(Worker_TP1 pid=4250) [rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE) ran for 600041 milliseconds before timing out."),
    "nccl warn": ("nccl", "(Worker_TP1 pid=4250) gpu-box:4250:4291 [1] NCCL WARN Cuda failure 'peer access is not supported between these two devices'"),
    "unsupported here": ("unsupported", "(EngineCore_DP0 pid=4242) ValueError: b12x paged attention is not supported on the current device"),
    # excerpts: the first two as the real 0.24.0 logs hold them (REAL_VLLM_LOGS below), the last
    # two built from 0.24.0's sources (config/scheduler.py, argparse), not yet seen in a real log
    "unsupported for": ("unsupported", "(EngineCore pid=1797) ValueError: moe_backend='triton_unfused' is not supported for unquantized MoE. Expected one of ['triton', 'flashinfer_trtllm', 'flashinfer_cutlass', 'aiter']."),
    "pydantic refusal": ("invalid_argument", """\
(APIServer pid=1729) pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig
gpu_memory_utilization
  Input should be less than or equal to 1 [type=less_than_equal, input_value=1.5, input_type=float]"""),
    "batched tokens": ("invalid_argument", "(APIServer pid=1729) ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (4096). This effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences."),
    "argparse": ("invalid_argument", "vllm serve: error: argument --max-num-seqs: invalid int value: 'many'"),
    "engine core": ("child_crash", "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': -9}"),
}


# Whole logs of real vLLM 0.24.0 start-ups on the H200 (tests/fixtures/vllm/README.md)
REAL_VLLM_LOGS = {
    "fail_triton_unfused.log": "unsupported",  # before: the generic child_crash
    "fail_util_too_low.log": "not_enough_memory",  # 0.01 with the 32,000-token model (session 1)
    "fail_util_too_high.log": "memory_utilization_too_high",  # 1.0: before, gpus_not_clean
    "fail_bad_value.log": "invalid_argument",  # 1.5, pydantic's refusal: before, unclassified
}


@pytest.mark.parametrize("name", REAL_VLLM_LOGS)
def test_real_vllm_024_failure_logs(name):
    text = (FIXTURES / name).read_text()
    found = classify_log(text, VLLM_SIGNATURES)
    assert found is not None and found.kind == REAL_VLLM_LOGS[name]


def test_real_vllm_024_healthy_log_classifies_as_nothing():
    """A healthy real start-up (JIT warnings, ulimit warning, CUDA graphs) matches no failure line."""
    assert classify_log((FIXTURES / "serve_defaults.log").read_text(), VLLM_SIGNATURES) is None


@pytest.mark.parametrize("name", SGLANG_EXCERPTS)
def test_sglang_signature(name):
    kind, text = SGLANG_EXCERPTS[name]
    found = classify_log(text, SGLANG_SIGNATURES)
    assert found is not None and found.kind == kind


@pytest.mark.parametrize("name", VLLM_EXCERPTS)
def test_vllm_signature(name):
    kind, text = VLLM_EXCERPTS[name]
    found = classify_log(text, VLLM_SIGNATURES)
    assert found is not None and found.kind == kind


def test_every_signature_of_both_tables_is_exercised():
    """A table row no excerpt reaches would be untested data."""
    for table, excerpts in ((SGLANG_SIGNATURES, SGLANG_EXCERPTS), (VLLM_SIGNATURES, VLLM_EXCERPTS)):
        texts = [text for _, text in excerpts.values()]
        unused = [s.substring for s in table if not any(s.substring in t for t in texts)]
        assert unused == []


def test_healthy_logs_classify_as_nothing():
    healthy = (f"{TS} Load weight begin. avail mem=94.97 GB\n{LOADING}\n"
               f"{TS} Capture cuda graph end. Time elapsed: 12.10 s. mem usage=0.13 GB. avail mem=9.88 GB.\n"
               "[2026-11-29 10:03:00] The server is fired up and ready to roll!\n"
               "(APIServer pid=4200) INFO:     Application startup complete.\n"
               "(APIServer pid=4200) WARNING 11-29 10:00:00 [parallel.py:750] Address already in use. Retrying with a new port.")
    assert classify_log(healthy, SGLANG_SIGNATURES) is None and classify_log(healthy, VLLM_SIGNATURES) is None
