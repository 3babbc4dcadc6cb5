"""`SearchConfig`: how to search, for the decoder, the exporter, BLEU during training and benchmarks.

`SearchConfig.for_problem(problem, hp, **overrides)` starts from the problem's decoding
defaults (the paper's beam 4, alpha 0.6, input length + 50 for translation; beam 21, alpha
0.3, input + 300 for parsing) and the model's position limit, takes every override that is
not None, and checks the result once, here. Error messages name the setting as the
commands spell their flags.
"""

from __future__ import annotations

import dataclasses

METHODS = ("beam", "greedy", "sample")
# The length-penalty exponents a search accepts: tensor2tensor uses 0 to about 2; far
# larger values overflow float32 in the penalty and make every score -0.0.
ALPHA_RANGE = (0.0, 10.0)


class SearchConfigError(ValueError):
    """A search setting that cannot work; the message names it and says what to do."""


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """How to search. Paper defaults (section 6.1): beam 4, alpha 0.6, input length + 50.

    Attributes:
        method: "beam", "greedy" or "sample".
        beam_size: K, the beam (and the default beam of an exported model).
        alpha: the length-penalty exponent, ((5 + length) / 6) ** alpha.
        extra_length: each sentence decodes at most its input length + this many tokens.
        temperature, top_k, seed: sampling only.
        stop_early: True stops once the best hypothesis is final; False runs until every
            one of the `beam_size` returned hypotheses is (needed to return all beams).
        beam_sizes: the beams an exported model lets a request ask for (each is a branch
            of its graph); () = the powers of two below `beam_size`, and `beam_size`.
        max_input_length: the longest input in ids, EOS included; None = no limit.
            `for_problem` sets it to the model's max_position - extra_length, the longest
            input whose output positions the model knows.
    """

    method: str = "beam"
    beam_size: int = 4
    alpha: float = 0.6
    extra_length: int = 50
    temperature: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop_early: bool = True
    beam_sizes: tuple = ()
    max_input_length: int | None = None

    def __post_init__(self):
        if self.method not in METHODS:
            raise SearchConfigError(
                f"unknown search method {self.method!r}; choose --method from {METHODS}"
            )
        if self.beam_size < 1:
            raise SearchConfigError(f"--beam_size must be >= 1, got {self.beam_size}")
        if self.alpha < 0:
            raise SearchConfigError(f"--alpha must be >= 0, got {self.alpha}")
        if self.alpha > ALPHA_RANGE[1]:
            raise SearchConfigError(f"--alpha must be <= {ALPHA_RANGE[1]:g}, got {self.alpha}")
        if self.extra_length < 1:
            raise SearchConfigError(f"--extra_length must be >= 1, got {self.extra_length}")
        if self.temperature < 0:
            raise SearchConfigError(
                f"--temperature must be >= 0 (0 = greedy), got {self.temperature}"
            )
        if self.top_k < 0:
            raise SearchConfigError(f"--top_k must be >= 0 (0 = all), got {self.top_k}")
        sizes = self.beam_sizes or [2**p for p in range(8) if 2**p < self.beam_size]
        beam_sizes = tuple(sorted({int(size) for size in sizes} | {self.beam_size}))
        if beam_sizes[0] < 1:
            raise SearchConfigError(f"--beam_sizes must all be >= 1, got {beam_sizes}")
        object.__setattr__(self, "beam_sizes", beam_sizes)
        if self.max_input_length is not None and self.max_input_length < 2:
            raise SearchConfigError(
                f"max_input_length {self.max_input_length} leaves no room for a token and "
                "EOS; raise --max_input_length, or lower --extra_length (the model's "
                "max_position less extra_length bounds the input)"
            )

    @property
    def width(self) -> int:
        """Hypotheses returned per sentence: the beam, or 1 for greedy decoding and sampling."""
        return self.beam_size if self.method == "beam" else 1

    @classmethod
    def for_problem(cls, problem, hp=None, **overrides) -> SearchConfig:
        """The problem's decoding defaults, the model's limit, then `overrides` not None.

        Args:
            problem: a Problem (its `beam_size`, `alpha` and `extra_decode_length`).
            hp: the model's HParams, for `max_input_length` = max_position - extra_length;
                None leaves inputs unbounded.
            **overrides: any field of SearchConfig; None keeps the default.
        """
        values = {
            "beam_size": problem.beam_size,
            "alpha": problem.alpha,
            "extra_length": problem.extra_decode_length,
        }
        values.update({key: value for key, value in overrides.items() if value is not None})
        if hp is not None and values.get("max_input_length") is None:
            values["max_input_length"] = hp.max_position - values["extra_length"]
        return cls(**values)

    def describe(self) -> str:
        """A short human description, e.g. "beam 4, alpha 0.6, input + 50"."""
        if self.method == "beam":
            search = f"beam {self.beam_size}, alpha {self.alpha:g}"
        elif self.method == "greedy":
            search = "greedy"
        else:
            search = f"sampling at temperature {self.temperature:g}"
            search += f", top {self.top_k}" if self.top_k else ""
        return f"{search}, input + {self.extra_length}"
