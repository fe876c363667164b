#!/usr/bin/env bash
# examples/train --ddp under mpirun (issue 19), on a slice of Fashion-MNIST:
#  1. 2 ranks x batch 64 give the losses and accuracies of 1 process x batch 128 (same shuffle);
#  2. a 2-rank run interrupted after epoch 1 (--stop-after) and resumed from rank 0's
#     checkpoint gives the uninterrupted run's epoch 2.
# Usage: train_ddp.sh MPIRUN TRAIN [mpirun flags...]. Exits 77 (skipped) without the data set.
set -euo pipefail
mpirun=$1 train=$2
shift 2
data=/usr/share/datasets/fashion-mnist
if ! ls "$data"/train-images-idx3-ubyte* >/dev/null 2>&1; then
  echo "skipped: no Fashion-MNIST under $data (Debian: dataset-fashion-mnist)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--limit 1024 --epochs 2 --data "$data")
# The epoch lines without their timings: "epoch 1/2: train_loss 1.2345  test_accuracy 0.6789".
results() { tr '\r' '\n' | grep -E '^epoch [0-9]+/[0-9]+:' | sed 's/  epoch_time.*//'; }

"$train" "${common[@]}" --batch 128 | results >"$dir/one"
"$mpirun" "$@" -np 2 "$train" --ddp "${common[@]}" --batch 64 | results >"$dir/two"
"$mpirun" "$@" -np 2 "$train" --ddp "${common[@]}" --batch 64 --stop-after 1 --checkpoint "$dir/ck.safetensors" | results >"$dir/first"
"$mpirun" "$@" -np 2 "$train" --ddp "${common[@]}" --batch 64 --checkpoint "$dir/ck.safetensors" --resume | results >"$dir/rest"
cat "$dir/first" "$dir/rest" >"$dir/resumed"
echo "1 process x batch 128:"; cat "$dir/one"
echo "2 ranks x batch 64:"; cat "$dir/two"
echo "2 ranks, interrupted and resumed:"; cat "$dir/resumed"
[ "$(wc -l <"$dir/one")" -eq 2 ] || { echo "FAIL: expected 2 epoch lines"; exit 1; }
diff "$dir/one" "$dir/two" || { echo "FAIL: 2 ranks differ from 1 process with the whole batch"; exit 1; }
diff "$dir/two" "$dir/resumed" || { echo "FAIL: the resumed run differs from the uninterrupted one"; exit 1; }
echo "PASS"
