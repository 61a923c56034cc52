"""The critic's model: a causal-LM backbone with a scalar value head, and V at each response token."""

from __future__ import annotations

from torch import Tensor, nn

from trainer.models.batch import PACKED_IDS, PACKED_POSITIONS, is_packed, unpack, varlen_kwargs


class ValueModel(nn.Module):
    """Causal-LM backbone + a scalar head: V(s_t) for every position (zero-initialised head)."""

    def __init__(self, causal_lm: nn.Module) -> None:
        super().__init__()
        self.backbone = causal_lm.model
        self.value_head = nn.Linear(causal_lm.config.hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None, position_ids: Tensor,
                **attention_kwargs: Tensor | int) -> Tensor:
        hidden = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False,
            **attention_kwargs,
        ).last_hidden_state
        return self.value_head(hidden.float()).squeeze(-1)


def response_values(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """V of the state before each response token: [B, R] (column P-1+j values token j; a packed
    micro-batch runs its one sequence and reads the same positions back per sample)."""
    if is_packed(batch):
        positions = batch[PACKED_POSITIONS]
        return unpack(model(batch[PACKED_IDS], None, positions, **varlen_kwargs(positions)), batch)
    width_r = batch["response_mask"].size(1)
    values = model(batch["input_ids"], batch["attention_mask"], batch["position_ids"])
    return values[:, -width_r - 1 : -1]
