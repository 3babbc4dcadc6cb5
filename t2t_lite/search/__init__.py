"""A trained model joined to a search: settings, batches of sentences, one tf.function.

`decoding` holds the search algorithms over any step function; this package runs them
with a Transformer (its `encode`, `init_cache` and cached `decode_step`), so the decoder
command, BLEU during training, the exporter and the benchmarks search the same way. It
sees the model only through those three methods and imports neither training nor
inference, which both use it.
"""

from t2t_lite.search.batches import (
    guidance_batch,
    length_batches,
    pad_batch,
    strip_ids,
    without_eos,
)
from t2t_lite.search.compiled import SearchFunction
from t2t_lite.search.config import METHODS, SearchConfig, SearchConfigError
from t2t_lite.search.model_search import model_beam_search, row_limits
from t2t_lite.search.translator import Translator

__all__ = [
    "METHODS",
    "SearchConfig",
    "SearchConfigError",
    "SearchFunction",
    "Translator",
    "guidance_batch",
    "length_batches",
    "model_beam_search",
    "pad_batch",
    "row_limits",
    "strip_ids",
    "without_eos",
]
