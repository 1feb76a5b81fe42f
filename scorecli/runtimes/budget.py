"""How many tokens one forward batch holds when `--max-batch-tokens` is not given.

On a CPU, small batches run faster (activations stay in cache; benchmarks/RESULTS.md). On a
GPU, few large batches keep it busy: the budget is what the device's free memory holds at the
model's activation size per token, capped where larger steps stop paying. The estimate is
deliberately generous (about 1.6x what a Qwen3-0.6B-shaped layer was measured to keep alive on
an H200), and a batch that still runs out of memory is halved (`Scorer`). Knows nothing about
rows, kinds or files.
"""

from __future__ import annotations

import torch

CPU_BATCH_TOKENS = 2048
# the GPU's limits: below MIN the matrix products are too small to fill it; above MAX a batch
# gains little more (measured eagerly on an H200: 16k-token batches ran 8% slower than 128k)
MIN_CUDA_BATCH_TOKENS = 16384
MAX_CUDA_BATCH_TOKENS = 131072
FREE_MEMORY_SHARE = 0.5  # of the free memory after loading; the rest for the allocator's slack


def activation_bytes_per_token(config, dtype: torch.dtype) -> int:
    """Bytes a decoder layer keeps alive per token at its peak: the residual stream and its
    normed copy, q/k/v and attention output, the MLP's gate, up and activation, and float32
    norm temporaries."""
    text = getattr(config, "text_config", None) or config
    hidden = int(getattr(text, "hidden_size", 1024))
    inter = int(getattr(text, "intermediate_size", None) or 4 * hidden)
    heads = int(getattr(text, "num_attention_heads", 16))
    head_dim = int(getattr(text, "head_dim", None) or hidden // heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    size = torch.finfo(dtype).bits // 8
    width = 2 * hidden + 2 * heads * head_dim + 2 * kv_heads * head_dim + 3 * inter
    return size * width + 4 * 2 * hidden


def default_batch_tokens(config, device: torch.device, dtype: torch.dtype) -> int:
    """The token budget on `device` for a model with `config` loaded in `dtype`."""
    if device.type != "cuda":
        return CPU_BATCH_TOKENS
    free, _ = torch.cuda.mem_get_info(device)
    fits = int(free * FREE_MEMORY_SHARE) // activation_bytes_per_token(config, dtype)
    return max(MIN_CUDA_BATCH_TOKENS, min(MAX_CUDA_BATCH_TOKENS, fits // 1024 * 1024))
