"""tools/benchmark_constraints.py on a tiny trained model: its table and its coverage."""

import sys

from conftest import REPO
from test_decoding_model import trained_reverse_run

sys.path.insert(0, str(REPO / "tools"))
import benchmark_constraints  # noqa: E402


def test_constraints_drawn_from_references_are_all_covered(tmp_path_factory, tmp_path):
    run = trained_reverse_run(tmp_path_factory)
    sources = ["1 2 3 4", "5 6 7", "8 8 9 0 1", "2 4 6", "9 7 5 3 1", "0 0 1"]
    source, reference = tmp_path / "src.txt", tmp_path / "ref.txt"
    source.write_text("\n".join(sources) + "\n")
    # References with words the model will not write: the reversed input and a new word.
    references = [" ".join(reversed(s.split())) + " 9 9 3" for s in sources]
    reference.write_text("\n".join(references) + "\n")
    lines = []
    args = benchmark_constraints.parse_args(
        [
            "--problem=algorithmic_reverse",
            f"--output_dir={run}",
            f"--source_file={source}",
            f"--reference_file={reference}",
            "--beam_size=2",
        ]
    )
    rows = benchmark_constraints.run(args, printer=lines.append)
    assert [row["setting"] for row in rows] == [
        "unconstrained",
        "1 constraint per sentence",
        "2 constraints per sentence",
    ]
    for row in rows[1:]:
        assert row["constraints"] > 0 and row["coverage"] == 1.0 and row["not_met"] == 0
    assert rows[2]["constraints"] >= rows[1]["constraints"]
    assert lines[1].startswith("| setting |") and len(lines) == 6  # title, header, rule, 3 rows
