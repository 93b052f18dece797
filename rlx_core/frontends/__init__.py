"""Model importers (ONNX)."""
