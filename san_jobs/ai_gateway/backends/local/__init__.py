"""The offline backend: extractive summaries, keyword tags, hashed embeddings, TIL, recall.

Everything here is plain, deterministic Python and numpy; the algorithm modules are
synchronous and pure so they can be unit-tested and benchmarked directly.
"""
