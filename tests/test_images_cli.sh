#!/usr/bin/env bash
# tessera train and eval on colour images in every format, as a user meets them: a generated set
# (tests/make_colour_data.py: CIFAR-10 binary batches, a folder of .npy files, .npz archives
# stored NHWC uint8 and deflated NCHW float32, NumPy's own .npz where NumPy is installed) trains
# to the same digits in each format; the checkpoint records the per-channel standardization
# (the default for colour images) and tessera eval applies it (its test loss is the training
# run's); malformed files exit 1 with a message naming the file and the problem.
# Usage: test_images_cli.sh PATH/TO/tessera
set -u
tessera=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export STARPU_SILENT=1

/usr/bin/python3 "$tests_dir/make_colour_data.py" "$tmp" 40 || { echo "FAIL: make_colour_data.py"; exit 1; }
run=(timeout 120 "$tessera" train --workers 2 --epochs 2 --batch 20 --seed 3 --lr 0.05)

# The epoch lines without their timings: the same digits whatever the format.
digits() { grep '^epoch' "$1" | sed -E 's/  [0-9.]+ s .*//'; }

formats=(cifar npy nhwc.npz nchw.npz)
[[ -f $tmp/numpy.npz ]] && formats+=(numpy.npz)
for f in "${formats[@]}"; do
  check "train --data $f" "${run[@]}" --data "$tmp/$f" --model mlp:32 >"$tmp/$f.out" 2>&1
  check_show=$tmp/$f.out
  check "$f: 2 epoch lines" test "$(digits "$tmp/$f.out" | wc -l)" = 2
  if [[ $f != cifar ]]; then
    check "$f trains as the CIFAR batches do: $(digits "$tmp/$f.out" | tail -1) vs $(digits "$tmp/cifar.out" | tail -1)" \
      test "$(digits "$tmp/$f.out")" = "$(digits "$tmp/cifar.out")"
  fi
done
unset check_show
# CIFAR-100: the fine label byte, 100 classes.
check "train --data cifar100" "${run[@]}" --data "$tmp/cifar100" --model mlp:32 --log "$tmp/c100.jsonl" \
  >"$tmp/c100.out" 2>&1
check "CIFAR-100 builds 100 outputs" grep -q 'model 3072-32-relu-100 ' "$tmp/c100.out"

# A convolutional net on 32x32x3, checkpointed: the checkpoint says channel, with three means,
# and eval on the same test set (here from the .npz) reports the training run's test loss.
check "train --model cnn on CIFAR" "${run[@]}" --data "$tmp/cifar" --model cnn --epochs 1 \
  --checkpoint "$tmp/cnn.st" >"$tmp/cnn.out" 2>&1
"$tessera" inspect "$tmp/cnn.st" >"$tmp/inspect.out" 2>&1
check "the checkpoint's standardization is per channel" grep -qE '^ *input_standardize +channel$' "$tmp/inspect.out"
check "three channel means" grep -qE '^ *input_mean +[-0-9.e]+ [-0-9.e]+ [-0-9.e]+$' "$tmp/inspect.out"
check "input_shape 3 32 32" grep -qE '^ *input_shape +3 32 32$' "$tmp/inspect.out"
train_loss=$(grep '^epoch' "$tmp/cnn.out" | sed -E 's/.*test [0-9.]+% \(loss ([0-9.]+)\).*/\1/')
"$tessera" eval --checkpoint "$tmp/cnn.st" --data "$tmp/nchw.npz" >"$tmp/eval.out" 2>&1
eval_loss=$(sed -nE 's/.*test samples, accuracy [0-9.]+%, loss ([0-9.]+)$/\1/p' "$tmp/eval.out")
check "eval applies the per-channel standardization: loss $eval_loss, training's $train_loss" \
  test -n "$train_loss" -a "$eval_loss" = "$train_loss"
# --standardize none changes the run: the default really standardized.
"${run[@]}" --data "$tmp/cifar" --model mlp:32 --standardize none >"$tmp/none.out" 2>&1
check "--standardize none trains otherwise" test "$(digits "$tmp/none.out")" != "$(digits "$tmp/cifar.out")"
"${run[@]}" --data "$tmp/cifar" --model mlp:32 --standardize channel >"$tmp/channel.out" 2>&1
check "--standardize channel is the colour default" test "$(digits "$tmp/channel.out")" = "$(digits "$tmp/cifar.out")"

# Malformed files: exit 1, the file and the problem named, before training.
bad=$tmp/bad
mkdir -p "$bad"
cp "$tmp"/cifar/*.bin "$bad"/
head -c 100000 "$tmp/cifar/data_batch_4.bin" >"$bad/data_batch_4.bin"
expect 1 "data_batch_4.bin: 100000 bytes is not a whole number of 3073-byte CIFAR-10 records" -- \
  "${run[@]}" --data "$bad"
cp "$tmp/cifar/data_batch_4.bin" "$bad/" && printf 'xx' >>"$bad/data_batch_4.bin"
expect 1 "data_batch_4.bin: 122922 bytes is not a whole number.*40 records and 2 bytes over" -- \
  "${run[@]}" --data "$bad"
rm "$bad/data_batch_4.bin" "$bad/test_batch.bin"
expect 1 "incomplete CIFAR-10 dataset: missing data_batch_4.bin, test_batch.bin" -- "${run[@]}" --data "$bad"
cp "$tmp/cifar/data_batch_4.bin" "$tmp/cifar/test_batch.bin" "$bad/"
printf '\x0a' | dd of="$bad/test_batch.bin" bs=1 seek=3073 conv=notrunc status=none
expect 1 "test_batch.bin: record 2 has label 10; CIFAR-10 labels are 0 to 9" -- "${run[@]}" --data "$bad"

rm -rf "$bad" && cp -r "$tmp/npy" "$bad"
printf 'NOTNPY' | dd of="$bad/x_test.npy" bs=1 conv=notrunc status=none
expect 1 "x_test.npy: not a .npy file: wrong magic" -- "${run[@]}" --data "$bad"
cp "$tmp/npy/x_test.npy" "$bad/" && sed -i "s/'|u1'/'<c8'/" "$bad/x_test.npy"
expect 1 "x_test.npy: unsupported dtype '<c8'" -- "${run[@]}" --data "$bad"
cp "$tmp/npy/x_test.npy" "$bad/" && cp "$tmp/npy/y_train.npy" "$bad/y_test.npy"
expect 1 "x_test.npy holds 40 images but .*y_test.npy holds 200 labels" -- "${run[@]}" --data "$bad"
head -c 50000 "$tmp/nhwc.npz" >"$tmp/cut.npz"
expect 1 "cut.npz: not a valid .npz \(zip\) file: no end of central directory record" -- \
  "${run[@]}" --data "$tmp/cut.npz"
printf 'just text' >"$tmp/text.npz"
expect 1 "text.npz: not a valid .npz" -- "${run[@]}" --data "$tmp/text.npz"

echo "$passed passed, $failed failed"
((failed == 0))
