"""Reading input rows and writing scored output: file formats only, no models."""

# the columns a run writes of its own (docs/input-output.md: Output; `io.columns.window_table`),
# beside the id and labels it copies from the input under their fields' names
OUTPUT_COLUMNS = ("scores", "score", "top_k", "num_chunks", "pooled_hidden_states", "num_tokens", "error")
