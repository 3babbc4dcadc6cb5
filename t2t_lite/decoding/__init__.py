"""Search over a model's step function: beam search, greedy decoding and sampling.

Decoding sees the model only through `symbols_to_logits_fn` and a nest of state tensors (the
cache); it imports nothing from models, training or problems.
"""

from t2t_lite.decoding.beam_search import NEG_INF, beam_search, length_penalty
from t2t_lite.decoding.greedy import greedy_search, sample
from t2t_lite.ids import EOS_ID

__all__ = ["EOS_ID", "NEG_INF", "beam_search", "greedy_search", "length_penalty", "sample"]
