"""movement kernels."""
GENERATORS: dict = {}
