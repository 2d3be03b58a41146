# Helpers for the qkv tool's shell tests (tests/cli/*.sh). Each test script is run by ctest as
#   bash tests/cli/NAME.sh PATH/TO/qkv
# and works in a fresh temporary directory, removed at exit.
set -euo pipefail
QKV=$(realpath "$1")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qkv-cli-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
export OMP_NUM_THREADS=1
OUT="$WORK/out.txt"  # stdout + stderr of the last run

fail() {
  echo "FAIL: $*" >&2
  echo "--- output of the last command:" >&2
  cat "$OUT" >&2 || true
  exit 1
}

# expect STATUS REGEX -- ARGS...: runs qkv ARGS, checks its exit status and that stdout + stderr match the
# extended regular expression REGEX.
expect() {
  local status=$1 pattern=$2
  shift 3
  local got=0
  "$QKV" "$@" >"$OUT" 2>&1 || got=$?
  [ "$got" -eq "$status" ] || fail "qkv $* exited with $got, expected $status"
  grep -Eq -- "$pattern" "$OUT" || fail "qkv $* printed nothing matching /$pattern/"
}

# A small text: a few distinct sentences, repeated (about 6 KB).
make_text() {
  for i in $(seq 1 40); do
    echo "the quick brown fox jumps over the lazy dog $((i % 7))."
    echo "a stitch in time saves nine; all that glitters is not gold."
    echo "ROMEO: but soft, what light through yonder window breaks?"
  done >"$1"
}

# A model small enough that a few dozen steps take a fraction of a second.
cat >"$WORK/tiny.json" <<'JSON'
{"model": {"d_model": 32, "heads": 2, "layers": 1, "context": 32}, "batch": 4}
JSON
