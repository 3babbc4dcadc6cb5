#!/usr/bin/env bash
# The paper's recipe for one problem and model size, as the exact t2t_lite commands:
# datagen, training with the paper's ~25k-token step, checkpoint averaging, and beam
# decoding of newstest2014 scored with sacreBLEU and the paper's tokenized BLEU.
#
#   paper_recipe.sh PROBLEM HPARAMS_SET TRAIN_STEPS NUM_LAST
#
# Environment (defaults in brackets):
#   DATA_DIR [$HOME/t2t_data]   RUN_DIR [$HOME/t2t_runs/PROBLEM-HPARAMS_SET]
#   RAW_DIR  [DATA_DIR/PROBLEM/raw; must hold newstest2014.<src> and .<tgt> for decoding]
#   NUM_GPUS [all visible]      VOCAB_SIZE [the problem's: 37,000 En-De, 32,000 En-Fr]
#   SAVE_EVERY [1000]           EXTRA_HPARAMS [""] appended to the recipe's --hparams
#   STRATEGY [auto; multi_worker when TF_CONFIG names several machines]
#   EVAL_EVERY [SAVE_EVERY]     EVAL_BLEU_SENTENCES [200] dev sentences decoded for eval/bleu
set -euo pipefail

problem=$1 hparams_set=$2 train_steps=$3 num_last=$4
data_dir=${DATA_DIR:-$HOME/t2t_data}
run_dir=${RUN_DIR:-$HOME/t2t_runs/$problem-$hparams_set}
raw_dir=${RAW_DIR:-$data_dir/$problem/raw}
save_every=${SAVE_EVERY:-1000}
python=${PYTHON:-python}
case $problem in
  wmt14_ende) src=en tgt=de ;;
  wmt14_enfr) src=en tgt=fr ;;
  *) echo "paper_recipe.sh: no recipe for problem $problem" >&2; exit 2 ;;
esac

# Section 5.1: about 25,000 source and 25,000 target tokens per update, on any number of devices.
hparams="effective_batch_tokens=25000${EXTRA_HPARAMS:+,$EXTRA_HPARAMS}"
gpu_flag=${NUM_GPUS:+--num_gpus=$NUM_GPUS}

"$python" -m t2t_lite.datagen --problem="$problem" --data_dir="$data_dir" --raw_dir="$raw_dir" \
  ${VOCAB_SIZE:+--vocab_size=$VOCAB_SIZE}

"$python" -m t2t_lite.trainer --problem="$problem" --hparams_set="$hparams_set" \
  --hparams="$hparams" --data_dir="$data_dir" --output_dir="$run_dir" \
  --train_steps="$train_steps" --save_every="$save_every" --eval_every="${EVAL_EVERY:-$save_every}" \
  --eval_bleu_sentences="${EVAL_BLEU_SENTENCES:-200}" --keep_checkpoints="$num_last" \
  --strategy="${STRATEGY:-auto}" $gpu_flag

# Section 6.1: the average of the last 5 (base) or 20 (big) checkpoints.
"$python" -m t2t_lite.avg_checkpoints --output_dir="$run_dir" --num_last="$num_last"

# Beam 4, length penalty alpha 0.6, maximum output length input + 50 (the problem's defaults).
"$python" -m t2t_lite.decoder --problem="$problem" --data_dir="$data_dir" --output_dir="$run_dir" \
  --checkpoint_path="$run_dir/averaged" --beam_size=4 --alpha=0.6 --extra_length=50 \
  --decode_from_file="$raw_dir/newstest2014.$src" \
  --decode_to_file="$run_dir/newstest2014.$tgt.decoded" \
  --reference_file="$raw_dir/newstest2014.$tgt"
