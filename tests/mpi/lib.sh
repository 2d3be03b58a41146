# Helpers for the data-parallel tests (tests/mpi/*.sh), run by ctest as
#   bash tests/mpi/NAME.sh PATH/TO/qkv MPI
# where MPI is ON when the build has MPI. Each works in a fresh temporary directory, removed at exit, and skips
# (exit status 77, which ctest reports as skipped) with a message where MPI is missing. Every mpirun is bounded
# by `timeout`, so a test ends by itself even when a rank hangs.
source "$(dirname "$0")/../cli/lib.sh"
if [ "${2:-OFF}" != "ON" ]; then
  echo "SKIP: this build has no MPI (install openmpi-bin and libopenmpi-dev, as scripts/setup.sh does, and rebuild)"
  exit 77
fi
if ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun is not installed (apt package openmpi-bin)"
  exit 77
fi
# Open MPI refuses root without these (CI runs as root); 3+ ranks on 2 cores need --oversubscribe.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Under the sanitizers (the README's test command runs this suite again in the ASan build): Open MPI's own
# allocations, many in components it unloads at MPI_Finalize, are reported as leaks LeakSanitizer cannot even
# symbolize, so leak checking is off for these runs; every other ASan and UBSan error still fails them, and
# qkv's code is leak-checked by the single-process suites.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# No network interface probing beyond this machine's.
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo

# mpirun forwards the ranks' stdout and stderr in chunks that need not end at line ends, so one file for both
# could hold a stdout line inside a stderr line: each goes to its own file, and $OUT gets stderr then stdout.
# run_mpi SECONDS MPIRUN-ARGS...: status in $STATUS.
run_mpi() {
  local seconds=$1
  shift
  STATUS=0
  timeout -k 5 "$seconds" mpirun "$@" >"$WORK/mpi.stdout" 2>"$WORK/mpi.stderr" || STATUS=$?
  cat "$WORK/mpi.stderr" "$WORK/mpi.stdout" >"$OUT"
}

# mpi SECONDS NP ARGS...: mpirun -np NP qkv train ARGS..., at most SECONDS; output in $OUT, status in $STATUS.
mpi() {
  local seconds=$1 np=$2
  shift 2
  run_mpi "$seconds" -np "$np" "$QKV" train --threads 1 "$@"
}

# The training losses of a run's progress lines ("step N/M  loss L ..."), one per line.
losses() { sed -nE 's/^step ([0-9]+)\/[0-9]+  loss ([-0-9.naif]+) .*/\1 \2/p' "$1"; }

# same_losses A B: the same steps with losses within 1e-6 relative (printed to 6 decimals: half a unit of
# the last place is allowed on top).
same_losses() {
  local n
  n=$(losses "$1" | wc -l)
  [ "$n" -gt 0 ] || fail "no losses in $1"
  [ "$(losses "$2" | wc -l)" -eq "$n" ] || fail "$1 and $2 have different numbers of steps"
  paste <(losses "$1") <(losses "$2") | awk '{
      d = $2 - $4; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2;
      if ($1 != $3 || d > 1e-6 * m + 5e-7) { print "step " $1 ": " $2 " vs " $4; bad = 1 } }
    END { exit bad }' >&2 || fail "the losses of $1 and $2 differ"
}

make_tsv() {  # make_tsv seq2seq|classifier FILE: small deterministic examples of varying length
  awk -v kind="$1" 'BEGIN { srand(7); for (i = 0; i < 240; i++) {
      n = 2 + int(rand() * 9); s = ""; for (j = 0; j < n; j++) s = s substr("abcdefg", 1 + int(rand() * 7), 1);
      if (kind == "seq2seq") { r = ""; for (j = n; j > 0; j--) r = r substr(s, j, 1); print s "\t" r }
      else print (substr(s, 1, 1) < "d" ? "low" : "high") "\t" s } }' >"$2"
}
