"""Runtime support shipped inside the gqueue-built vLLM wheel: patch switches and Triton kernels."""
