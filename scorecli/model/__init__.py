"""Loading a checkpoint for scoring: folders, Hub ids, GGUF files and sentence-transformers folders
(`load`), what an architecture needs (`compat`), the bundled default model and the cache.
"""
