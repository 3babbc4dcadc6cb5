"""The compiled search: in-process == SavedModel bit for bit, XLA == graph, bfloat16 export.

The `Translator` and an exported `BeamSearcher` run the same `SearchFunction`; both must
compile it with XLA and give the same ids and scores on the same inputs. XLA pads the source
width (`WIDTH_STEP`), and every search keeps the encoder-decoder keys and values one per
sentence rather than one per hypothesis: neither may change a hypothesis.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import hparams
from t2t_lite.export import BeamSearcher, TranslationModule
from t2t_lite.models import build_transformer
from t2t_lite.runs import TrainedModel, in_decode_dtype
from t2t_lite.search import SearchConfig, Translator, pad_batch

SMALL = "hidden_size=32,filter_size=64,num_heads=2"
# One layer a side: the in-process and exported searches run one function, whatever the
# depth; XLA compiles it once per batch shape and setting, and depth is what compiling costs.
ONE_LAYER = SMALL + ",num_encoder_layers=1,num_decoder_layers=1"
VOCAB = 40


def random_model(seed, overrides=SMALL):
    keras.utils.set_random_seed(seed)
    hp = hparams.override(hparams.get("transformer_tiny"), overrides)
    return build_transformer(hp, VOCAB), hp


def batches(seed):
    """Batches of random sentences of varied widths (0-padded, EOS-terminated) [B, S]."""
    rng = np.random.default_rng(seed)
    shapes = [(3, [4, 1, 7]), (2, [9, 12]), (1, [2])]
    return [pad_batch([list(rng.integers(2, VOCAB, n)) for n in lengths]) for _, lengths in shapes]


def xla_compiled(concrete_function) -> bool:
    """Whether a function called by `concrete_function`'s graph must compile with XLA."""
    library = concrete_function.graph.as_graph_def().library
    return any(
        "_XlaMustCompile" in function.attr and function.attr["_XlaMustCompile"].b
        for function in library.function
    )


@pytest.mark.parametrize("jit_compile", [None, True])
def test_translator_equals_the_saved_model_bit_for_bit(tmp_path, jit_compile):
    model, _ = random_model(seed=3, overrides=ONE_LAYER)
    config = SearchConfig(beam_size=3, alpha=0.6, extra_length=5, max_input_length=64)
    module = TranslationModule(BeamSearcher(model, config, jit_compile=jit_compile))
    tf.saved_model.save(module, str(tmp_path / "saved"), signatures=module.signatures())
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    options = loaded.signatures["translate_ids_with_options"]
    # One Translator per setting, searching every batch (each builds its own function).
    translators = {
        (beam_size, alpha): Translator(
            model,
            SearchConfig(beam_size=beam_size, alpha=alpha, extra_length=5),
            jit_compile=jit_compile,
        )
        for beam_size, alpha in ((3, 0.6), (1, 0.0), (2, 1.5))
    }
    for batch in batches(seed=4):
        for (beam_size, alpha), translator in translators.items():
            ids, scores = (t.numpy() for t in translator.search(batch))
            saved = options(
                input_ids=tf.constant(batch),
                beam_size=tf.constant(beam_size),
                alpha=tf.constant(alpha, tf.float32),
            )
            np.testing.assert_array_equal(saved["output_ids"].numpy(), ids[:, :, 1:])
            np.testing.assert_array_equal(saved["scores"].numpy(), scores)
            assert ids.shape == (len(batch), beam_size, batch.shape[1] + 5 + 1)
    # Both compile the search alike (the in-process function is the export's); by default
    # with XLA only where there is a GPU.
    expected = bool(tf.config.list_logical_devices("GPU")) if jit_compile is None else True
    assert translator.jit_compile == expected
    assert xla_compiled(translator.function.search.get_concrete_function()) == expected
    assert xla_compiled(module.searcher.concrete_search()) == expected


@pytest.mark.parametrize("method", ["beam", "greedy"])
def test_xla_search_equals_the_graph_search(method):
    """XLA (padded width, fixed shapes) finds the graph search's hypotheses."""
    model, _ = random_model(seed=5)
    config = SearchConfig(method=method, beam_size=4, alpha=0.6, extra_length=6)
    compiled_translator = Translator(model, config, jit_compile=True)
    graph_translator = Translator(model, config, jit_compile=False)
    for batch in batches(seed=6):
        compiled = compiled_translator.search(batch)
        graph = graph_translator.search(batch)
        np.testing.assert_array_equal(compiled[0].numpy(), graph[0].numpy())
        np.testing.assert_allclose(compiled[1].numpy(), graph[1].numpy(), rtol=1e-5, atol=1e-5)


def test_bfloat16_copy_keeps_the_weights_rounded_and_decodes_close_to_float32():
    model, hp = random_model(seed=7)
    trained = TrainedModel(model=model, hp=hp, problem=None, checkpoint_path="")
    copy = in_decode_dtype(trained, "bfloat16").model
    assert copy.compute_dtype == "bfloat16"
    weights = [v for v in model.variables if "seed_generator" not in v.path]
    copied = [v for v in copy.variables if "seed_generator" not in v.path]
    for original, rounded in zip(weights, copied, strict=True):
        assert rounded.dtype == "bfloat16"
        expected = tf.cast(tf.cast(original, tf.bfloat16), tf.float32).numpy()
        np.testing.assert_array_equal(tf.cast(rounded, tf.float32).numpy(), expected)
    config = SearchConfig(beam_size=2, alpha=0.6, extra_length=4)
    batch = batches(seed=8)[0]
    _, scores32 = Translator(model, config).search(batch)
    _, scores16 = Translator(copy, config).search(batch)
    assert scores16.dtype == tf.float32
    # bfloat16 keeps 8 bits of mantissa: the best scores agree to a few percent.
    np.testing.assert_allclose(scores16.numpy()[:, 0], scores32.numpy()[:, 0], rtol=0.05)
    assert in_decode_dtype(trained, "float32") is trained
    with pytest.raises(ValueError, match="decode dtype must be one of"):
        in_decode_dtype(trained, "float16")
