"""scorecli's version, recorded in every output's metadata and in cache keys (a module of its own,
so that recording it imports nothing else)."""

__version__ = "0.1.0"
