"""Contender B of bench_vs_qwen3_recipe.py: the official Qwen3-Reranker recipe, plain transformers.

The code follows the Qwen3-Reranker model card ("Usage with Transformers") line by line:
prefix/suffix token lists around `format_instruction(...)`, `tokenizer(pairs, padding=False,
truncation='longest_first', return_attention_mask=False, max_length=...)`, then per batch
`tokenizer.pad(..., padding=True, return_tensors="pt")` with LEFT padding, `model(**inputs)
.logits[:, -1, :]`, log_softmax over [no, yes] and exp -> the probability of "yes".
The only changes: the model path is an argument, pairs are scored in batches of
`--batch-size` (the card scores one list at once) and scores are written to Parquet.

Reads rows {"id", "query", "items", optional "instruction"} from JSONL and writes one Parquet
row per input row: `id`, `score` (list<float32>).

    python benchmarks/qwen3_recipe_job.py in.jsonl out.parquet MODEL_FOLDER [--batch-size 8]
"""

from __future__ import annotations

import argparse

import _common as C
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def format_instruction(instruction, query, doc):
    if instruction is None:
        instruction = "Given a web search query, retrieve relevant passages that answer the query"
    output = f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}"
    return output


def load_recipe(model_path: str):
    """The card's model, `process_inputs` and `compute_logits` (also used by profile_scorecli.py)."""
    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    token_false_id = tokenizer.convert_tokens_to_ids("no")
    token_true_id = tokenizer.convert_tokens_to_ids("yes")
    max_length = 8192

    prefix = (
        "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
        'Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
    )
    suffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    prefix_tokens = tokenizer.encode(prefix, add_special_tokens=False)
    suffix_tokens = tokenizer.encode(suffix, add_special_tokens=False)

    def process_inputs(pairs):
        inputs = tokenizer(
            pairs,
            padding=False,
            truncation="longest_first",
            return_attention_mask=False,
            max_length=max_length - len(prefix_tokens) - len(suffix_tokens),
        )
        for i, ele in enumerate(inputs["input_ids"]):
            inputs["input_ids"][i] = prefix_tokens + ele + suffix_tokens
        inputs = tokenizer.pad(inputs, padding=True, return_tensors="pt", max_length=max_length)
        for key in inputs:
            inputs[key] = inputs[key].to(model.device)
        return inputs

    @torch.no_grad()
    def compute_logits(inputs, **kwargs):
        batch_scores = model(**inputs).logits[:, -1, :]
        true_vector = batch_scores[:, token_true_id]
        false_vector = batch_scores[:, token_false_id]
        batch_scores = torch.stack([false_vector, true_vector], dim=1)
        batch_scores = torch.nn.functional.log_softmax(batch_scores, dim=1)
        scores = batch_scores[:, 1].exp().tolist()
        return scores

    return model, process_inputs, compute_logits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("model")
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()

    _, process_inputs, compute_logits = load_recipe(args.model)
    rows = C.read_jsonl(args.input)
    pairs = [format_instruction(row.get("instruction"), row["query"], doc) for row in rows for doc in row["items"]]
    scores = []
    for start in range(0, len(pairs), args.batch_size):
        inputs = process_inputs(pairs[start : start + args.batch_size])
        scores.extend(compute_logits(inputs))
    C.write_row_scores(rows, scores, args.output)


if __name__ == "__main__":
    main()
