"""Mamba-1 mixers (Jamba, Zamba) run from a prefix's state.

transformers' Mamba-1 layers continue a cached convolution window over several tokens, but
their multi-token selective scan always starts from a zero state (mamba-ssm's kernel takes no
initial state), so `forks.mixers.CachedMixer` cannot fork them. These adapters run the
layer's own steps with its own weights, convolution and scan functions (the model module's:
kernels where transformers found them), and add what the prefix's state contributes: the scan
is linear in its state, so from a state h0 the outputs gain `C_t . (exp(A * sum dt) * h0)`
(times the gate) and the final state gains the decayed h0. Exact against the model's own
forward over prefix + item (float32 rounding; tests/test_forks.py). Where the scan is the loop
over time steps (a CPU), it continues from the prefix's state instead, over items given longest
first, each step running only the items still going. Knows nothing about batches beyond
`ForkedMixer`.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from scorecli.forks.mixers import ForkedMixer, State


def _own(module: torch.nn.Module, name: str):
    """The function `name` of the module's model file (a kernel where transformers installed one)."""
    return getattr(sys.modules[type(module).__module__], name)


def convolve(m: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor | None, window: torch.Tensor | None):
    """The layer's causal convolution of x [b, C, T] continuing `window` [b, C, K - 1] (None: zeros)
    -> (activated output [b, C, T], zero at padding; the last K - 1 input columns)."""
    if mask is not None:
        x = x * mask[:, None, :].to(x.dtype)
    full = x if window is None else torch.cat([window, x], dim=-1)
    keep = m.conv_kernel_size - 1
    kept = full[..., full.shape[-1] - min(keep, full.shape[-1]) :]
    kept = F.pad(kept, (keep - kept.shape[-1], 0))
    conv = _own(m, "causal_conv1d_fn")
    out = conv(full, m.conv1d.weight.squeeze(1), m.conv1d.bias, activation=m.activation)[..., -x.shape[-1] :]
    if mask is not None:
        out = out * mask[:, None, :].to(out.dtype)
    return out, kept


# devices where a scan from a state runs transformers' own loop from it (no scan kernel there);
# elsewhere the kernel scans from zero and the state's part is added (tests/test_forks.py runs
# that path on the CPU too)
LOOP_DEVICES = {"cpu"}


def scan_from(m, x, dt, A, B, C, D, z, dt_bias, h0, lens=None, **kw) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's selective scan (x, dt, z [b, d, T]; A [d, n]; B, C [b, n, T]) from state h0
    [b, d, n] (None: zero) -> (output [b, d, T], final state [b, d, n]); `lens`: `_loop_from`'s."""
    if h0 is not None and x.device.type in LOOP_DEVICES:  # the model's own loop, from h0
        return _loop_from(x, dt, A, B, C, D, z, dt_bias, h0, lens)
    scan = _own(m, "mamba_selective_scan")
    y, last = scan(x, dt, A, B, C, D=D, z=z, delta_bias=dt_bias, delta_softplus=True, return_last_state=True, **kw)
    if h0 is None:
        return y, last
    step = F.softplus(dt.float() + (0 if dt_bias is None else dt_bias.float()[..., None]))  # as the scan discretizes
    decay = torch.exp(A.float()[None, :, None, :] * step.cumsum(-1)[..., None])  # [b, d, T, n]
    carried = decay * h0.float()[:, :, None, :]  # h0's part of every state
    read = (carried * C.float().transpose(1, 2)[:, None]).sum(-1)  # [b, d, T]
    y = (y.float() + read * F.silu(z.float())).to(y.dtype)
    return y, (last.float() + carried[:, :, -1]).to(last.dtype)


def _loop_from(x, dt, A, B, C, D, z, dt_bias, h0, lens=None) -> tuple[torch.Tensor, torch.Tensor]:
    """`scan_from` where no scan kernel runs (a CPU): transformers' own recurrent loop over time
    steps (its torch path, step for step), started from h0 instead of zeros. Adding h0's part
    to a zero-state scan afterwards, as the kernel path must, costs four more tensors of batch x
    channels x steps x state; here the state simply carries on. With `lens` (each sequence's
    length, longest first, right padding after), a step runs only the sequences still going:
    the loop's work follows the real tokens, not the longest's."""
    dtype = x.dtype
    if dt_bias is not None:
        dt = dt + dt_bias.to(dt.dtype)[..., None]
    dt = F.softplus(dt)
    B, C = B.transpose(1, 2), C.transpose(1, 2)  # [b, T, n]
    steps = x.shape[-1]
    ends = [steps] if lens is None else sorted({int(n) for n in lens})
    state = h0.to(torch.promote_types(A.dtype, dt.dtype))  # the dtype of the decay, as transformers' loop
    final = torch.empty_like(state)
    y = x.new_zeros(x.shape)
    start = 0
    for end in ends:  # steps [start, end): the sequences of at least `end` tokens
        going = state.shape[0] if lens is None else int((lens >= end).sum())
        final[going : state.shape[0]] = state[going:]
        state, now = state[:going], slice(start, end)
        if end > start:
            decay = torch.exp(A[None, :, None, :] * dt[:going, :, now, None])  # [k, d, t, n]
            pushed = dt[:going, :, now, None] * B[:going, None, now, :].float() * x[:going, :, now, None].float()
            outputs = []
            for t in range(end - start):
                state = decay[:, :, t] * state + pushed[:, :, t]
                outputs.append(torch.matmul(state.to(dtype), C[:going, start + t, :].unsqueeze(-1))[:, :, 0])
            y[:going, :, now] = torch.stack(outputs, dim=-1)
        start = end
    final[: state.shape[0]] = state
    if D is not None:
        y = y + x * D[None, :, None]
    if z is not None:
        y = y * F.silu(z)
    return y.to(dtype), final.to(h0.dtype)


class LoopMixer(ForkedMixer):
    """A Mamba-1 mixer: where its scan is the loop over time steps (`LOOP_DEVICES`), items run
    longest first and each step only the items still going."""

    def by_length(self, x: torch.Tensor) -> bool:
        return x.device.type in LOOP_DEVICES


class JambaMixer(LoopMixer):
    """`JambaMambaMixer` (norms on dt, B and C)."""

    def run(self, x: torch.Tensor, mask: torch.Tensor | None, state: State, lens=None) -> tuple[torch.Tensor, State]:
        m, (window, h0) = self.inner, state
        xs, gate = m.in_proj(x).transpose(1, 2).chunk(2, dim=1)  # [b, D, T] each
        xs, window = convolve(m, xs, mask, window)
        steps, B, C = torch.split(
            m.x_proj(xs.transpose(1, 2)), [m.time_step_rank, m.ssm_state_size, m.ssm_state_size], dim=-1
        )
        steps, B, C = m.dt_layernorm(steps), m.b_layernorm(B), m.c_layernorm(C)
        dt = m.dt_proj.weight @ steps.transpose(1, 2)
        bias = m.dt_proj.bias.float() if m.dt_proj.bias is not None else None
        y, h = scan_from(
            m,
            xs,
            dt,
            -torch.exp(m.A_log.float()),
            B.transpose(1, 2),
            C.transpose(1, 2),
            m.D.float(),
            gate,
            bias,
            h0,
            lens,
            use_mambapy=getattr(m, "use_mambapy", False),
            use_associative_scan=getattr(m, "use_associative_scan", False),
        )
        return m.out_proj(y.transpose(1, 2).to(x.dtype)), (window, h)


class ZambaMixer(LoopMixer):
    """`ZambaMambaMixer` (independent Mamba heads, each with its own x and dt projections)."""

    def run(self, x: torch.Tensor, mask: torch.Tensor | None, state: State, lens=None) -> tuple[torch.Tensor, State]:
        m, (window, h0) = self.inner, state
        b, t = x.shape[:2]
        heads, width = m.n_mamba_heads, m.mamba_head_dim
        xs, gate = m.in_proj(x).transpose(1, 2).view(b, -1, 2, t).chunk(2, dim=2)
        gate = gate.reshape(b, heads, width, t).transpose(0, 1)  # [heads, b, hd, T]
        xs, window = convolve(m, xs.squeeze(2).contiguous(), mask, window)
        xs = xs.reshape(b, heads, width, t).transpose(0, 1)  # [heads, b, hd, T]
        steps, B, C = torch.split(
            (m.x_proj_weight[:, None] @ xs).transpose(-1, -2),
            [m.time_step_rank, m.ssm_state_size, m.ssm_state_size],
            dim=-1,
        )
        dt = m.dt_proj_weight[:, None] @ steps.transpose(-1, -2)  # [heads, b, hd, T]
        A, bias = -torch.exp(m.A_log.float()), m.dt_proj_bias.float() if m.dt_proj_bias is not None else None
        outs, finals = [], []
        for h in range(heads):
            y, last = scan_from(
                m,
                xs[h],
                dt[h],
                A[h],
                B[h].transpose(1, 2),
                C[h].transpose(1, 2),
                m.D[h].float(),
                gate[h],
                None if bias is None else bias[h],
                None if h0 is None else h0[:, h],
                lens,
                use_mambapy=False,
                # transformers <= 5.17's Zamba has no such setting and scans as if it were off
                use_associative_scan=getattr(m, "use_associative_scan", False),
            )
            outs.append(y)
            finals.append(last)
        y = torch.cat(outs, dim=1)  # [b, D, T]
        return m.out_proj(y.transpose(1, 2).to(x.dtype)), (window, torch.stack(finals, dim=1))
