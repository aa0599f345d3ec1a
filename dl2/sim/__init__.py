"""The trace-driven cluster simulator (compatibility and realistic modes) and its metrics."""
