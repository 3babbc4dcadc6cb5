"""The search as one compiled function, shared by the in-process `Translator` and SavedModels.

`SearchFunction(model, config).search(input_ids [B, S], beam_size [], alpha [])` is a
`tf.function` with a fixed input signature. It picks the branch of the requested beam
size (each offered beam is a branch, since a beam is a static dimension) and runs that
branch's search, encoder included, either as a graph or as one XLA computation
(`jit_compile`; by default only on GPUs and TPUs, see `default_jit_compile`), where the
loop, the model's steps and the beam bookkeeping run as compiled code.

XLA compiles once per input shape. So that a stream of batches of varied widths compiles
a few times only, the source width is padded with zeros to a multiple of `WIDTH_STEP`
before the search and the outputs are cut back to the width the unpadded input gives;
padding changes no row's hypotheses (each row decodes up to its own length + extra).
"""

from __future__ import annotations

import tensorflow as tf

from t2t_lite.search.config import SearchConfig
from t2t_lite.search.model_search import model_beam_search, model_greedy_search, model_guided_search

# Source widths are padded up to a multiple of this under XLA (one compilation per step).
WIDTH_STEP = 8
# Outside XLA a search grows its self-attention cache in blocks of this many positions:
# the maximum decode length (input + extra_length: + 50 for translation, + 300 for parsing)
# is several times what most outputs take, and each step's cache reads, writes and
# reordering scale with the cache's size. XLA keeps the full-size cache (static shapes).
CACHE_BLOCK = 16

# The search's inputs, as every caller of a `SearchFunction` declares them.
SEARCH_SIGNATURE = (
    tf.TensorSpec([None, None], tf.int32, name="input_ids"),
    tf.TensorSpec([], tf.int32, name="beam_size"),
    tf.TensorSpec([], tf.float32, name="alpha"),
)


def default_jit_compile(constraint=None) -> bool:
    """XLA where it pays: with a GPU or TPU, and a search without a constraint.

    On CPUs XLA's compiled loop is faster than the plain graph on some classes and shapes
    and slower on others (docs/benchmarks.md), and it compiles again for every batch shape
    with a full-size cache; the graph's matrix products and top-k run TensorFlow's own
    (oneDNN) kernels. A constraint's ops need not have XLA kernels.
    """
    accelerators = tf.config.list_logical_devices("GPU") + tf.config.list_logical_devices("TPU")
    return constraint is None and bool(accelerators)


class SearchFunction:
    """The model's search under `config` as one `tf.function`, optionally XLA-compiled.

    Args:
        model: the Transformer, with `encode`, `init_cache`, `split_cache`, `decode_step`.
        config: the SearchConfig (its method, beam sizes, extra length; sampling options).
        constraint: the problem's `search_constraint`, or None (beam search only).
        jit_compile: compile each branch with XLA; None = `default_jit_compile(constraint)`.
    """

    def __init__(self, model, config: SearchConfig, constraint=None, jit_compile=None):
        self.model = model
        self.config = config
        self.constraint = constraint
        if jit_compile is None:
            jit_compile = default_jit_compile(constraint)
        self.jit_compile = bool(jit_compile)
        sizes = config.beam_sizes if config.method == "beam" else (1,)
        self.beam_sizes = tuple(sizes)
        self._branches = {
            size: tf.function(
                lambda ids, alpha, size=size: self._branch(ids, size, alpha),
                jit_compile=self.jit_compile,
                autograph=False,
            )
            for size in self.beam_sizes
        }
        self._guided = None
        self.search = tf.function(
            self._search, input_signature=list(SEARCH_SIGNATURE), autograph=False
        )

    @property
    def search_guided(self):
        """`tf.function`: (input_ids [B, S], beam_size [], alpha [], phrases [B, P, W],
        phrase_lengths [B, P], prefix [B, T], prefix_lengths [B]) -> (ids [B, K, S + extra
        + 1], scores [B, K], met [B, K]): beam search with required phrases and a forced
        prefix (`model_guided_search`), traced on first use. It runs as a graph, not under
        XLA (the number of constraint banks varies per batch).
        """
        if self._guided is None:
            if self.config.method != "beam" or self.constraint is not None:
                raise ValueError(
                    "constraints and prefixes need --method=beam and a problem without a search "
                    "constraint of its own (parsing has one)"
                )
            ids = tf.TensorSpec([None, None], tf.int32)
            self._guided = tf.function(
                self._search_guided,
                autograph=False,
                input_signature=[
                    *SEARCH_SIGNATURE,
                    tf.TensorSpec([None, None, None], tf.int32, name="phrases"),
                    ids,
                    ids,
                    tf.TensorSpec([None], tf.int32),
                ],
            )
        return self._guided

    def _search_guided(self, input_ids, beam_size, alpha, *guidance):
        width = tf.shape(input_ids)[1]

        def branch(size):
            return lambda: model_guided_search(
                self.model, input_ids, size, alpha, self.config.extra_length, guidance,
                self.config.stop_early, cache_block=CACHE_BLOCK,
            )  # fmt: skip

        if len(self.beam_sizes) == 1:
            ids, scores, met = branch(self.beam_sizes[0])()
        else:
            offered = tf.equal(tf.constant(self.beam_sizes, tf.int32), beam_size)
            index = tf.argmax(tf.cast(offered, tf.int32), output_type=tf.int32)
            ids, scores, met = tf.switch_case(index, [branch(k) for k in self.beam_sizes])
        return ids[:, :, : width + self.config.extra_length + 1], scores, met

    def _search(self, input_ids, beam_size, alpha):
        """ids [B, S] -> (ids [B, K, S + extra + 1] with the start column, scores [B, K]).

        A beam size not among `beam_sizes` runs the first branch: callers that take the
        beam from a request check it first (`t2t_lite.export.BeamSearcher`).
        """
        width = tf.shape(input_ids)[1]
        if self.jit_compile:
            padding = (-width) % WIDTH_STEP
            input_ids = tf.pad(input_ids, [[0, 0], [0, padding]])
        if len(self.beam_sizes) == 1:
            ids, scores = self._branches[self.beam_sizes[0]](input_ids, alpha)
        else:
            offered = tf.equal(tf.constant(self.beam_sizes, tf.int32), beam_size)
            index = tf.argmax(tf.cast(offered, tf.int32), output_type=tf.int32)
            branches = [lambda k=k: self._branches[k](input_ids, alpha) for k in self.beam_sizes]
            ids, scores = tf.switch_case(index, branches)
        return ids[:, :, : width + self.config.extra_length + 1], scores

    def _cache_block(self):
        """CACHE_BLOCK in a TensorFlow graph; None (the full-size cache) under XLA."""
        return None if self.jit_compile else CACHE_BLOCK

    def _branch(self, input_ids, beam_size: int, alpha):
        """One beam size's search: ids [B, S] -> (ids [B, K, S + extra + 1], scores [B, K])."""
        config = self.config
        if config.method == "beam":
            return model_beam_search(
                self.model,
                input_ids,
                beam_size,
                alpha,
                config.extra_length,
                config.stop_early,
                constraint=self.constraint,
                cache_block=self._cache_block(),
            )
        ids, scores = model_greedy_search(self.model, input_ids, config, self._cache_block())
        return ids[:, None, :], scores[:, None]
