"""Numpy stages of a row's way to the model: encode (template + tokenizer), pack (MIS / single
sequences), batching (length-sorted, token budget), ranking (top-k, chunks). No torch here.
"""
