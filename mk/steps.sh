#!/usr/bin/env bash
# make test's runner: each step a make target, run on after one fails, each timed and
# announced; at the end a table of every step and, when some failed, their names and a
# non-zero exit. (A step that fails in its first minute and one that fails after forty
# are both in the list: nothing later is skipped because something earlier broke.)
set -u
total=$#
failed=()
rows=()
n=0
started=$(date +%s)
for target in "$@"; do
  n=$((n + 1))
  echo "==> [$n/$total] make $target"
  begin=$(date +%s)
  if make --no-print-directory "$target"; then status=ok; else status=FAILED; failed+=("$target"); fi
  took=$(($(date +%s) - begin))
  rows+=("$(printf '%-30s %-6s %3dm%02ds' "$target" "$status" $((took / 60)) $((took % 60)))")
  echo "<== [$n/$total] make $target: $status in $((took / 60))m$((took % 60))s"
done
took=$(($(date +%s) - started))
echo
echo "make test: $total steps in $((took / 60))m$((took % 60))s"
printf '  %s\n' "${rows[@]}"
if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
