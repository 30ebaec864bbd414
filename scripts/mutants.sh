#!/usr/bin/env bash
# Mutation testing of chorus-core, opt-in (too slow for every CI run; see docs/mutants.md).
#
#   scripts/mutants.sh                 # the protocol files: election, heartbeat, electorate, discovery
#   scripts/mutants.sh --all           # every file of chorus-core
#   scripts/mutants.sh --list          # only list the mutants, run nothing
#   scripts/mutants.sh -- --shard 1/4  # anything after -- goes to cargo mutants as is
#   scripts/mutants.sh -- --file core/src/membership.rs
#                                      # a --file after -- replaces the default files
#
# Needs `cargo install --locked cargo-mutants`. Results land in target/mutants/mutants.out/
# (caught.txt, missed.txt, timeout.txt, unviable.txt, outcomes.json); triage the survivors in
# docs/mutants.md.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo mutants --version >/dev/null 2>&1; then
    echo "cargo-mutants is not installed: cargo install --locked cargo-mutants" >&2
    exit 2
fi

files=(--file core/src/election.rs --file core/src/heartbeat.rs
       --file core/src/electorate.rs --file core/src/discovery.rs)
list=()
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --all) files=() ;;
        --list) list=(--list) ;;
        --) shift; extra=("$@"); break ;;
        *) echo "unknown argument: $1 (see the header of $0)" >&2; exit 2 ;;
    esac
    shift
done

# A --file (or -f) passed through replaces the default set instead of adding to it; so does a
# --jobs (or -j) the one job below.
jobs=(--jobs 1)
for arg in "${extra[@]}"; do
    case "$arg" in
        --file|-f|--file=*) files=() ;;
        --jobs|-j|--jobs=*) jobs=() ;;
    esac
done

mkdir -p target/mutants
# Mutate chorus-core and run chorus-core's own tests (unit, rule tables, narrow rules,
# properties, determinism) against each mutant; the workspace's test profile (opt-level 1) keeps
# the property tests quick. The timeout covers a mutant that makes a test loop forever; one job
# at a time by default because a mutant build is heavy on a small machine (pass --jobs N after
# -- on a bigger one, or to overlap one mutant's build with another's tests).
exec cargo mutants \
    --package chorus-core \
    "${files[@]}" \
    --output target/mutants \
    --timeout 300 \
    "${jobs[@]}" \
    "${list[@]}" \
    "${extra[@]}"
