# run_in_pool <start> <finish> <item>...: runs `<start> <item>` in the background, at most $(nproc) at a time,
# starting the next item as soon as any running one ends (bash >= 5.1: `wait -n -p`), and `<finish> <item> <exit
# status>` for each item once it has ended, in the order they end (scripts/sanitize.sh: test programs;
# scripts/fuzz.sh: fuzz targets). Returns 1 when any <finish> returned non-zero.
run_in_pool() {
  local start=$1 finish=$2 item rc=0 n
  local -A running=()  # pid -> item
  n=$(nproc)
  shift 2
  for item in "$@"; do
    if [ ${#running[@]} -ge "$n" ]; then
      _pool_reap || rc=1
    fi
    "$start" "$item" &
    running[$!]=$item
  done
  while [ ${#running[@]} -gt 0 ]; do
    _pool_reap || rc=1
  done
  return $rc
}

_pool_reap() {  # waits for any one of run_in_pool's `running` jobs (its locals: running, finish), then <finish>
  local st=0 done_pid= done_item
  wait -n -p done_pid "${!running[@]}" || st=$?
  done_item=${running[$done_pid]}
  unset "running[$done_pid]"
  "$finish" "$done_item" "$st"
}
