"""Typing only: the type checker holds every family that `KINDS` names to the `Family` protocol
(`mypy` in .ci/run). Nothing imports this module; it sits above the families so that the table
need not import them (docs/ARCHITECTURE.md: Layers)."""

from scorecli.kinds import Family
from scorecli.kinds.decoder import DecoderFamily
from scorecli.kinds.embedding import EmbeddingFamily
from scorecli.kinds.multi_vector import MultiVectorFamily
from scorecli.kinds.pairs import PairFamily
from scorecli.kinds.sparse import SparseFamily

CHECKED: tuple[type[Family], ...] = (DecoderFamily, PairFamily, EmbeddingFamily, MultiVectorFamily, SparseFamily)
