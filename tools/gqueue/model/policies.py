"""The plan policies a profile may name (kept apart so the CLI can list them cheaply)."""

POLICIES = ("compat", "safe", "minimal")
