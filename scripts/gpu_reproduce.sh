#!/usr/bin/env bash
# Train and evaluate the two GPU experiments of the README on one CUDA device (about 15 minutes on one
# H200): the paper's task with softmax attention and a 3-layer target (paper-softmax, 5,000 steps at
# batch 256, 4% of the paper's prompts) and the centred task (the gpu-centred preset), then render the
# report. Resumable: finished runs and current evaluations are reused.
#
# Knobs (environment variables):
#   RUNS=runs/gpu  OUT=$RUNS/report  DEVICE=cuda  CUDA_GRAPH=0  PAPER_STEPS=5000  BATCH=256
#   CENTRED_STEPS=<preset>  PROMPTS=1280  RESAMPLES=1000  MLP_PROMPTS=64  MLP_EPOCHS=100
#   DRY_RUN=0   DRY_RUN=1 runs every command at toy size on the CPU (1-layer width-16 models, 3 steps,
#               8 test prompts; about a minute) -- what tests/test_gpu_script.py runs.
# CUDA_GRAPH=1 trains with train.cuda_graph=true (the captured step of icdl.icl.fast).
# Wall times of the phases go to $RUNS/timings.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."

DRY_RUN=${DRY_RUN:-0}
RUNS=${RUNS:-runs/gpu}
OUT=${OUT:-$RUNS/report}
CUDA_GRAPH=${CUDA_GRAPH:-0}
if [[ "$DRY_RUN" == 1 ]]; then
  DEVICE=${DEVICE:-cpu}; PAPER_STEPS=${PAPER_STEPS:-3}; CENTRED_STEPS=${CENTRED_STEPS:-3}; BATCH=${BATCH:-8}
  PROMPTS=${PROMPTS:-8}; RESAMPLES=${RESAMPLES:-10}; MLP_PROMPTS=${MLP_PROMPTS:-2}; MLP_EPOCHS=${MLP_EPOCHS:-2}
  SHRINK=(--set model.layers=1 --set model.heads=2 --set model.d_model=16 --set model.d_mlp=32
          --set task.width=16 --set train.checkpoint_every=1 --set train.threads=1)
  export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
else
  DEVICE=${DEVICE:-cuda}; PAPER_STEPS=${PAPER_STEPS:-5000}; CENTRED_STEPS=${CENTRED_STEPS:-}; BATCH=${BATCH:-256}
  PROMPTS=${PROMPTS:-1280}; RESAMPLES=${RESAMPLES:-1000}; MLP_PROMPTS=${MLP_PROMPTS:-64}; MLP_EPOCHS=${MLP_EPOCHS:-100}
  SHRINK=()
fi
GRAPH_SET=()
[[ "$CUDA_GRAPH" == 1 ]] && GRAPH_SET=(--set train.cuda_graph=true)
CENTRED_SET=()
[[ -n "$CENTRED_STEPS" ]] && CENTRED_SET=(--set "train.steps=$CENTRED_STEPS")

mkdir -p "$RUNS"
TIMES="$RUNS/timings.tsv"
timed() {  # timed LABEL CMD...: run CMD, append "LABEL<TAB>seconds" to $TIMES
  local label=$1; shift
  local t0=$SECONDS
  echo "== $label" >&2
  "$@"
  printf '%s\t%s\n' "$label" "$((SECONDS - t0))" >> "$TIMES"
}

PAPER="$RUNS/paper-softmax-target3"
CENTRED="$RUNS/gpu-centred"
timed "train paper-softmax target3" python -m icdl train paper-softmax --out "$PAPER" --quiet \
  --set task.depth=3 --set "train.steps=$PAPER_STEPS" --set "train.batch_size=$BATCH" \
  --set "train.device=$DEVICE" --set train.checkpoint_every=1000 "${GRAPH_SET[@]}" "${SHRINK[@]}"
timed "train gpu-centred" python -m icdl train gpu-centred --out "$CENTRED" --quiet \
  --set "train.device=$DEVICE" "${CENTRED_SET[@]}" "${GRAPH_SET[@]}" "${SHRINK[@]}"

evaluate() {  # evaluate RUN SUITE BASELINES: the model on $DEVICE, the baselines on the CPU
  python - "$1" "$2" "$3" "$DEVICE" "$PROMPTS" "$RESAMPLES" "$MLP_PROMPTS" "$MLP_EPOCHS" <<'PY'
import sys

from icdl.icl.evaluate import EvalOptions, evaluate_run

run, suite, baselines, device, prompts, resamples, mlp_prompts, mlp_epochs = sys.argv[1:]
opts = EvalOptions(
    baselines=tuple(baselines.split(",")),
    resamples=int(resamples),
    mlp_prompts=int(mlp_prompts),
    mlp_epochs=int(mlp_epochs),
)
evaluate_run(run, suite, prompts=int(prompts), options=opts, progress=False, device=device)
PY
}
ALL=zero,averaging,least-squares,ridge,knn,mlp
timed "evaluate paper in-distribution" evaluate "$PAPER" in-distribution "$ALL"
timed "evaluate centred in-distribution" evaluate "$CENTRED" in-distribution "$ALL"
timed "evaluate centred long-prompts" evaluate "$CENTRED" long-prompts zero,averaging,least-squares,ridge,knn
timed "report" python -m icdl report "$PAPER" "$CENTRED" --out "$OUT" --suites in-distribution,long-prompts \
  --evaluate none --quiet
echo "report: $OUT/report.md" >&2
