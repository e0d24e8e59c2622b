"""gqueue: a git-backed patch queue for a pinned vLLM."""

__version__ = "0.1.0"
