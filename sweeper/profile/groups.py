"""Which group a kernel (or, in a CPU-only trace, an operator) belongs to.

The rules are data: an ordered list of (group, regular expression, why); the first rule whose
pattern is found in the lower-cased name wins, and a name no rule matches is "other". Order
matters: communication comes first (a MoE all-to-all kernel is communication, not MoE), then
attention (cutlass and flash attention kernels would otherwise look like GEMMs), then MoE/GEMM.
"""

from __future__ import annotations

import re
from functools import lru_cache

GROUPS = ("attention", "moe_gemm", "communication", "other")
GROUP_LABELS = {"attention": "attention", "moe_gemm": "MoE/GEMM", "communication": "communication",
                "other": "other"}

GROUP_RULES: tuple[tuple[str, str, str], ...] = (
    ("communication", r"nccl", "NCCL collectives and send/recv (ncclDevKernel_AllReduce_Sum_bf16_RING_LL, ...)"),
    ("communication", r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all",
     "custom collectives (trtllm allreduce fusion, SGLang/vLLM custom all-reduce)"),
    ("communication", r"cross_device_reduce|custom_?ar\b|one_?shot_?all|two_?shot_?all",
     "vLLM/SGLang custom all-reduce kernels"),
    ("communication", r"deep_?ep|moe_?a2a|a2a_?(dispatch|combine)|pplx|nvshmem",
     "MoE token dispatch/combine between GPUs (DeepEP, flashinfer a2a, pplx)"),
    ("communication", r"memcpy ptop|memcpy p2p", "peer-to-peer copies between GPUs"),
    ("communication", r"c10d::|gloo", "collectives in a CPU trace"),
    ("attention", r"attention|attn", "named attention kernels (BatchDecodeWithPagedKVCache..., *_attn_*)"),
    ("attention", r"fmha|flash_?fwd|flash_?bwd|flash::|flashattn|flashmla|flash_mla",
     "flash/cutlass fused attention (FA2/FA3, PyTorch SDPA's fmha_cutlassF, FlashMLA)"),
    ("attention", r"sdpa|scaled_dot_product", "PyTorch scaled_dot_product_attention and cuDNN SDPA"),
    ("attention", r"paged_?kv|mla_|_mla|mla::", "paged KV and MLA decode kernels"),
    ("attention", r"reshape_and_cache|store_?kv|set_kv_buffer|kv_?cache",
     "writing K/V into the paged cache, part of the attention layer"),
    ("attention", r"sparse_decode|_fwd_kernel_stage|_fwd_grouped_kernel|extend_attention|merge_state|indexer",
     "SGLang triton decode/extend attention, DeepSeek sparse-attention indexer"),
    ("moe_gemm", r"moe|expert|marlin|topk_?softmax|grouped_?gemm",
     "MoE experts and routing (fused_moe_kernel, marlin_moe_wna16, cutlass_fused_moe)"),
    ("moe_gemm", r"gemm|gemv|matmul|nvjet|cublas|cutlass|xmma|wgmma|hmma|splitk",
     "dense GEMM/GEMV (cuBLAS nvjet/sm90_xmma, cutlass, ampere_*gemm)"),
    ("moe_gemm", r"(^|[^a-z])(b|add|baddb|_scaled_)?mm([^a-z]|$)|aten::linear|mkldnn|onednn|dnnl",
     "matrix multiplies in a CPU trace (aten::addmm, aten::mm, aten::bmm) and inductor mm templates"),
)

_COMPILED = tuple((group, re.compile(pattern)) for group, pattern, _ in GROUP_RULES)


@lru_cache(maxsize=65536)
def classify_kernel(name: str) -> str:
    """The group of a kernel or operator name: attention | moe_gemm | communication | other."""
    lowered = name.lower()
    for group, pattern in _COMPILED:
        if pattern.search(lowered):
            return group
    return "other"
