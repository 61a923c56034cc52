"""The top-level sections of the foreign frameworks' files (verl, SkyRL, RLinf): a file with one of them and
none of ours is read as foreign. Loading and the importers both read this; it imports nothing."""

FOREIGN_TOP_LEVEL_KEYS = frozenset(
    {"data", "actor_rollout_ref", "critic", "reward_model", "custom_reward_function", "algorithm", "trainer",
     "generator", "placement", "environment", "cluster", "runner", "rollout", "actor", "reward", "ray_init",
     "ray_kwargs", "global_profiler", "transfer_queue", "distillation", "model_engine", "inference",
     "deepspeed_config", "agentloop", "tools"}
)
