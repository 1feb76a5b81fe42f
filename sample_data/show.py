"""Print the demo's scored Parquet file as a short ranking per query (used by `make demo`)."""

import json
import sys

import pyarrow.parquet as pq


def main(path: str, items_shown: int = 3) -> None:
    table = pq.read_table(path)
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    print(f"{path}: {table.num_rows} rows, columns {table.column_names}")
    print("model " + json.dumps({k: meta.get(k) for k in ("model", "kind", "template", "label_tokens", "activation")}))
    inputs = {}
    with open("sample_data/queries.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            inputs[row["id"]] = row
    for row in table.to_pylist():
        source = inputs.get(row.get("id"), {})
        ranked = sorted(zip(row["score"] or [], source.get("items", [])), reverse=True)[:items_shown]
        print(f"\n{row.get('id')}  {source.get('query', '')}")
        for score, item in ranked:
            print(f"  {score:.3f}  {item[:80]}")


if __name__ == "__main__":
    main(sys.argv[1])
