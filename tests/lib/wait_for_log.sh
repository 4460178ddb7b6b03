# Shared by the netns and vm test scripts (sourced).
# wait_for_log FILE PATTERN LIMIT_S: 0 once FILE matches PATTERN, 1 after LIMIT_S seconds.
wait_for_log() {
    local t0=$SECONDS
    until grep -q "$2" "$1" 2>/dev/null; do
        ((SECONDS - t0 < $3)) || return 1
        sleep 0.1
    done
}
