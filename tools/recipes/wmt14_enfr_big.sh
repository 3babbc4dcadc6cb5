#!/usr/bin/env bash
# transformer_big_enfr (dropout 0.1) on WMT14 En-Fr: 300,000 steps, last 20 checkpoints (paper: 41.8 BLEU).
exec "$(dirname "$0")/paper_recipe.sh" wmt14_enfr transformer_big_enfr "${TRAIN_STEPS:-300000}" 20
