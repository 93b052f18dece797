"""Host-driven control flow (if / while / scan)."""
CONTROL_KINDS: dict = {}
