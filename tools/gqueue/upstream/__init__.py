"""Fetching, verifying, caching and unpacking the pinned upstream release."""
