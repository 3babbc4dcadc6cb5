"""tools/benchmark_decode.py end to end on a tiny algorithmic_reverse run (a few training steps).

Its table must have every decoding row, and the exported SavedModel (ids and text
signatures) must give the best hypotheses of the in-process cached search.
"""

import importlib.util
from pathlib import Path

from t2t_lite import hparams
from t2t_lite.training import trainer

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "benchmark_decode.py"
PROBLEM = "algorithmic_reverse"
TINY = (
    "hidden_size=32,filter_size=64,num_heads=2,batch_size=256,max_length=48,"
    "warmup_steps=100,dropout=0.0,attention_dropout=0.0,relu_dropout=0.0"
)
STEPS, SENTENCES = 30, 8
ROWS = (
    "in-process cached (Translator)",
    "in-process uncached (full decode/step)",
    "SavedModel translate_ids (ids)",
    "SavedModel serving_default (text)",
)


def load_script():
    spec = importlib.util.spec_from_file_location("benchmark_decode", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_table_has_every_row_and_the_saved_model_matches_the_cached_search(tmp_path, capsys):
    run = tmp_path / "run"
    config = trainer.RunConfig(
        problem=PROBLEM, output_dir=str(run), train_steps=STEPS, eval_steps=1,
        eval_every=STEPS, save_every=STEPS, log_every=STEPS,
    )  # fmt: skip
    trainer.train_and_evaluate(
        config, hparams.override(hparams.get("transformer_tiny"), TINY), printer=lambda line: None
    )
    export_dir = tmp_path / "export"
    results = load_script().main(
        [
            f"--problem={PROBLEM}", f"--output_dir={run}", f"--num_sentences={SENTENCES}",
            "--batch_size=4", "--rounds=2", f"--export_dir={export_dir}",
        ]
    )  # fmt: skip
    stdout = capsys.readouterr().out
    lines = stdout.splitlines()
    assert "beam 4, alpha 0.6" in lines[0], lines[0]
    header = next(line for line in lines if line.startswith("decoding"))
    for column in ("sentences/s", "tokens/s", "same as cached"):
        assert column in header
    rows = {name: line for line in lines for name in ROWS if line.startswith(name)}
    assert sorted(rows) == sorted(ROWS), stdout
    for name, line in rows.items():
        fields = line[len(name) :].split()
        sentences_per_sec, tokens_per_sec = float(fields[0]), float(fields[1])
        assert sentences_per_sec > 0 and tokens_per_sec > 0, line
        assert fields[-1] == f"{SENTENCES}/{SENTENCES}", f"{name} differs from the cached row"
    cached = results[ROWS[0]]["outputs"]
    assert results[ROWS[2]]["outputs"] == cached
    assert len(results[ROWS[3]]["outputs"]) == SENTENCES
    # --export_dir keeps the export, in TF Serving's layout.
    assert (export_dir / PROBLEM / "1" / "saved_model.pb").is_file()
