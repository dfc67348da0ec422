#!/usr/bin/env bash
# Text through the command: tessera train --text refuses bad input before training, each with a
# message naming the file and the fix (an empty file, a folder, a pipe, which must not block, a
# missing file, a text shorter than the context, too few windows for the split: exit 1; options
# token ids cannot take, --text beside --data, a model without a context: exit 2); tessera
# generate refuses an empty prompt, a missing checkpoint and one that is not a language model.
# Where the language model's layers are built (tessera summary takes the model), a small model
# (a model file without attention, and gpt:1,32,2,16) trains on a text, with --clip-grad and
# --eval-every's lines (every 20 steps, the log's tokens), and generate continues a prompt: greedy twice the same, the prompt first, the tokens asked for, any bytes in the prompt,
# the alphabet continued exactly. Usage: test_text_cli.sh PATH/TO/tessera
set -u
tessera=$1
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export STARPU_SILENT=1

# A model of context 16 for the refusals: they come before the net is built.
gpt=(timeout 30 "$tessera" train --model gpt:1,16,2,16 --workers 1 --epochs 1)
head -c 3000 /dev/urandom | base64 >"$tmp/ok.txt"
: >"$tmp/empty.txt"
mkdir "$tmp/folder"
mkfifo "$tmp/fifo"
printf 'only twelve.' >"$tmp/short.txt"
head -c 100 "$tmp/ok.txt" >"$tmp/six-windows.txt" # 99 / 16 = 6 windows: none for the test set

expect 1 "empty.txt: empty text file: nothing to train on" -- "${gpt[@]}" --text "$tmp/empty.txt"
expect 1 "folder: is a folder, not a text file; pass the files in it" -- \
  "${gpt[@]}" --text "$tmp/folder"
# A FIFO without a writer: opened, it would block (timeout's 124); refused from its stat.
expect 1 "fifo: is a pipe \(FIFO\), not a regular file" -- "${gpt[@]}" --text "$tmp/fifo"
expect 1 "fifo: is a pipe" -- "${gpt[@]}" --text "$tmp/ok.txt,$tmp/fifo"
expect 1 "missing.txt: cannot open the text file: No such file" -- \
  "${gpt[@]}" --text "$tmp/missing.txt"
expect 1 "short.txt: the context \(16 tokens\) is longer than the text \(12 bytes\).*shorter context" \
  -- "${gpt[@]}" --text "$tmp/short.txt"
expect 1 "six-windows.txt: 100 bytes make 6 windows of 16 tokens, too few.*needs 10 windows \(161 bytes\)" \
  -- "${gpt[@]}" --text "$tmp/six-windows.txt"
if ((EUID != 0)); then
  cp "$tmp/ok.txt" "$tmp/secret.txt" && chmod 000 "$tmp/secret.txt"
  expect 1 "secret.txt: cannot read the text file: Permission denied" -- \
    "${gpt[@]}" --text "$tmp/secret.txt"
fi
expect 2 "--text a,,b: an empty file name" -- "${gpt[@]}" --text a,,b
expect 2 "--text and --data: a run trains on one of them" -- \
  "${gpt[@]}" --text "$tmp/ok.txt" --data "$data"
expect 2 "--text: --classes: the vocabulary is the 256 byte values" -- \
  "${gpt[@]}" --text "$tmp/ok.txt" --classes 128
expect 2 "--text: --standardize: the inputs are token ids" -- \
  "${gpt[@]}" --text "$tmp/ok.txt" --standardize scalar
expect 2 "--text: --crop and --flip are for images" -- "${gpt[@]}" --text "$tmp/ok.txt" --flip
expect 2 "--text: the model has no layer with a context.*gpt:L,D,H,T" -- \
  timeout 30 "$tessera" train --model mlp --text "$tmp/ok.txt"
# A language model without --data reads the default text; a bad file there is the default's.
expect 2 "a language model without --data: --classes" -- "${gpt[@]}" --classes 300
expect 2 "--clip-grad with --grid is not implemented" -- "${gpt[@]}" --clip-grad 1 --grid 2x1
expect 2 "--eval-every 0: expected an integer from 1" -- "${gpt[@]}" --eval-every 0

# tessera generate: its usage; an empty prompt (exit 2), a missing checkpoint (exit 1).
expect 0 "^usage: tessera generate --checkpoint FILE --prompt TEXT" -- "$tessera" generate --help
expect 2 "--checkpoint FILE is required" -- "$tessera" generate --prompt hi
expect 2 "--prompt TEXT is required" -- "$tessera" generate --checkpoint x.st
expect 2 "--prompt is empty: a continuation needs at least one byte" -- \
  "$tessera" generate --checkpoint x.st --prompt ''
expect 2 "--tokens -1: expected an integer from 0 to 1000000" -- \
  "$tessera" generate --checkpoint x.st --prompt hi --tokens -1
expect 2 "--temperature -1: expected a number from 0 to 100" -- \
  "$tessera" generate --checkpoint x.st --prompt hi --temperature -1
expect 2 "unknown option '--token'; did you mean '--tokens'" -- \
  "$tessera" generate --checkpoint x.st --prompt hi --token 3
expect 1 "missing.st: cannot open" -- timeout 30 "$tessera" generate --checkpoint "$tmp/missing.st" \
  --prompt hi
# A classifier's checkpoint is no language model.
if [[ -d $data ]] && timeout 120 "$tessera" train --data "$data" --model mlp:8 --epochs 1 \
  --train-limit 200 --test-limit 50 --workers 1 --quiet --checkpoint "$tmp/mlp.st" >/dev/null 2>&1; then
  expect 1 "mlp.st: not a language model.*--model gpt:L,D,H,T" -- \
    timeout 30 "$tessera" generate --checkpoint "$tmp/mlp.st" --prompt hi
  expect 1 "--text: .*mlp.st is not a language model.*evaluate it on --data" -- \
    timeout 30 "$tessera" eval --checkpoint "$tmp/mlp.st" --text "$tmp/ok.txt"
fi

# End to end where the language model's layers are built: a small model of context 16 without
# attention (a model file), and gpt:1,32,2,16 where attention is built too, on 20 kB of text.
cat >"$tmp/lm.ini" <<'INI'
[embed]
type = embedding
vocab = 256
units = 32
context = 16

[ln]
type = layernorm

[fc]
type = conv
filters = 64
kernel = 1
activation = relu

[fc2]
type = conv
filters = 32
kernel = 1

[lnf]
type = layernorm

[head]
type = lmhead
units = classes
INI
for _ in $(seq 40); do cat "$tests_dir/../README.md"; done | head -c 20000 >"$tmp/text.txt"
for _ in $(seq 800); do printf 'abcdefghijklmnopqrstuvwxyz '; done >"$tmp/abc.txt"
models=()
for m in "$tmp/lm.ini" gpt:1,32,2,16; do
  if "$tessera" summary --model "$m" --input 16x1x1 --classes 256 >/dev/null 2>&1; then
    models+=("$m")
  else
    echo "note: ${m##*/}'s layers are not built here (tessera summary refuses it): train --text" \
      "and generate end to end not run with it"
  fi
done
# The projections are 1x1 convolutions over the positions: under --kernels auto every pass of
# theirs runs oneDNN's implementation, whose filter gradient of a 1x1 convolution is one
# dnnl_sgemm (src/kernels/conv_dnnl.c), no longer the lowered BLIS one.
if [[ " ${models[*]} " == *" gpt:1,32,2,16 "* ]] && "$tessera" --version | grep -q "oneDNN [0-9]"; then
  timeout 120 "$tessera" train --model gpt:1,32,2,16 --text "$tmp/text.txt" --workers 2 \
    --epochs 1 --batch 16 --stats >"$tmp/stats.out" 2>&1
  check_show=$tmp/stats.out
  check "gpt --kernels auto: the projections' filter gradient and forward by oneDNN" \
    grep -q "conv_bwd_filter:onednn [0-9].*conv_fwd:onednn [0-9]\|conv_fwd:onednn [0-9].*conv_bwd_filter:onednn [0-9]" "$tmp/stats.out"
  check "gpt --kernels auto: no filter gradient by the lowered kernel" \
    bash -c '! grep -q "conv_bwd_filter:blis" "$1"' _ "$tmp/stats.out"
  unset check_show
fi
for m in "${models[@]}"; do
  name=${m##*/}
  check "$name: train --text" timeout 300 "$tessera" train --model "$m" --text "$tmp/text.txt" \
    --workers 2 --epochs 2 --batch 16 --optimizer adamw --lr 0.003 --checkpoint "$tmp/$name.st" \
    --clip-grad 1 --eval-every 20 --log "$tmp/$name.jsonl" >"$tmp/train.out" 2>&1
  check_show=$tmp/train.out
  check "$name: 1,125 train / 124 test windows" grep -q '1125 train / 124 test samples' "$tmp/train.out"
  # --eval-every 20 with 71 steps an epoch: after steps 20, 40, 60, 80, ..., 140 (not 142, the
  # epoch's end), the test set's loss per token, the tokens so far (16 a sample).
  check "$name: --eval-every 20: a line every 20 steps" test "$(grep -c '^  step [0-9]* (epoch' \
    "$tmp/train.out")" = 7
  check "$name: --eval-every 20: the log's eval lines" python3 - "$tmp/$name.jsonl" <<'PY'
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ev = [o for o in lines if o.get("event") == "eval"]
assert [o["step"] for o in ev] == [20, 40, 60, 80, 100, 120, 140], [o["step"] for o in ev]
for o in ev:
    assert o["set"] == "test" and o["evaluated"] == 124 and o["agreed"], o
    samples = 1125 * (o["epoch"] - 1) + 16 * o["step_in_epoch"]  # epoch 1's last batch: 5
    assert o["samples"] == samples and o["tokens"] == 16 * samples, o
    assert abs(o["bpb"] - o["loss"] / math.log(2)) < 1e-9 and 0 < o["loss"] < 6, o
assert ev[-1]["loss"] < ev[0]["loss"], "the loss falls"
PY
  # It learns: the test loss of the second epoch below ln 256 = 5.55 nats, by a margin.
  check "$name: the test loss below 4 nats" awk '/^epoch 2/ {
    sub(/.*test [0-9.]+% \(loss /, ""); sub(/\).*/, ""); exit !($0 < 4) }' "$tmp/train.out"
  # tessera eval on the language model: its text's test windows, as train held them out (the
  # last epoch's test loss and accuracy, in JSON; bits per byte the loss over ln 2); its log
  # names the text, not --data; eval refuses --data for it, and --text for a classifier.
  check "$name: eval --text gives train's last test loss" python3 - "$tmp/$name.jsonl" \
    "$(timeout 60 "$tessera" eval --checkpoint "$tmp/$name.st" --text "$tmp/text.txt" --json \
      --workers 2 2>&1)" <<'PY'
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
last = [o for o in lines if "epoch" in o and "test_loss" in o][-1]
run = [o for o in lines if "config" in o][0]["config"]
e = json.loads(sys.argv[2])
assert e["windows"] == 124 and e["tokens"] == 124 * 16, e
assert abs(e["loss"] - last["test_loss"]) < 2e-6, (e, last)
assert abs(e["accuracy"] - last["test_accuracy"]) < 2e-6, (e, last)
assert abs(e["bits_per_byte"] - e["loss"] / math.log(2)) < 1e-5, e
assert run["data"] is None and run["text"].endswith("text.txt"), run
PY
  expect 1 "$name.st is a language model: it is evaluated on text" -- \
    timeout 30 "$tessera" eval --checkpoint "$tmp/$name.st" --data "$tmp"
  unset check_show
  gen=(timeout 120 "$tessera" generate --checkpoint "$tmp/$name.st" --workers 2)
  "${gen[@]}" --prompt 'The ' --tokens 30 --temperature 0 >"$tmp/g1" 2>"$tmp/g1.err"
  check "$name: generate: the prompt and 30 bytes" test "$(wc -c <"$tmp/g1")" = 34
  check "$name: generate: the prompt first" test "$(head -c 4 "$tmp/g1")" = 'The '
  "${gen[@]}" --prompt 'The ' --tokens 30 --temperature 0 >"$tmp/g2" 2>&1
  check "$name: generate --temperature 0: the same twice" cmp -s "$tmp/g1" "$tmp/g2"
  "${gen[@]}" --prompt 'The ' --tokens 30 --seed 7 >"$tmp/g3" 2>&1
  "${gen[@]}" --prompt 'The ' --tokens 30 --seed 7 >"$tmp/g4" 2>&1
  check "$name: generate --seed 7: the same draws twice" cmp -s "$tmp/g3" "$tmp/g4"
  "${gen[@]}" --prompt 'The ' --tokens 30 --seed 8 >"$tmp/g5" 2>&1
  check "$name: generate --seed 8: other draws" test "$(cat "$tmp/g3")" != "$(cat "$tmp/g5")"
  # A prompt longer than the context slides; bytes the text never had are fine.
  check "$name: generate: a long prompt of any bytes" "${gen[@]}" \
    --prompt "$(printf '\x01\xfe%.0s' {1..20})" --tokens 5 >"$tmp/g6" 2>&1
  check "$name: generate: a long prompt, 45 bytes" test "$(wc -c <"$tmp/g6")" = 45
  # The alphabet and a space over and over (27 bytes, prime to the context: windows start at
  # every letter) is learnt exactly (the next byte follows from the last): greedy continues it
  # from the prompt's last byte, also past the context (a 25-byte prompt) and only from the last
  # real position's logits.
  check "$name: train on the alphabet" timeout 300 "$tessera" train --model "$m" \
    --text "$tmp/abc.txt" --workers 2 --epochs 2 --batch 16 --optimizer adamw --lr 0.01 \
    --checkpoint "$tmp/abc.st" >"$tmp/abc.out" 2>&1
  gen=(timeout 120 "$tessera" generate --checkpoint "$tmp/abc.st" --workers 2 --temperature 0)
  got=$("${gen[@]}" --prompt abc --tokens 30 2>&1)
  check "$name: abc continued: $got" test "$got" = 'abcdefghijklmnopqrstuvwxyz abcdef'
  got=$("${gen[@]}" --prompt 'xyz abcdefghijklmnopqrstu' --tokens 10 2>&1)
  check "$name: a 25-byte prompt continued: $got" test "$got" = 'xyz abcdefghijklmnopqrstuvwxyz abcd'
done

echo "$passed passed, $failed failed"
((failed == 0))
