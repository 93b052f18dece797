"""conv kernels."""
GENERATORS: dict = {}
