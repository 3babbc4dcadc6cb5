"""tools/tune_decoding.py: every setting of the grid decoded on dev, the best mean chosen.

The tiny algorithmic_reverse run of the averaging tests (checkpoints at steps 2, 4, 6, 8) is
tuned over two averaging depths, two beams and two alphas; one row is checked against the
decoder command on the checkpoint the averaging command writes, scored by sacrebleu itself.
"""

import json

import numpy as np
import pytest
import sacrebleu
from conftest import load_tool
from test_averaging import run_module, trained_tiny_run


@pytest.fixture(scope="module")
def tune():
    return load_tool("tune_decoding")


def _row(num_last, beam, alpha, mean):
    return {"num_last": num_last, "beam_size": beam, "alpha": alpha, "mean": mean}


def test_the_best_mean_wins_and_ties_go_to_the_cheaper_setting(tune):
    rows = [_row(5, 8, 1.0, 38.6), _row(5, 4, 1.2, 38.6), _row(3, 4, 1.2, 38.6)]
    assert tune.best_setting(rows) is rows[2]
    rows.append(_row(5, 8, 1.4, 38.7))
    assert tune.best_setting(rows) is rows[3]
    rows = [_row(5, 4, 1.2, 38.6), _row(5, 4, 0.6, 38.6)]
    assert tune.best_setting(rows) is rows[1]


def test_bad_arguments_name_the_flag(tune, tmp_path, capsys):
    source = tmp_path / "dev.txt"
    source.write_text("1 2\n")
    base = ["--data_dir=", f"--source_file={source}", f"--reference_file={source}"]
    with pytest.raises(SystemExit):
        tune._arguments(base + [f"--output_dirs={tmp_path / 'missing'}"])
    assert "--output_dirs: no such run folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tune._arguments(base + [f"--output_dirs={tmp_path}", "--alphas=0.6,high"])
    assert "--alphas" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tune._arguments(base + [f"--output_dirs={tmp_path}", "--beam_sizes=0"])
    assert "must be >= 1" in capsys.readouterr().err


def test_each_row_is_the_bleu_of_its_setting(tune, tmp_path, tmp_path_factory):
    run = trained_tiny_run(tmp_path_factory)
    rng = np.random.default_rng(3)
    lines = [" ".join(map(str, rng.integers(2, 9, rng.integers(2, 6)))) for _ in range(6)]
    source, reference = tmp_path / "dev.txt", tmp_path / "dev.ref"
    source.write_text("\n".join(lines) + "\n")
    reference.write_text("\n".join(" ".join(line.split()[::-1]) for line in lines) + "\n")
    table = tmp_path / "table.json"
    result = tune.run(
        tune._arguments(
            [
                "--problem=algorithmic_reverse",
                "--data_dir=",
                f"--output_dirs={run}",
                f"--source_file={source}",
                f"--reference_file={reference}",
                "--num_last=1,3",
                "--beam_sizes=1,2",
                "--alphas=0,0.6",
                f"--json={table}",
            ]  # fmt: skip
        )
    )
    rows = result["rows"]
    settings = {(r["num_last"], r["beam_size"], r["alpha"]) for r in rows}
    assert settings == {(n, b, a) for n in (1, 3) for b in (1, 2) for a in (0.0, 0.6)}
    assert result["chosen"]["mean"] == max(r["mean"] for r in rows)
    assert json.loads(table.read_text())["chosen"] == result["chosen"]

    averaged = tmp_path / "avg3"
    done = run_module(
        "t2t_lite.avg_checkpoints", f"--output_dir={run}", "--num_last=3",
        f"--averaged_dir={averaged}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    output = tmp_path / "hyp.txt"
    done = run_module(
        "t2t_lite.decoder", "--problem=algorithmic_reverse", "--data_dir=",
        f"--output_dir={run}", f"--checkpoint_path={averaged}", f"--decode_from_file={source}",
        f"--decode_to_file={output}", "--beam_size=2", "--alpha=0.6",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    hypotheses = output.read_text().splitlines()
    references = reference.read_text().splitlines()
    expected = sacrebleu.corpus_bleu(hypotheses, [references]).score
    (row,) = [r for r in rows if (r["num_last"], r["beam_size"], r["alpha"]) == (3, 2, 0.6)]
    assert row["bleu"] == [pytest.approx(expected, abs=1e-9)]
