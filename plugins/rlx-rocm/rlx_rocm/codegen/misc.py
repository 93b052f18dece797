"""misc kernels."""
GENERATORS: dict = {}
