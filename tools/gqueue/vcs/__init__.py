"""The only code that runs git."""
