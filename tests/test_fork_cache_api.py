"""The recurrent forks' stand-in cache (`forks.mixers.StateCache`) under both of transformers'
cache APIs. transformers 5.24 hands a mixer `cache=` and it asks `get_recurrent_state`; 5.23 and
before hand it `cache_params=` (or `past_key_values=`) and it asks `has_previous_state`, then
reads `layers[i].conv_states[0]` and `layers[i].recurrent_states[0]`, continuing a single token
through the convolution window in place. CI installs one transformers, so the real mixers of the
other API run only where that one is installed (tests/test_forks.py there; RESULTS.md 2026-11-27
12:00); here a small mixer written each way, as transformers writes them, is forked at its
prefix and held to its own run over prefix + item."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from scorecli.forks.mixers import CachedMixer, cache_keyword, take

K = 3  # convolution width
LAYER = 4


class _Mixer(torch.nn.Module):
    """A causal depthwise convolution (no bias, as Qwen3-Next's), then a decaying running sum:
    h_t = 0.5 h_(t-1) + conv_t."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1d = torch.nn.Conv1d(2, 2, K, groups=2, padding=K - 1, bias=False)
        self.layer_idx, self.conv_kernel_size = LAYER, K

    def _conv(self, full: torch.Tensor, width: int) -> torch.Tensor:
        return F.conv1d(full, self.conv1d.weight, None, padding=K - 1, groups=2)[..., : full.shape[-1]][..., -width:]

    @staticmethod
    def _scan(conv: torch.Tensor, h: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.zeros_like(conv[..., 0]) if h is None else h
        out = []
        for t in range(conv.shape[-1]):
            h = 0.5 * h + conv[..., t]
            out.append(h)
        return torch.stack(out, -1), h


class _NewApi(_Mixer):
    """As transformers 5.24 writes a gated delta-net."""

    def forward(self, hidden_states, cache=None, attention_mask=None, **kwargs):
        if attention_mask is not None:
            hidden_states = hidden_states * attention_mask[..., None]
        x, width = hidden_states.transpose(1, 2), hidden_states.shape[1]
        h = cache.get_recurrent_state(LAYER) if cache is not None else None
        full = cache.update_conv_state(x, LAYER, conv_kernel_size=K) if cache is not None else x
        y, h = self._scan(self._conv(full, width), h)
        if cache is not None:
            cache.update_recurrent_state(h, LAYER)
        return y.transpose(1, 2)


class _OldApi(_Mixer):
    """As transformers 5.17-5.23 write a gated delta-net (a single token: the window in place)."""

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):
        if attention_mask is not None:
            hidden_states = hidden_states * attention_mask[..., None]
        x, width = hidden_states.transpose(1, 2), hidden_states.shape[1]
        previous = cache_params is not None and cache_params.has_previous_state(LAYER, state_idx=0)
        if previous and width == 1 and not cache_params.layers[LAYER].record_past:
            window = cache_params.layers[LAYER].conv_states[0]  # [b, C, K], updated in place
            window.copy_(torch.cat([window[..., 1:], x], dim=-1))
            conv = (window * self.conv1d.weight.squeeze(1)).sum(-1, keepdim=True)
        else:
            if cache_params is not None:
                x = cache_params.update_conv_state(x, LAYER, conv_kernel_size=K)
            conv = self._conv(x, width)
        h = cache_params.layers[LAYER].recurrent_states[0] if previous else None
        y, h = self._scan(conv, h)
        if cache_params is not None:
            cache_params.update_recurrent_state(h, LAYER)
        return y.transpose(1, 2)


class _NoCache(_Mixer):
    def forward(self, hidden_states, attention_mask=None):
        return hidden_states


@pytest.mark.parametrize("api", [_NewApi, _OldApi])
@pytest.mark.parametrize("prefix", [1, 2, 5])
@pytest.mark.parametrize("item", [1, 4])
@pytest.mark.parametrize("padding", [0, 3])
def test_an_item_forked_at_its_prefix_equals_the_mixers_own_run_over_both(api, prefix, item, padding):
    mixer = api().eval()
    adapter = CachedMixer(mixer)
    assert CachedMixer.supports(mixer)
    torch.manual_seed(1)
    p, i = torch.randn(1, prefix, 2), torch.randn(1, item, 2)
    with torch.inference_mode():
        whole = mixer(torch.cat([p, i], dim=1))  # no cache: the mixer over prefix + item
        # the prefix left-padded, as a batch of prefixes runs; garbage at the padding
        padded = torch.cat([torch.full((1, padding, 2), 7.0), p], dim=1)
        mask = torch.cat([torch.zeros(1, padding), torch.ones(1, prefix)], dim=1) if padding else None
        out_p, state = adapter.run(padded, mask, (None, None))
        out_i, _ = adapter.run(i, None, take(state, torch.tensor([0])))
    torch.testing.assert_close(out_p[:, padding:], whole[:, :prefix], rtol=0, atol=1e-6)
    torch.testing.assert_close(out_i, whole[:, prefix:], rtol=0, atol=1e-6)


def test_a_mixer_that_takes_no_cache_is_not_forked():
    assert cache_keyword(_NewApi()) == "cache" and cache_keyword(_OldApi()) == "cache_params"
    assert CachedMixer.supports(_OldApi()) and not CachedMixer.supports(_NoCache())
