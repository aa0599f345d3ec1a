"""The DL2 environment: slot-by-slot, task-by-task allocation decisions over the simulator (DL2 §4.1)."""
