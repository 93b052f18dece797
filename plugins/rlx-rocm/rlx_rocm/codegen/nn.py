"""nn kernels."""
GENERATORS: dict = {}
