#!/usr/bin/env bash
# transformer_base on WMT14 En-De: 100,000 steps, average of the last 5 checkpoints (paper: 27.3 BLEU).
exec "$(dirname "$0")/paper_recipe.sh" wmt14_ende transformer_base "${TRAIN_STEPS:-100000}" 5
