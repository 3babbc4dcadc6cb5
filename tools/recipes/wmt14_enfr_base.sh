#!/usr/bin/env bash
# transformer_base on WMT14 En-Fr: 100,000 steps, average of the last 5 checkpoints (paper: 38.1 BLEU).
exec "$(dirname "$0")/paper_recipe.sh" wmt14_enfr transformer_base "${TRAIN_STEPS:-100000}" 5
