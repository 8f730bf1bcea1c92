"""What each way of drafting tokens costs, as the ``draft_cost`` of :func:`stage5.cost.speculative_speedup`: the
time of drafting one token over the time of one plain decode step of the target, at batch 1, from bytes read.

- a separate draft model (Leviathan et al.): a full decode step of the smaller model;
- EAGLE (Li et al., ICML 2024): one decoder layer run on the target's features, plus the target's output head
  to turn its feature into a token (the head is shared, not copied, but it is read again per drafted token);
- Medusa (Cai et al., ICML 2024): one extra head per drafted position, a residual block (hidden x hidden) and
  its own output head (vocab x hidden), all run in the target's forward pass; per round they add their bytes
  once, which ``speculative_speedup`` charges as k x (one head's bytes / the target's);
- n-gram (prompt lookup) drafting: a string match against the prompt on the CPU, no weights read: 0.

These are byte ratios: at batch 1 every one of these steps is bandwidth-bound, so time follows bytes. They say
nothing about the acceptance rate, which is a property of the drafter *and* the traffic.
"""

from __future__ import annotations

from stage5 import cost, inputs
from stage5.hardware import Hardware
from stage5.models import ModelConfig, get_model


def draft_model_cost(target: str | ModelConfig, draft: str | ModelConfig, gpu: str | Hardware) -> float:
    """A separate draft model's decode floor over the target's, each on one ``gpu`` at batch 1."""
    return cost.decode_floor_s(cost.Deployment.of(draft, gpu)) / cost.decode_floor_s(cost.Deployment.of(target, gpu))


def _head_params(m: ModelConfig) -> int:
    return m.vocab_size * m.hidden_size


def eagle_cost(target: str | ModelConfig) -> float:
    """EAGLE's draft step: one decoder layer of the target's shape plus a read of the target's output head, over
    the target's active parameters."""
    m = get_model(target)
    per_layer = (m.active_params - 2 * _head_params(m)) / m.num_layers  # without the embedding and the head
    return (per_layer + _head_params(m)) / m.active_params


def medusa_cost(target: str | ModelConfig) -> float:
    """One Medusa head: a hidden x hidden residual block and its own output head, over the target's active
    parameters."""
    m = get_model(target)
    return (m.hidden_size * m.hidden_size + _head_params(m)) / m.active_params


NGRAM_COST = 0.0  # a lookup in the prompt's tokens: no weights read


# Every public function above refuses a wrong record (a string where a Deployment goes) in one sentence.
inputs.check_object_arguments(globals())
