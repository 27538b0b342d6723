"""A torch profiler trace (CPU + CUDA activities, Chrome trace format, gzipped) of one config: the
bench model in bf16 on the GPU, eager sdpa attention, batch 8, one prefill and a few greedy decode
steps, each step a record_function range. Prints the top kernels by CUDA time.

    python3 bench/gpu/profile_decode.py /tmp/sweeper-model OUT.trace.json.gz [--batch 8 --steps 4]

Warm-up runs the same steps first, outside the profiler, so the trace holds steady-state kernels
(no autotuning, no lazy init).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(str(args.model), dtype=torch.bfloat16,
                                                 attn_implementation="sdpa").to(device).eval()
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, model.config.vocab_size, (args.batch, args.prompt_len), generator=generator).to(device)

    @torch.inference_mode()
    def run_steps() -> torch.Tensor:
        with record_function("prefill"):
            out = model(prompt, use_cache=True)
        cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for step in range(args.steps):
            with record_function(f"decode_step_{step}"):
                out = model(token, past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        return token

    run_steps()  # warm-up: lazy init, cuBLAS handles, kernel selection
    if device == "cuda":
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    started = time.perf_counter()
    with profile(activities=activities, record_shapes=False) as prof:
        run_steps()
        if device == "cuda":
            torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - started) * 1000

    raw = Path(tempfile.mkdtemp()) / "trace.json"
    prof.export_chrome_trace(str(raw))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(raw, "rb") as src, gzip.open(args.out, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    events = json.loads(raw.read_text()).get("traceEvents", [])
    kernels = sum(1 for e in events if e.get("cat") == "kernel")
    sort_key = "cuda_time_total" if device == "cuda" else "cpu_time_total"
    print(prof.key_averages().table(sort_by=sort_key, row_limit=15, max_name_column_width=60))
    print(json.dumps({"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                      "torch": torch.__version__, "batch": args.batch, "prompt_len": args.prompt_len,
                      "decode_steps": args.steps, "profiled_wall_ms": round(wall_ms, 1),
                      "trace_events": len(events), "kernel_events": kernels,
                      "trace_bytes": raw.stat().st_size, "gzip_bytes": os.path.getsize(args.out)}))


if __name__ == "__main__":
    main()
