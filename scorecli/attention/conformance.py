"""Typing only: the type checker holds every backend that `BACKENDS` names to the
`AttentionBackend` protocol (`mypy` in .ci/run). Nothing imports this module; it sits above the
backends so that the table need not import them (docs/ARCHITECTURE.md: Layers)."""

from scorecli.attention.dense import EagerBackend, SdpaBackend
from scorecli.attention.flashinfer import FlashInferBackend
from scorecli.attention.flex import FlexBackend
from scorecli.attention.protocol import AttentionBackend

CHECKED: tuple[type[AttentionBackend], ...] = (FlashInferBackend, FlexBackend, SdpaBackend, EagerBackend)
