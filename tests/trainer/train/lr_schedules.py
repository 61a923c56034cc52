"""The warmup + cosine schedule the resume tests of every training strategy train under, and its LRs
worked out by hand (not by trainer.train.base.lr_multiplier, which the strategies use)."""

from __future__ import annotations

import math

from trainer.train import OptimConfig

# warmup over 2 optimizer steps, then cosine decay to 0 over the remaining 4
WARMUP_COSINE = OptimConfig(lr=1e-2, warmup_steps=2, lr_scheduler_type="cosine", num_training_steps=6,
                            max_grad_norm=None)
# step s (0-based): lr · s/2 while s < 2, then lr · ½(1 + cos(π (s - 2) / 4))
WARMUP_COSINE_LRS = [1e-2 * m for m in (0.0, 0.5, 1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5,
                                        0.5 * (1 + math.cos(3 * math.pi / 4)))]
SAVE_AFTER = 3  # steps before the checkpoint; the resumed strategy runs the other 3
