"""The ``ane`` device: RLX graphs lowered to Core ML ML Programs with coremltools' MIL
builder (``lower``), what is claimed and rejected (``support``), the backend and its
executable (``backend``), and the checks CI runs on Linux (``validate``): the program
converts, every node's MIL values have the graph's dims and dtypes, the serialized
program reloads with the same ops and signature, and -- through coremltools' own value
inference of the MIL ops, where the ops define one -- the program computes the
reference's numbers. Prediction needs macOS; it was never run by this project."""
