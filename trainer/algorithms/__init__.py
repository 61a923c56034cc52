"""RL algorithms as small pure tensor functions (see docs/algorithms.md).

advantages   advantage estimators (`adv_estimator`)
kl           KL estimators (`kl_penalty`), KL in the reward / as a loss, KL controllers
policy_loss  PPO (clip-higher, dual clip), GSPO, TOPR, SFT, entropy and value losses
aggregation  `loss_agg_mode`, data-parallel correct with global token / sequence counts
rewards      reward clipping, normalisation, shaping, difficulty masking, loss weights
trajectory_norm  agentic trajectory scores normalised by start state, tag or batch (`reward_normalization`)
step_advantages  ROLL's step-wise agentic estimators per turn: gigpo, step_reinforce, agentic_reinforce
off_policy   importance ratios of stale samples (TIS, masking) and staleness weights (async rollout)
train_infer  training-inference mismatch of fresh samples: ROLL's IS weights and filters (`train_infer_correction`)
registry     name → function tables and lookups
stats        masked and grouped statistics
"""
