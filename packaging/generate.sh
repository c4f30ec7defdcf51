#!/bin/sh
# packaging/generate.sh TARMAC DIR: what the package ships that the binary itself generates, so it
# cannot drift from it (cmake/install.cmake runs this at build time): the manual page (tarmac man),
# the bash, zsh and fish completions (tarmac completion SHELL) and the Prometheus rules of the
# default alert rules (tarmac alerts --prometheus-rules, read with an empty configuration so that
# the builder's own tarmac.toml never gets in).
set -eu
tarmac=$1
dir=$2
mkdir -p "$dir"
"$tarmac" man > "$dir/tarmac.1.tmp"  # not a pipe: a failing `tarmac man` must fail the build
gzip -9n < "$dir/tarmac.1.tmp" > "$dir/tarmac.1.gz.tmp"
rm "$dir/tarmac.1.tmp"
mv "$dir/tarmac.1.gz.tmp" "$dir/tarmac.1.gz"
for shell in bash zsh fish; do "$tarmac" completion "$shell" > "$dir/$shell.tmp"; done
mv "$dir/bash.tmp" "$dir/tarmac.bash"
mv "$dir/zsh.tmp" "$dir/_tarmac"
mv "$dir/fish.tmp" "$dir/tarmac.fish"
: > "$dir/empty.toml"
"$tarmac" --config "$dir/empty.toml" alerts --prometheus-rules -o "$dir/tarmac-rules.yml.tmp"
mv "$dir/tarmac-rules.yml.tmp" "$dir/tarmac-rules.yml"
