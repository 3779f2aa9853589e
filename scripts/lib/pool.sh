# run_in_pool <start> <finish> <item>...: runs `<start> <item>` in the background, at most $(nproc) at a time, and
# `<finish> <item> <exit status>` for each item, in start order, once it has ended (scripts/sanitize.sh: test
# programs; scripts/fuzz.sh: fuzz targets). Returns 1 when any <finish> returned non-zero.
run_in_pool() {
  local start=$1 finish=$2 item i st rc=0 pids=() items=() n
  n=$(nproc)
  shift 2
  for item in "$@"; do
    if [ ${#pids[@]} -ge "$n" ]; then
      st=0
      wait "${pids[0]}" || st=$?
      "$finish" "${items[0]}" "$st" || rc=1
      pids=("${pids[@]:1}")
      items=("${items[@]:1}")
    fi
    "$start" "$item" &
    pids+=($!)
    items+=("$item")
  done
  for i in "${!pids[@]}"; do
    st=0
    wait "${pids[$i]}" || st=$?
    "$finish" "${items[$i]}" "$st" || rc=1
  done
  return $rc
}
