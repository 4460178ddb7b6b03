#!/usr/bin/env bash
# budget_detects.sh BUDGET_COMMAND...: runs the budget check against a copy
# of budget.txt whose counts for this key are 20% lower (what a 25% slowdown
# would look like) and passes only if the check fails with every workload
# reported over budget; skipped (77) where the check itself is skipped.
set -u
here=$(cd "$(dirname "$0")" && pwd)
key=
for ((i = 1; i <= $#; i++)); do
    [ "${!i}" = --config ] && { j=$((i + 1)); key=${!j}; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk -v k="$key" '$1 == k {printf "%s %s %.1f\n", $1, $2, $3 * 0.8; next} {print}' \
    "$here/budget.txt" >"$tmp/lower.txt"
"$@" --baseline "$tmp/lower.txt" >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
[ "$rc" = 77 ] && exit 77
n=$(grep -c ': FAIL ' "$tmp/out")
if [ "$rc" = 1 ] && [ "$n" = 3 ] && grep -q '^over budget' "$tmp/out"; then
    echo "budget_detects: all 3 workloads over a baseline 20% lower: the check fails as it must"
    exit 0
fi
echo "budget_detects: the check did not fail on every workload against a baseline 20% lower (rc $rc, $n FAIL lines)"
exit 1
