#!/usr/bin/env bash
# transformer_big on WMT14 En-De: 300,000 steps, average of the last 20 checkpoints (paper: 28.4 BLEU).
exec "$(dirname "$0")/paper_recipe.sh" wmt14_ende transformer_big "${TRAIN_STEPS:-300000}" 20
