"""The generated problems and the problem registry."""

import numpy as np
import pytest

from t2t_lite import problems
from t2t_lite.problems import algorithmic


def _first(problem, split, count):
    return [
        {key: value.numpy().tolist() for key, value in example.items()}
        for example in problem.examples(split, "").take(count)
    ]


def test_registry_lists_and_refuses():
    assert {"algorithmic_copy", "algorithmic_reverse"} <= set(problems.names())
    with pytest.raises(ValueError, match="unknown problem 'nope'; known problems: .*algorithmic"):
        problems.get("nope")
    with pytest.raises(ValueError, match="'algorithmic_copy' is registered already"):
        problems.register(algorithmic.AlgorithmicCopy)


def test_reverse_examples_are_reversed_and_end_with_eos():
    for example in _first(problems.get("algorithmic_reverse"), "train", 50):
        inputs, targets = example["inputs"], example["targets"]
        assert inputs[-1] == 1 and targets[-1] == 1
        assert targets[:-1] == inputs[:-1][::-1]
        assert 1 <= len(inputs) - 1 <= 40
        assert all(2 <= token <= 11 for token in inputs[:-1])


def test_copy_examples_are_copies():
    for example in _first(problems.get("algorithmic_copy"), "dev", 20):
        assert example["inputs"] == example["targets"]


def test_examples_are_deterministic_and_splits_differ():
    problem = problems.get("algorithmic_reverse")
    assert _first(problem, "dev", 5) == _first(problems.get("algorithmic_reverse"), "dev", 5)
    assert _first(problem, "dev", 5) != _first(problem, "train", 5)
    lengths = [len(e["inputs"]) - 1 for e in _first(problem, "train", 2000)]
    # Uniform over 1..40: the mean is 20.5; 2,000 draws put it within +-1.5 with margin.
    assert abs(np.mean(lengths) - 20.5) < 1.5 and min(lengths) == 1 and max(lengths) == 40


def test_symbol_encoder_round_trip_and_errors():
    encoder = problems.get("algorithmic_reverse").encoders("")["inputs"]
    assert encoder.vocab_size == 12
    assert encoder.encode("3 0 9") == [5, 2, 11]
    assert encoder.decode([5, 2, 11, 1, 7, 7]) == "3 0 9"  # stops at EOS
    assert encoder.decode([5, 0, 2]) == "3 0"  # skips padding
    with pytest.raises(ValueError, match="token 1 'x' is not a symbol"):
        encoder.encode("3 x")
    with pytest.raises(ValueError, match="not a symbol"):
        encoder.encode("10")
