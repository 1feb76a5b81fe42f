"""One frozen configuration for a scoring run, and validation of flag combinations.

This module knows nothing about models or files: it only checks that the flags make
sense together. Checks that need the model (label tokens, kind, mode) live in `spec.py`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from scorecli.attention import backends as attention_backends
from scorecli.core.templates import ACTIVATIONS
from scorecli.errors import UsageError
from scorecli.io import OUTPUT_COLUMNS
from scorecli.kinds import FAMILIES
from scorecli.runtimes import NAMES as runtime_names
from scorecli.runtimes import runtime_info

# Every integer flag is range-checked while it is parsed (exit 2, one line): no count or token id
# needs more than 2**31 - 1, and a value past 2**63 - 1 would overflow numpy after the model loads.
MAX_INT = 2**31 - 1

KINDS = tuple(FAMILIES)
SIMILARITIES = ("cosine", "dot")
MODES = ("auto", "mis", "single")
ATTENTIONS = attention_backends.NAMES
DTYPES = ("auto", "float32", "bfloat16", "float16")
POOLINGS = ("last", "cls")
TRUNCATES = ("item", "error")
HIDDEN_DTYPES = ("float32", "float16")
CHUNK_AGGREGATES = ("max", "mean", "first")
RUNTIMES = runtime_names
COMPILES = ("auto", "on", "off")  # torch.compile around a decoder's layers (`runtimes.compiled`)


@dataclass(frozen=True)
class ScoreConfig:
    """Everything a run needs to know, passed down explicitly.

    `None` means "decide from the model or template" (kind, activation, label tokens,
    max_seq_len, pooling); the resolved values live in `spec.RunSpec`.
    """

    model: str
    kind: str | None = None
    mode: str = "auto"
    template: str = "plain"
    instruction: str | None = None
    label_tokens: tuple[str, ...] | None = None
    label_token_ids: tuple[int, ...] | None = None
    activation: str | None = None
    positive_label: str | None = None
    pooled_hidden_states: bool = False
    pooling: str | None = None
    hidden_dtype: str = "float32"
    query_field: str = "query"
    items_field: str = "items"
    id_field: str = "id"
    labels_field: str = "labels"  # relevance labels: kept in the output, ranking metrics (`core.metrics`)
    group_by: str | None = None  # records of one (query, item) each, grouped into rows by this column (`io.groups`)
    device: str = "auto"
    dtype: str = "auto"
    attention: str = "auto"
    compile: str = "auto"
    runtime: str = "auto"  # CPU encoders: torch, or ONNX Runtime on a cached export (`runtime_onnx`), or its int8 copy
    # not a flag: why a resumed job runs the runtime `auto` chose for its kept rows (their metadata's)
    runtime_reason: str | None = None
    # not a flag: the route (`runtimes.route.Route.text`) `auto` chose for a resumed job's kept rows
    # when it ran one runtime on short batches and the other on long ones
    runtime_route: str | None = None
    max_batch_tokens: int | None = None  # None: by device and model (`runtimes.budget`)
    max_seq_len: int | None = None
    truncate: str = "item"
    window_rows: int = 2048  # rows per window; with `window_seconds`, the most rows a window grows to
    # windows of 1, 2, 4 rows, then the rows one window scores in this many seconds (`engine.windows`); None: all `window_rows`
    window_seconds: float | None = None
    share_prefix: bool = True  # compute a prefix every row of a window starts with once (decoders)
    self_check: bool = True  # compare a probe row with the model's own forward first (`selfcheck`)
    skip_bad_rows: bool = False
    compact: bool = False  # no `scores` column when there is one label (`score` holds the same values)
    top_k: int | None = None  # docs/ranking.md: the `top_k` column
    chunk_tokens: int | None = None  # docs/ranking.md: score items longer than this in chunks
    chunk_overlap: int = 0
    chunk_aggregate: str = "max"
    similarity: str | None = (
        None  # docs/models.md: Which models, embedding models (embedding): None: the model's similarity_fn_name, else cosine
    )
    query_prompt: str | None = None  # a prompt name of the model, or literal text; None: the model's default
    item_prompt: str | None = None
    trust_remote_code: bool = False
    allow_pickle: bool = False
    cache_dir: str | None = None  # where dequantized GGUF checkpoints and ONNX (and int8) exports are kept
    extra_metadata: tuple[tuple[str, str], ...] = field(default=())
    score_cache: str | None = (
        None  # docs/long-jobs.md: Nightly jobs: a folder or store prefix of scores already computed
    )
    audit: int = 0  # pairs re-scored through the model's own float32 forward after the run (`checks.audit`)
    audit_strict: bool = False  # an audit beyond tolerance exits 1 after the output is written
    # not a flag: about how many tokens the whole job holds (the CLI estimates it from its inputs'
    # sizes; None: unknown, e.g. stdin or the library); `--compile auto` compiles jobs long enough
    job_tokens: int | None = None

    def __post_init__(self) -> None:
        # a library caller may write a list flag as the command line does: label_tokens="yes,no"
        if isinstance(self.label_tokens, str):
            object.__setattr__(self, "label_tokens", split_list(self.label_tokens))
        if isinstance(self.label_token_ids, str):
            object.__setattr__(self, "label_token_ids", token_ids(self.label_token_ids))
        check_choice("--kind", self.kind, KINDS, optional=True)
        check_choice("--mode", self.mode, MODES)
        check_choice("--activation", self.activation, ACTIVATIONS, optional=True)
        check_choice("--attention", self.attention, ATTENTIONS)
        check_choice("--runtime", self.runtime, RUNTIMES)
        check_choice("--compile", self.compile, COMPILES)
        if self.runtime in RUNTIMES[1:] and runtime_info(self.runtime).approximate and not self.self_check:
            raise UsageError(
                f"--runtime {self.runtime} needs the self-check, which measures and records how far its "
                "scores drift from the model's own forward: drop --no-self-check"
            )
        check_choice("--dtype", self.dtype, DTYPES)
        check_choice("--pooling", self.pooling, POOLINGS, optional=True)
        check_choice("--truncate", self.truncate, TRUNCATES)
        check_choice("--hidden-dtype", self.hidden_dtype, HIDDEN_DTYPES)
        check_choice("--similarity", self.similarity, SIMILARITIES, optional=True)
        if self.label_tokens is not None and self.label_token_ids is not None:
            raise UsageError("give either --label-tokens or --label-token-ids, not both")
        if self.label_tokens is not None and not all(self.label_tokens):
            raise UsageError("--label-tokens: empty label token in the list")
        if self.max_batch_tokens is not None and self.max_batch_tokens < 1:
            raise UsageError("--max-batch-tokens must be at least 1")
        if self.max_seq_len is not None and self.max_seq_len < 2:
            raise UsageError("--max-seq-len must be at least 2")
        check_choice("--chunk-aggregate", self.chunk_aggregate, CHUNK_AGGREGATES)
        if self.top_k is not None and self.top_k < 1:
            raise UsageError(f"--top-k must be at least 1, got {self.top_k}")
        if self.chunk_tokens is not None and self.chunk_tokens < 1:
            raise UsageError(f"--chunk-tokens must be at least 1, got {self.chunk_tokens}")
        if (self.chunk_overlap or self.chunk_aggregate != "max") and self.chunk_tokens is None:
            raise UsageError("--chunk-overlap and --chunk-aggregate need --chunk-tokens")
        if self.chunk_tokens is not None and not 0 <= self.chunk_overlap < self.chunk_tokens:
            raise UsageError(
                f"--chunk-overlap must be at least 0 and less than --chunk-tokens {self.chunk_tokens}, "
                f"got {self.chunk_overlap}"
            )
        if not self.pooled_hidden_states and (self.pooling is not None or self.hidden_dtype != "float32"):
            flag = "--pooling" if self.pooling is not None else "--hidden-dtype"
            raise UsageError(f"{flag} applies to the pooled_hidden_states column: pass --pooled-hidden-states too")
        if self.score_cache is not None and not self.score_cache.strip():  # an unset "$CACHE": not no cache
            raise UsageError("--score-cache: empty location (give a folder or an object-store prefix)")
        if self.audit < 0:
            raise UsageError(f"--audit must be at least 0, got {self.audit}")
        if self.audit_strict and not self.audit:
            raise UsageError("--audit-strict needs --audit N (N > 0)")
        if self.audit_strict and runtime_info(self.runtime).approximate:
            raise UsageError(
                f"--audit-strict: --runtime {self.runtime}'s scores drift from the float32 forward by design, so "
                "the audit measures them and cannot pass them (use --audit alone, or --runtime onnx)"
            )
        if self.window_rows < 1:
            raise UsageError("--window-rows must be at least 1")
        if self.window_seconds is not None and not (math.isfinite(self.window_seconds) and self.window_seconds > 0):
            raise UsageError(f"--window-seconds must be a finite number more than 0, got {self.window_seconds}")
        check_copied_fields(self.id_field, self.labels_field)
        if not (self.device in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:[0-9]+", self.device)):
            raise UsageError(f"--device: expected auto, cpu, cuda or cuda:N, got {self.device!r}")


def check_copied_fields(id_field: str, labels_field: str) -> None:
    """UsageError when an input field the output copies (the id, the labels) has the name of a
    column the output has of its own: the input's values would replace scorecli's, or the reverse."""
    for flag, name in (("--id-field", id_field), ("--labels-field", labels_field)):
        if name in OUTPUT_COLUMNS:
            raise UsageError(
                f"{flag} {name}: the output has a column '{name}' of its own: rename that field in the input"
            )
    if id_field == labels_field:
        raise UsageError(f"--id-field and --labels-field are both {id_field!r}: one field cannot be both")


def check_choice(flag: str, value: str | None, allowed: tuple[str, ...], optional: bool = False) -> None:
    """UsageError unless `value` is one of `allowed` (or None, when `optional`)."""
    if value is None and optional:
        return
    if value not in allowed:
        raise UsageError(f"{flag}: expected one of {', '.join(allowed)}, got {value!r}")


def split_list(value: str) -> tuple[str, ...]:
    """A comma-separated flag's values (`--label-tokens yes,no`)."""
    return tuple(v.strip() for v in value.split(","))


def token_ids(value: str) -> tuple[int, ...]:
    """`--label-token-ids`' token ids, each checked (UsageError, exit 2)."""
    try:
        ids = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise UsageError(f"--label-token-ids: expected comma-separated integers, got {value!r}") from None
    for i in ids:
        if not 0 <= i <= MAX_INT:
            raise UsageError(f"--label-token-ids: {i} is not a token id (0 to {MAX_INT})")
    return ids
