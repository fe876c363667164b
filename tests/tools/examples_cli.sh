#!/usr/bin/env bash
# The example programs' command lines refuse what they cannot run, with a message and a non-zero
# exit, never a crash or a silently rewritten checkpoint (audit findings of stop 41):
#  1. gpt with a --context its validation split cannot hold (it crashed with SIGFPE / SIGSEGV);
#  2. gpt --resume from a checkpoint already at --steps (it rewrote the step counter backwards);
#  3. integer flags with a fraction or out of range (they went through a double);
#  4. a --checkpoint in a directory that does not exist (train found out after an epoch);
#  5. non-finite numbers and --min-lr above --lr;
#  6. --resume with flags other than the checkpoint's run (batch, seed, lr: another trajectory).
# Usage: examples_cli.sh TRAIN GPT. Exits 77 (skipped) without the fortunes corpus.
set -uo pipefail
train=$1 gpt=$2
corpus=/usr/share/games/fortunes
if [ ! -d "$corpus" ]; then
  echo "skipped: no $corpus (Debian: fortunes)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
# expect_refusal WANT_TEXT CMD...: the command exits 1 or 2 (not a signal) and prints WANT_TEXT.
expect_refusal() {
  local want=$1
  shift
  "$@" >"$dir/out" 2>&1
  local rc=$?
  if [ "$rc" -ne 1 ] && [ "$rc" -ne 2 ] || ! grep -qF -- "$want" "$dir/out"; then
    echo "FAIL: $* -> exit $rc, wanted '$want' in:"
    cat "$dir/out"
    failures=$((failures + 1))
  fi
}
small=(--layers 1 --dim 32 --heads 2 --batch 4 --eval-batches 1 --context 16)
mkdir "$dir/tiny" && head -c 1500 "$corpus/cookie" >"$dir/tiny/cookie"
expect_refusal "needs more text" "$gpt" "${small[@]}" --steps 3 --data "$dir/tiny" --context 150
expect_refusal "needs more text" "$gpt" "${small[@]}" --steps 3 --data "$dir/tiny" --context 1349

"$gpt" "${small[@]}" --steps 4 --checkpoint "$dir/g.st" >/dev/null 2>&1 || { echo "FAIL: gpt --steps 4 did not run"; failures=$((failures + 1)); }
before=$(md5sum <"$dir/g.st")
expect_refusal "nothing to resume" "$gpt" "${small[@]}" --steps 2 --checkpoint "$dir/g.st" --resume
expect_refusal "nothing to resume" "$gpt" "${small[@]}" --steps 10 --stop-at 4 --checkpoint "$dir/g.st" --resume
expect_refusal "--batch 4 (this run: 5)" "$gpt" "${small[@]}" --batch 5 --steps 8 --checkpoint "$dir/g.st" --resume
expect_refusal "--seed 0 (this run: 3)" "$gpt" "${small[@]}" --seed 3 --steps 8 --checkpoint "$dir/g.st" --resume
expect_refusal "--lr 0.001 (this run: 0.002)" "$gpt" "${small[@]}" --lr 2e-3 --steps 8 --checkpoint "$dir/g.st" --resume
[ "$(md5sum <"$dir/g.st")" = "$before" ] || { echo "FAIL: a refused resume changed the checkpoint"; failures=$((failures + 1)); }
"$gpt" "${small[@]}" --steps 6 --checkpoint "$dir/g.st" --resume >"$dir/out" 2>&1 && grep -q "resumed from" "$dir/out" ||
  { echo "FAIL: gpt --resume with the same flags and more --steps did not run:"; cat "$dir/out"; failures=$((failures + 1)); }

expect_refusal "needs a whole number" "$gpt" --seed 1.9
expect_refusal "needs a whole number" "$gpt" --seed 18446744073709551616
expect_refusal "needs a whole number" "$gpt" --steps -1.5
expect_refusal "needs a whole number" "$train" --batch 2.9
expect_refusal "does not exist" "$train" --checkpoint "$dir/missing/x.st"
expect_refusal "does not exist" "$gpt" --checkpoint "$dir/missing/x.st"
expect_refusal "must be finite" "$gpt" --clip nan
expect_refusal "--min-lr must be at most --lr" "$gpt" --lr 1e-3 --min-lr 1e-2
expect_refusal "positive and finite" "$gpt" --temperature inf
if [ "$failures" -ne 0 ]; then
  echo "$failures failures"
  exit 1
fi
echo "all refusals as expected"
