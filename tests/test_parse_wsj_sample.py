"""tools/parse_wsj_sample.py: the precision it trains in, and the checkpoints it decodes with.

The tool itself trains for 30 minutes and is measured by hand (docs/parsing.md); these tests
cover what it decides before decoding: the training policy from the machine, and with
`--num_last` above 1 the average of the newest checkpoints, which must hold the mean of
their weights.
"""

import numpy as np
import pytest
from conftest import load_tool

from t2t_lite import problems
from t2t_lite.runs import load_trained_model

WITH_BF16 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16 amx_tile\n"
TINY = (
    "num_encoder_layers=1,num_decoder_layers=1,hidden_size=32,filter_size=64,num_heads=2,"
    "batch_size=512,max_length=256"
)


@pytest.fixture(scope="module")
def tool():
    return load_tool("parse_wsj_sample")


def test_the_policy_reaches_the_hparams_and_an_explicit_override_wins(tool, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(WITH_BF16)
    args = tool.parse_args(["--minutes=30"])
    assert (args.dtype_policy, args.save_every, args.num_last) == ("set", 500, 1)
    hp = tool.training_hparams(args, has_gpu=False, cpuinfo_path=str(cpuinfo))
    assert hp.dtype_policy == "float32"
    args = tool.parse_args(["--minutes=30", "--dtype_policy=auto"])
    assert tool.training_hparams(args, False, str(cpuinfo)).dtype_policy == "mixed_bfloat16"
    assert tool.training_hparams(args, True, str(cpuinfo)).dtype_policy == "float32"
    args = tool.parse_args(
        ["--minutes=30", "--dtype_policy=auto", "--hparams=dtype_policy=float32,dropout=0.3"]
    )
    hp = tool.training_hparams(args, False, str(cpuinfo))
    assert (hp.dtype_policy, hp.dropout) == ("float32", 0.3)


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--num_last=0", "--num_last: 0 is not a positive count"),
        ("--save_every=-5", "--save_every: -5 is not a positive count of updates"),
        ("--decode_batch=0", "--decode_batch: 0 is not a positive count of sentences"),
        ("--dtype_policy=float16", "invalid choice: 'float16'"),
    ],
)
def test_bad_arguments_are_one_clear_line(tool, capsys, flag, message):
    with pytest.raises(SystemExit):
        tool.parse_args(["--minutes=30", flag])
    assert message in capsys.readouterr().err


def test_num_last_decodes_with_the_mean_of_the_newest_checkpoints(tool, shared_data, tmp_path):
    data_dir, output_dir = str(tmp_path / "data"), str(tmp_path / "run")
    problems.get(tool.PROBLEMS[0]).generate_data(
        data_dir, str(shared_data / "wsj_sample"), vocab_size=1000
    )
    args = tool.parse_args(
        ["--train_steps=3", "--save_every=1", "--num_last=2", f"--hparams={TINY}"]
    )
    assert tool.train(args, data_dir, output_dir) == 3
    model, title = tool.trained_model(args, data_dir, output_dir, 3)
    assert title == "transformer_parsing_small, 3 steps, last 2 averaged"
    newest = [
        load_trained_model(
            tool.PROBLEMS[0], data_dir, output_dir, f"{output_dir}/ckpt-{step}"
        ).model
        for step in (2, 3)
    ]
    last = load_trained_model(tool.PROBLEMS[0], data_dir, output_dir).model
    moved = 0
    for averaged, second, third, final in zip(
        model.weights, newest[0].weights, newest[1].weights, last.weights, strict=True
    ):
        assert averaged.path == second.path == third.path
        if "seed_generator" in averaged.path:
            continue
        np.testing.assert_allclose(
            averaged.numpy(), (second.numpy() + third.numpy()) / 2, rtol=1e-6, atol=1e-7
        )
        moved += not np.array_equal(averaged.numpy(), final.numpy())
    assert moved > 0, "the average is the last checkpoint: nothing was averaged"
