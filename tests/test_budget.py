"""The default token budget: small on CPU, sized from free memory on CUDA (`runtimes.budget`)."""

from __future__ import annotations

import torch
from transformers import Qwen3Config

from scorecli.runtimes import budget

QWEN3_06B = Qwen3Config(
    hidden_size=1024, intermediate_size=3072, num_attention_heads=16, num_key_value_heads=8, head_dim=128
)


def test_cpu_budget_is_small():
    assert budget.default_batch_tokens(QWEN3_06B, torch.device("cpu"), torch.float32) == budget.CPU_BATCH_TOKENS


def test_cuda_budget_follows_free_memory(monkeypatch):
    per_token = budget.activation_bytes_per_token(QWEN3_06B, torch.bfloat16)
    assert 27_000 < per_token < 60_000  # 27.3 kB/token measured on an H200 (eager, 64k-token MIS batches)
    for free, expected in [
        (140 << 30, budget.MAX_CUDA_BATCH_TOKENS),
        (1 << 30, budget.MIN_CUDA_BATCH_TOKENS),
        (4 << 30, (4 << 30) // 2 // per_token // 1024 * 1024),
    ]:
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device, free=free: (free, 2 * free))
        assert budget.default_batch_tokens(QWEN3_06B, torch.device("cuda"), torch.bfloat16) == expected
    assert budget.MIN_CUDA_BATCH_TOKENS < (4 << 30) // 2 // per_token < budget.MAX_CUDA_BATCH_TOKENS
