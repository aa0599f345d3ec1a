"""The DL2 policy: networks, supervised warm-up, actor-critic RL, and `LearnedScheduler` (DL2 §4)."""
