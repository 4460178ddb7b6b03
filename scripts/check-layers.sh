#!/usr/bin/env bash
# check-layers.sh [ROOT]: fails when a library source includes a header of a
# layer above its own. The layers, bottom up (docs/architecture.md):
#   base  helpers every layer may use: status, log, config, lists, clocks,
#         the reduction kernels
#   gpu   memory types, the GPU ops table and the copy/reduce dispatch
#   mem   memory regions, pools, registration cache (registers through hooks)
#   topo  node identity and the hardware description
#   drv   transports (one folder per driver)
#   core  the runtime: bootstrap, communicators, requests, p2p, progress
#   coll  collectives
#   api   the public entry points (include/hcomm.h is above everything)
# A file may include its own layer and any below. Tools, benchmarks and tests
# are not part of the library and are not checked.
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
order=(base gpu mem topo drv core coll api)
rank() { local i; for i in "${!order[@]}"; do [ "${order[$i]}" = "$1" ] && { echo "$i"; return; }; done; echo -1; }
bad=0 files=0
for layer in "${order[@]}"; do
    mine=$(rank "$layer")
    [ -d "$root/$layer" ] || { echo "check-layers: missing layer folder $layer/"; exit 1; }
    while IFS= read -r f; do
        files=$((files + 1))
        while IFS= read -r inc; do
            dep=${inc%%/*}
            r=$(rank "$dep")
            [ "$r" -lt 0 ] && continue # system or public header
            if [ "$r" -gt "$mine" ]; then
                echo "check-layers: ${f#$root/} ($layer) includes \"$inc\" ($dep is above $layer)"
                bad=1
            fi
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
    done < <(find "$root/$layer" -name '*.[ch]' | sort)
done
if [ $bad = 0 ]; then
    echo "check-layers: $files files, no include points up a layer"
fi
exit $bad
