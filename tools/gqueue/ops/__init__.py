"""Operations: each takes a Workspace and a Reporter, returns a result, never prints."""
