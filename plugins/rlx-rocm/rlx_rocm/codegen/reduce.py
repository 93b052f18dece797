"""reduce kernels."""
GENERATORS: dict = {}
