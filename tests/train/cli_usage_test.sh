#!/usr/bin/env bash
# The dynemb program's usage errors: every one exits with status 2 and names the option; a run
# into a checkpoint directory holding another run is refused without --overwrite and leaves the
# directory as it was. Usage: tests/train/cli_usage_test.sh path/to/dynemb
set -uo pipefail
dynemb="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0

# expect_status STATUS FRAGMENT ARGS...: runs dynemb ARGS, checks the status and the message.
expect_status() {
  local want="$1" fragment="$2"
  shift 2
  "$dynemb" "$@" > "$work/out" 2>&1
  local got=$?
  if [[ "$got" != "$want" ]] || ! grep -qF -- "$fragment" "$work/out"; then
    echo "FAIL: dynemb $* -> status $got (want $want), output:" >&2
    head -5 "$work/out" >&2
    failures=$((failures + 1))
  fi
}

quick=(--eval-samples 500 --progress none --output-dir "$work/o")
expect_status 2 "--ttl-steps" train --ttl-steps 99999999999999999999
expect_status 2 "--dim" train --dim -1
expect_status 2 "--dim" train --dim 0
expect_status 2 "--no-such-option" train --no-such-option
expect_status 2 "--checkpoint-dir = ''" train --checkpoint-dir ''
expect_status 2 "--resume = ''" train --resume ''
expect_status 2 "--lr" train --lr nan
expect_status 2 "--value-type = 'half' is not a value type; allowed: float32" train --value-type half
expect_status 2 "--alpha" bench train --alpha nan
expect_status 2 "--tables" bench train --tables 0
expect_status 2 "--steps" bench train --steps 0
expect_status 2 "--dim" bench train --dim 0
expect_status 0 "Usage" train --help

# One run per checkpoint directory.
expect_status 0 "checkpoint written" train "${quick[@]}" --samples 3000 --checkpoint-dir "$work/c"
before="$(sha256sum "$work/c/model/manifest.json")"
expect_status 2 "holds another run" train "${quick[@]}" --samples 2000 --checkpoint-dir "$work/c"
if [[ "$(sha256sum "$work/c/model/manifest.json")" != "$before" ]]; then
  echo "FAIL: a refused run changed the checkpoint" >&2
  failures=$((failures + 1))
fi
expect_status 2 "--data-seed = 2" train "${quick[@]}" --samples 4000 --resume "$work/c" \
  --checkpoint-dir "$work/c" --data-seed 2 --vocab-horizon 3000
expect_status 2 "--reset-optimizer" train "${quick[@]}" --samples 4000 --resume "$work/c" \
  --checkpoint-dir "$work/c" --optimizer sgd --vocab-horizon 3000
expect_status 0 "resumed run" train "${quick[@]}" --samples 4000 --resume "$work/c" \
  --checkpoint-dir "$work/c" --vocab-horizon 3000
expect_status 0 "is replaced by run" train "${quick[@]}" --samples 3000 --checkpoint-dir "$work/c" --overwrite
# An edited manifest: inspect says it does not verify, resume refuses.
sed -i 's/"optimizer": "ftrl"/"optimizer": "adam"/' "$work/c/model/manifest.json"
expect_status 1 "manifest_crc32c" inspect "$work/c/model"
expect_status 1 "manifest_crc32c" train "${quick[@]}" --samples 3000 --resume "$work/c"

if [[ "$failures" != 0 ]]; then
  echo "cli_usage_test: $failures failure(s)" >&2
  exit 1
fi
echo "cli_usage_test: every usage error exited 2; checkpoint refusals held"
