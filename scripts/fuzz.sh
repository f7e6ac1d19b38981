#!/usr/bin/env bash
# Runs each fuzz target (fuzz/fuzz_targets) for SECONDS with libFuzzer through cargo-fuzz and the
# nightly toolchain, one after the other, and prints per target the executions and any crash.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      (default: 30 s, every target)
#
# The toolchain is `nightly`, or FUZZ_TOOLCHAIN if set (a dated nightly, say).
# Exits 1 if a target crashed (its input is in fuzz/artifacts/TARGET/), 2 if the targets do not
# build. Without the nightly toolchain or cargo-fuzz it prints one line saying fuzzing was
# skipped and why, and exits 0. Non-interactive (CI): no stdin, no colour. The corpus grows in
# fuzz/corpus/TARGET (ignored by git) and is reused by the next run.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

secs=30
if [[ ${1:-} =~ ^[0-9]+$ ]]; then
    secs=$1
    shift
fi

toolchain=${FUZZ_TOOLCHAIN:-nightly}

skip() {
    echo "fuzz: skipped: $*"
    exit 0
}
command -v cargo >/dev/null 2>&1 || skip "cargo not found"
cargo "+$toolchain" --version >/dev/null 2>&1 </dev/null ||
    skip "the $toolchain toolchain is not installed (rustup toolchain install $toolchain)"
cargo "+$toolchain" fuzz --version >/dev/null 2>&1 </dev/null ||
    skip "cargo-fuzz is not installed (cargo install cargo-fuzz --locked)"

export CARGO_TERM_COLOR=never
if (($# == 0)); then
    mapfile -t targets < <(cargo "+$toolchain" fuzz list </dev/null)
else
    targets=("$@")
fi

if ((${#targets[@]} == 0)); then
    echo "fuzz: no fuzz targets found (cargo fuzz list)" >&2
    exit 2
fi

log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

# Build first (`fuzz run` then only checks that nothing changed): all targets at once, or the
# ones named (`fuzz build` takes one target or all).
t0=$SECONDS
build() {
    if (($# == 0)); then
        cargo "+$toolchain" fuzz build </dev/null
    else
        for t in "$@"; do
            cargo "+$toolchain" fuzz build "$t" </dev/null || return
        done
    fi
}
if ! build "$@" >"$log/build" 2>&1; then
    tail -n 30 "$log/build" >&2
    echo "fuzz: the targets do not build" >&2
    exit 2
fi
echo "fuzz: built ${#targets[@]} targets in $((SECONDS - t0)) s; ${secs} s each"

crashed=()
for t in "${targets[@]}"; do
    out=$log/$t
    rc=0
    # -timeout: an input that runs this long is a hang, reported like a crash.
    cargo "+$toolchain" fuzz run "$t" -- -max_total_time="$secs" -timeout=20 -print_final_stats=1 \
        </dev/null >"$out" 2>&1 || rc=$?
    runs=$(awk '/^stat::number_of_executed_units:/ { n = $2 } /^#[0-9]+/ { sub("#", "", $1); last = $1 }
                END { print (n != "" ? n : (last != "" ? last : 0)) }' "$out")
    rate=$(awk '/^stat::average_exec_per_sec:/ { print $2 }' "$out")
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$out" | tail -n 1)
    if ((rc == 0)) && [[ -z $artifact ]]; then
        echo "fuzz: $t: $runs executions in ${secs} s (${rate:-?}/s), no crash"
        continue
    fi
    crashed+=("$t")
    echo "fuzz: $t: CRASH after $runs executions (exit status $rc)"
    grep -m1 -A2 -E "panicked at|==[0-9]+==ERROR" "$out" | sed 's/^/    /' || true
    if [[ -n $artifact ]]; then
        echo "    input: fuzz/${artifact#"$PWD"/}"
        echo "    again: cd fuzz && cargo +$toolchain fuzz run $t ${artifact#"$PWD"/}"
    else
        tail -n 20 "$out" | sed 's/^/    /'
    fi
done

if ((${#crashed[@]})); then
    echo "fuzz: ${#crashed[@]} of ${#targets[@]} targets crashed: ${crashed[*]}"
    exit 1
fi
echo "fuzz: ${#targets[@]} targets, no crash"
