#!/usr/bin/env bash
# Reproduce the paper's App. F experiments at CPU scale (docs/protocol.md, configurations) and render docs/results/.
#
# Trains the cpu-small preset for 3-, 4- and 6-layer targets with ReLU and softmax attention (6 runs) plus
# the headline centred model (the cpu-centred preset: inputs N(0, I), labels standardised per task, d = 8,
# 3-layer target, softmax attention, curriculum), evaluates each on the paper's suites (the centred model
# on in-distribution and long-prompts), and writes the combined report (report.md + PNGs) to $OUT.
# Resumable: finished training runs and current evaluation results are reused. Optional: DEPTH_SWEEP=1
# trains the transformer-depth sweep (F.3).
#
# Every knob is an environment variable (defaults = the full CPU reproduction):
#   PRESET=cpu-small  STEPS=<preset>  RUNS=runs/reproduce  OUT=docs/results  THREADS=1
#   DEPTHS="3 4 6"  ATTNS="relu softmax"  CENTRED=1  CENTRED_PRESET=cpu-centred
#   CENTRED_SUITES="in-distribution long-prompts"
#   SUITES="in-distribution mixture mixture-prompt weight-shift weight-shift-std long-prompts centred"
#   PROMPTS=1280  RESAMPLES=1000  MLP_PROMPTS=64  MLP_WIDTH=200  MLP_EPOCHS=100  GD_STEPS=10  GD_PROMPTS=128
#   DEPTH_SWEEP=0  SWEEP_LAYERS="4 6 8 10"  SWEEP_DEPTH=6
#
# Smoke test on the tiny preset (about 2-4 minutes on one thread):
#   PRESET=tiny STEPS=20 PROMPTS=64 RESAMPLES=100 MLP_PROMPTS=8 MLP_WIDTH=16 MLP_EPOCHS=5 GD_STEPS=2 \
#   GD_PROMPTS=16 DEPTH_SWEEP=1 SWEEP_LAYERS="1 2" RUNS=/tmp/repro OUT=/tmp/repro/report scripts/reproduce_cpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PRESET=${PRESET:-cpu-small}
STEPS=${STEPS:-}
RUNS=${RUNS:-runs/reproduce}
OUT=${OUT:-docs/results}
THREADS=${THREADS:-1}
DEPTHS=${DEPTHS:-"3 4 6"}
ATTNS=${ATTNS:-"relu softmax"}
CENTRED=${CENTRED:-1}
CENTRED_PRESET=${CENTRED_PRESET:-cpu-centred}
CENTRED_SUITES=${CENTRED_SUITES:-"in-distribution long-prompts"}
SUITES=${SUITES:-"in-distribution mixture mixture-prompt weight-shift weight-shift-std long-prompts centred"}
PROMPTS=${PROMPTS:-1280}
RESAMPLES=${RESAMPLES:-1000}
MLP_PROMPTS=${MLP_PROMPTS:-64}
MLP_WIDTH=${MLP_WIDTH:-200}
MLP_EPOCHS=${MLP_EPOCHS:-100}
GD_STEPS=${GD_STEPS:-10}
GD_PROMPTS=${GD_PROMPTS:-128}
DEPTH_SWEEP=${DEPTH_SWEEP:-0}
SWEEP_LAYERS=${SWEEP_LAYERS:-"4 6 8 10"}
SWEEP_DEPTH=${SWEEP_DEPTH:-6}

export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
ICDL=(python -m icdl)
STEP_SET=()
[[ -n "$STEPS" ]] && STEP_SET=(--set "train.steps=$STEPS")
# The threads key is bookkeeping (allowed to differ on resume); it pins torch to $THREADS.
COMMON_SET=(--set "train.threads=$THREADS" "${STEP_SET[@]}")

run_dirs=()

train_run() {  # train_run NAME --set ... : train (or resume / skip) one run
  local name=$1; shift
  echo "== train $name" >&2
  "${ICDL[@]}" train "$PRESET" --out "$RUNS/$name" "${COMMON_SET[@]}" "$@" --quiet
  run_dirs+=("$RUNS/$name")
}

evaluate_run() {  # evaluate_run RUN_DIR SUITE...
  local rd=$1; shift
  for suite in "$@"; do
    echo "== evaluate $rd $suite" >&2
    "${ICDL[@]}" evaluate "$rd" --suite "$suite" --prompts "$PROMPTS" --resamples "$RESAMPLES" \
      --mlp-prompts "$MLP_PROMPTS" --mlp-width "$MLP_WIDTH" --mlp-epochs "$MLP_EPOCHS" \
      --gd-steps "$GD_STEPS" --gd-prompts "$GD_PROMPTS" --quiet
  done
}

for depth in $DEPTHS; do
  for attn in $ATTNS; do
    train_run "${attn}-target${depth}" --set "task.depth=$depth" --set "model.attention=$attn"
  done
done
for rd in "${run_dirs[@]}"; do
  # shellcheck disable=SC2086
  evaluate_run "$rd" $SUITES
done
if [[ "$CENTRED" == 1 ]]; then
  # The centred task is its own preset (not $PRESET): the headline model of docs/results.
  echo "== train $CENTRED_PRESET" >&2
  "${ICDL[@]}" train "$CENTRED_PRESET" --out "$RUNS/$CENTRED_PRESET" "${COMMON_SET[@]}" --quiet
  # shellcheck disable=SC2086
  evaluate_run "$RUNS/$CENTRED_PRESET" $CENTRED_SUITES
  run_dirs+=("$RUNS/$CENTRED_PRESET")
fi

if [[ "$DEPTH_SWEEP" == 1 ]]; then
  for attn in $ATTNS; do
    for layers in $SWEEP_LAYERS; do
      name="${attn}-target${SWEEP_DEPTH}-layers${layers}"
      train_run "$name" --set "task.depth=$SWEEP_DEPTH" --set "model.attention=$attn" --set "model.layers=$layers"
      evaluate_run "$RUNS/$name" in-distribution
    done
  done
fi

suites_csv=$(echo "$SUITES" | tr ' ' ',')
"${ICDL[@]}" report "${run_dirs[@]}" --out "$OUT" --suites "$suites_csv" --evaluate none --quiet
echo "report: $OUT/report.md" >&2
