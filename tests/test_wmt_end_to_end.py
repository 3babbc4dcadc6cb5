"""WMT14 En-De from a mirror of WMT's archives to a served model, every step a real command.

Small archives in the real layouts (wmt_archive_support) are served on 127.0.0.1; then
`python -m t2t_lite.trainer --problem=wmt14_ende --hparams_set=transformer_big
--generate_data --download` fetches them, prepares the data and trains a few updates;
`t2t_lite.avg_checkpoints` averages the checkpoints; `t2t_lite.decoder` translates
newstest2014 (read from test-full.tgz's SGML) and scores it against its reference with
both BLEU protocols; `t2t_lite.exporter` writes the SavedModel and `t2t_lite.serve`
answers a translate request.

transformer_big's widths and six layers per stack are overridden (--hparams: one layer
each, d_model 64, d_ff 128, 4 heads, 512-token batches, no 25k-token accumulation):
at its own size (about 177M parameters even with this 500-piece vocabulary, over 2 GB
per checkpoint with Adam's two slots) the steps, checkpoints and export do not fit a
two-core test; its other settings (dropout 0.3, schedule, label smoothing) stay as the
set has them.
"""

import os
import sys

import pytest
import serving_support
import tensorflow as tf
import warm_python
import wmt_archive_support as support

from t2t_lite import problems

SMALL = (
    "num_encoder_layers=1,num_decoder_layers=1,hidden_size=64,filter_size=128,num_heads=4,"
    "batch_size=512,max_length=64,effective_batch_tokens=0"
)
STEPS = 3


def _command(module, *flags, timeout=600):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = warm_python.run(
        [sys.executable, "-m", f"t2t_lite.{module}", *flags],
        capture_output=True, text=True, timeout=timeout, env=env,
    )  # fmt: skip
    assert result.returncode == 0, (module, result.stdout[-2000:], result.stderr[-3000:])
    return result


@pytest.mark.slow
def test_wmt14_ende_from_downloaded_archives_to_a_served_translation(tmp_path, shared_data):
    served = tmp_path / "mirror"
    support.build(served, shared_data, "de")
    (served / "SHA256SUMS").write_text(support.sha256sums(served))
    data, raw, run = tmp_path / "data", tmp_path / "raw", tmp_path / "run"
    with support.ArchiveServer(served) as server:
        trained = _command(
            "trainer", "--problem=wmt14_ende", "--hparams_set=transformer_big",
            f"--hparams={SMALL}", f"--data_dir={data}", f"--output_dir={run}",
            "--generate_data", "--download", f"--download_mirror={server.url}",
            f"--download_checksums={served / 'SHA256SUMS'}", f"--raw_dir={raw}",
            "--vocab_size=500", f"--train_steps={STEPS}", "--save_every=1",
            f"--eval_every={STEPS}", "--eval_steps=1", "--eval_bleu_sentences=0",
        )  # fmt: skip
    assert "wmt14_ende: generated" in trained.stdout
    assert sorted(name for name, _ in server.requests) == sorted(
        p.name for p in served.iterdir() if p.name != "SHA256SUMS"
    )
    assert tf.train.latest_checkpoint(str(run)).endswith(f"ckpt-{STEPS}")

    _command("avg_checkpoints", f"--output_dir={run}", f"--num_last={STEPS}")
    assert tf.train.latest_checkpoint(str(run / "averaged")).endswith(f"ckpt-{STEPS}")

    # newstest2014 as text, read from the downloaded test-full.tgz through the problem.
    corpus = problems.get("wmt14_ende").corpus(str(data), str(raw), "raw")
    pairs = [(source, target) for _, _, source, target in corpus.pairs("test")]
    english, german = ("\n".join(side) + "\n" for side in zip(*pairs))
    expected = [support.sacrebleu_text(line) for line in support.test_lines(shared_data, "de")[0]]
    assert [source for source, _ in pairs] == expected
    (tmp_path / "newstest2014.en").write_text(english, encoding="utf-8")
    (tmp_path / "newstest2014.de").write_text(german, encoding="utf-8")
    decoded = _command(
        "decoder", "--problem=wmt14_ende", f"--data_dir={data}", f"--output_dir={run}",
        f"--checkpoint_path={run / 'averaged'}", "--beam_size=2", "--extra_length=5",
        f"--decode_from_file={tmp_path / 'newstest2014.en'}",
        f"--decode_to_file={tmp_path / 'out.de'}",
        f"--reference_file={tmp_path / 'newstest2014.de'}",
    )  # fmt: skip
    lines = decoded.stdout.splitlines()
    assert any(line.startswith("sacreBLEU: ") and "nrefs:1|case:mixed" in line for line in lines)
    assert any(line.startswith("tokenized BLEU (moses tok") for line in lines)
    assert len((tmp_path / "out.de").read_text(encoding="utf-8").split("\n")) == len(pairs) + 1

    export = tmp_path / "export"
    _command(
        "exporter", "--problem=wmt14_ende", f"--data_dir={data}", f"--output_dir={run}",
        f"--checkpoint_path={run / 'averaged'}", f"--export_dir={export}", "--model_name=ende",
        "--beam_size=2",
    )  # fmt: skip
    process, output = serving_support._start(export / "ende", tmp_path / "serve.log")
    try:
        url = serving_support._ready(process, output, name="ende")
        status, answer = serving_support.predict(url, {"instances": [pairs[0][0]]}, model="ende")
    finally:
        serving_support._stop(process)
    assert status == 200, answer
    assert len(answer["predictions"]) == 1
