"""tools/benchmark_decode.py end to end on a tiny algorithmic_reverse run (a few training steps).

Its table must have every decoding row, the exported SavedModel (ids and text
signatures) must give the best hypotheses of the in-process cached search, and so must
the CTranslate2 float32 export at alpha 0 (where the two length penalties agree); each
row's BLEU is sacreBLEU of its outputs against the references.
"""

import numpy as np
import pytest
import sacrebleu
from conftest import load_tool

from t2t_lite import hparams
from t2t_lite.training import trainer

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
    "CTranslate2 float32 (ids)",
    "CTranslate2 int8 (ids)",
)


def load_script():
    return load_tool("benchmark_decode")


def test_table_has_every_row_and_the_saved_model_matches_the_cached_search(tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    run = tmp_path / "run"
    config = trainer.RunConfig(
        problem=PROBLEM, output_dir=str(run), train_steps=STEPS, eval_steps=1,
        eval_every=STEPS, save_every=STEPS, log_every=STEPS,
    )  # fmt: skip
    trainer.train_and_evaluate(
        config, hparams.override(hparams.get("transformer_tiny"), TINY), printer=lambda line: None
    )
    rng = np.random.default_rng(5)
    lines = [" ".join(map(str, rng.integers(0, 10, size=rng.integers(3, 12)))) for _ in range(9)]
    lines[2] = ""  # skipped with its reference
    source, reference = tmp_path / "in.txt", tmp_path / "ref.txt"
    source.write_text("\n".join(lines) + "\n")
    references = [" ".join(line.split()[::-1]) for line in lines]
    reference.write_text("\n".join(references) + "\n")
    export_dir = tmp_path / "export"
    results = load_script().main(
        [
            f"--problem={PROBLEM}", f"--output_dir={run}", f"--num_sentences={SENTENCES}",
            "--batch_size=4", "--rounds=2", f"--export_dir={export_dir}", "--alpha=0",
            f"--source_file={source}", f"--reference_file={reference}", "--ctranslate2=on",
        ]
    )  # fmt: skip
    stdout = capsys.readouterr().out
    lines = stdout.splitlines()
    assert "beam 4, alpha 0.0" in lines[0], lines[0]
    header = next(line for line in lines if line.startswith("decoding"))
    for column in ("sentences/s", "tokens/s", "same as cached", "sacreBLEU"):
        assert column in header
    rows = {name: line for line in lines for name in ROWS if line.startswith(name)}
    assert sorted(rows) == sorted(ROWS), stdout
    for name, line in rows.items():
        fields = line[len(name) :].split()
        sentences_per_sec, tokens_per_sec = float(fields[0]), float(fields[1])
        assert sentences_per_sec > 0 and tokens_per_sec > 0, line
        if name != ROWS[5]:  # int8 weights may change a hypothesis
            assert fields[-2] == f"{SENTENCES}/{SENTENCES}", f"{name} differs from the cached row"
    cached = results[ROWS[0]]["outputs"]
    assert results[ROWS[2]]["outputs"] == cached
    assert results[ROWS[4]]["outputs"] == cached
    assert len(results[ROWS[3]]["outputs"]) == SENTENCES
    kept = [ref for src, ref in zip(source.read_text().splitlines(), references) if src]
    assert len(kept) == SENTENCES
    for name in ROWS:
        outputs = results[name]["outputs"]
        texts = outputs if name == ROWS[3] else [" ".join(str(i - 2) for i in o) for o in outputs]
        expected = sacrebleu.corpus_bleu(texts, [kept]).score
        assert results[name]["bleu"] == pytest.approx(expected)
        assert rows[name].split()[-1] == f"{expected:.2f}"
    # --export_dir keeps the export, in TF Serving's layout.
    assert (export_dir / PROBLEM / "1" / "saved_model.pb").is_file()
    assert (export_dir / f"{PROBLEM}_ct2" / "2" / "model.bin").is_file()  # 1 float32, 2 int8
