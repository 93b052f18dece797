"""linalg kernels."""
GENERATORS: dict = {}
