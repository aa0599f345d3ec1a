"""Network pieces that the DL2 policy (`dl2.rl`) and Harmony's placer and speed model (`dl2.placement`) share:
fully connected stacks in torch (`layers`), the same stacks evaluated with NumPy (`numpy_inference`) and model
folders of state dicts (`state_io`). Nothing here knows of a scheduler; it imports torch, NumPy and `dl2.core`."""
