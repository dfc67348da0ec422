#!/usr/bin/python3
"""The Python package (python/tessera) against the tessera binary: run by test_python.sh.

- A tessera checkpoint (an MLP, the default CNN, an Adam MLP), loaded into torch.nn with
  to_torch, gives `tessera eval`'s predictions (within a handful of ties) and loss (within
  float tolerance); the NumPy reference forward pass does too.
- read_checkpoint -> to_torch -> from_torch gives back every tensor bitwise (and the file).
- A PyTorch-initialized model (an MLP; a CNN with strides, both poolings and dropout, after a
  few Adam steps) exported with from_torch evaluates in tessera to torch's loss, and
  `tessera train --resume` trains it: the loss falls.
- Graph models (add, concat, input/inputs) in torch agree with the NumPy reference, whose
  layouts are tessera's own; graph errors are refused with the layers named.
- A damaged tensor is refused (CRC-32); read_log reads train --log; plot_logs.py draws it.

Environment: TESSERA (the binary), TSR_DATA_DIR (Fashion-MNIST).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import tessera  # noqa: E402
from tessera.pytorch import Add, Concat, TesseraNet  # noqa: E402

TESSERA = os.environ.get("TESSERA") or os.path.join(HERE, "..", "build", "tessera")
DATA = os.environ.get("TSR_DATA_DIR", "/usr/share/datasets/fashion-mnist")
TEST_N = 500
TMP = None
SETS = {}


BN_MODEL = """
[c1]
type = conv
filters = 6
kernel = 3
padding = 1
[bn1]
type = batchnorm
activation = relu
[pool]
type = maxpool
kernel = 3
stride = 2
padding = 1
[c2]
type = conv
filters = 6
kernel = 3
padding = 1
[bn2]
type = batchnorm
[sum]
type = add
inputs = pool, bn2
activation = relu
[gap]
type = globalavgpool
[bn3]
type = batchnorm
momentum = 0.2
[out]
type = dense
units = classes
"""


def setUpModule():
    global TMP
    TMP = tempfile.mkdtemp(prefix="tessera-python-")
    SETS["train"], SETS["test"] = tessera.data.load(DATA)
    SETS["test"] = SETS["test"].limit(TEST_N)


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def tmp(name):
    return os.path.join(TMP, name)


def run(*args):
    r = subprocess.run([TESSERA] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode:
        raise AssertionError("tessera %s: exit %d\n%s%s" % (" ".join(map(str, args)),
                                                            r.returncode, r.stdout, r.stderr))
    return r.stdout


def train(path, model, limit, *extra):
    run("train", "--data", DATA, "--train-limit", limit, "--test-limit", TEST_N, "--epochs", 1,
        "--model", model, "--checkpoint", path, "--quiet", *extra)


def evaluate(path):
    return json.loads(run("eval", "--checkpoint", path, "--data", DATA, "--test-limit", TEST_N,
                          "--json"))


def torch_logits(net, ckpt):
    flat = isinstance(net, nn.Sequential) and isinstance(net[0], nn.Linear)
    with torch.no_grad():
        return net.eval()(tessera.torch_inputs(SETS["test"].x, ckpt, flat=flat))


def torch_loss(logits):
    return nn.functional.cross_entropy(logits, torch.from_numpy(SETS["test"].y)).item()


def confusion(pred, classes):
    c = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(c, (SETS["test"].y, np.asarray(pred)), 1)
    return c


class FromTessera(unittest.TestCase):
    """tessera checkpoints in PyTorch."""

    @classmethod
    def setUpClass(cls):
        cls.paths = {"mlp": tmp("mlp.st"), "cnn": tmp("cnn.st"), "adam": tmp("adam.st"),
                     "bn": tmp("bn.st")}
        with open(tmp("bn.ini"), "w") as f:
            f.write(BN_MODEL)
        train(cls.paths["bn"], tmp("bn.ini"), 1000)
        train(cls.paths["mlp"], "mlp:64", 2000)
        train(cls.paths["cnn"], "cnn", 1000)
        train(cls.paths["adam"], "mlp:32,16", 500, "--optimizer", "adam")
        cls.evals = {k: evaluate(p) for k, p in cls.paths.items()}

    def same_as_eval(self, name):
        ckpt = tessera.read_checkpoint(self.paths[name])
        e = self.evals[name]
        logits = torch_logits(tessera.to_torch(ckpt), ckpt)
        want = np.array(e["confusion"])
        got = confusion(logits.argmax(1).numpy(), ckpt.classes)
        # Each prediction tessera and torch make differently moves two cells by one.
        self.assertLessEqual(np.abs(got - want).sum() / 2, 3, "predictions differ beyond ties")
        acc = float((logits.argmax(1).numpy() == SETS["test"].y).mean())
        self.assertAlmostEqual(acc, e["accuracy"], delta=3 / TEST_N + 1e-6)
        self.assertAlmostEqual(torch_loss(logits), e["loss"], delta=2e-5)
        ref_acc, ref_loss, _ = tessera.reference.evaluate(ckpt, SETS["test"])
        self.assertAlmostEqual(ref_acc, e["accuracy"], delta=3 / TEST_N + 1e-6)
        self.assertAlmostEqual(ref_loss, e["loss"], delta=2e-5)

    def test_mlp_in_torch_gives_eval_accuracy_and_loss(self):
        self.same_as_eval("mlp")

    def test_cnn_in_torch_gives_eval_accuracy_and_loss(self):
        self.same_as_eval("cnn")

    def test_adam_mlp_in_torch_gives_eval_accuracy_and_loss(self):
        self.same_as_eval("adam")

    def test_batchnorm_resnet_in_torch_gives_eval_accuracy_and_loss(self):
        """Batchnorm with its running statistics (BatchNorm2d and, after the pooling, a
        per-feature BatchNorm1d), a padded max pooling, a residual add, global mean pooling."""
        self.same_as_eval("bn")
        ckpt = tessera.read_checkpoint(self.paths["bn"])
        net = tessera.to_torch(ckpt)
        self.assertEqual(sum(isinstance(m, nn.BatchNorm2d) for m in net.modules()), 2)
        self.assertEqual(sum(isinstance(m, nn.BatchNorm1d) for m in net.modules()), 1)
        bn = next(m for m in net.modules() if isinstance(m, nn.BatchNorm2d))
        self.assertGreater(bn.num_batches_tracked.item(), 0)
        self.assertFalse(torch.allclose(bn.running_var, torch.ones_like(bn.running_var)))
        back = tessera.from_torch(net, tmp("bn2.st"), like=ckpt)
        for k, v in ckpt.tensors.items():
            self.assertEqual(back.tensors[k].tobytes(), v.tobytes(), k)
        self.assertIn("add[pool,bn2]", back.metadata["model"])

    def test_a_users_own_sequential_takes_the_checkpoint(self):
        """tessera.load_state_dict into an nn.Sequential built the usual way (not to_torch's
        module): the same logits as to_torch's, so tessera eval's predictions; a module of
        another shape is refused, naming the tensors, and left as it was."""
        ckpt = tessera.read_checkpoint(self.paths["cnn"])
        mine = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                             nn.Linear(128, 10))
        self.assertIs(tessera.load_state_dict(self.paths["cnn"], mine), mine)
        got, want = torch_logits(mine, ckpt), torch_logits(tessera.to_torch(ckpt), ckpt)
        self.assertTrue(torch.equal(got, want), "logits differ from to_torch's")
        e = self.evals["cnn"]
        diff = np.abs(confusion(got.argmax(1).numpy(), ckpt.classes) - np.array(e["confusion"]))
        self.assertLessEqual(diff.sum() / 2, 3, "predictions differ from tessera eval's")
        # A module of another width: refused, naming both tensors, and left as it was.
        other = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(64 * 7 * 7, 64), nn.ReLU(),
                              nn.Linear(64, 10))
        before = [t.clone() for t in other.state_dict().values()]
        with self.assertRaisesRegex(ValueError, r"tensor 4: checkpoint's \S+ \(128, 3136\) "
                                                r"against module's 7.weight \(64, 3136\)"):
            tessera.load_state_dict(ckpt, other)
        self.assertTrue(all(torch.equal(a, b) for a, b in zip(before, other.state_dict().values())))
        with self.assertRaisesRegex(ValueError, "tensor 8: nothing in the checkpoint against "
                                                "module's"):
            tessera.load_state_dict(ckpt, nn.Sequential(*mine, nn.ReLU(), nn.Linear(10, 3)))

    def test_hyperparameters_read_back_as_written(self):
        ckpt = tessera.read_checkpoint(self.paths["adam"])
        self.assertEqual(ckpt.optimizer_hyper["lr"], 0.001)
        self.assertEqual(ckpt.optimizer_hyper["beta2"], 0.999)
        self.assertEqual(ckpt.optimizer_hyper["eps"], 1e-8)
        self.assertEqual(tessera.read_checkpoint(self.paths["mlp"]).optimizer_hyper["lr"], 0.01)

    def test_round_trip_keeps_every_tensor_bitwise(self):
        for name, path in self.paths.items():
            with self.subTest(name):
                ckpt = tessera.read_checkpoint(path)
                net = tessera.to_torch(ckpt)
                opt = tessera.to_torch_optimizer(ckpt, net)
                self.assertEqual(bool(opt.state), ckpt.optimizer_steps > 0)
                back = tessera.from_torch(net, tmp(name + ".back.st"), like=ckpt, optimizer=opt)
                self.assertEqual(list(back.tensors), list(ckpt.tensors))
                for k, v in ckpt.tensors.items():
                    self.assertEqual(back.tensors[k].tobytes(), v.tobytes(), k)
                self.assertEqual(back.metadata, ckpt.metadata)
                with open(path, "rb") as a, open(tmp(name + ".back.st"), "rb") as b:
                    self.assertEqual(a.read(), b.read(), "the file, byte for byte")

    def test_optimizer_state_reaches_torch(self):
        ckpt = tessera.read_checkpoint(self.paths["adam"])
        net = tessera.to_torch(ckpt)
        opt = tessera.to_torch_optimizer(ckpt, net)
        self.assertIsInstance(opt, torch.optim.Adam)
        l, w, _, wn, _ = net.params()[0]
        s = opt.state[w]
        self.assertEqual(int(s["step"]), ckpt.optimizer_steps)
        t = ckpt.tensors["optimizer.%s.exp_avg_sq" % wn]
        self.assertTrue(torch.equal(s["exp_avg_sq"], torch.from_numpy(t.T.copy())))
        self.assertGreater(float(s["exp_avg_sq"].abs().max()), 0)
        mlp = tessera.read_checkpoint(self.paths["mlp"])
        net = tessera.to_torch(mlp)
        sgd = tessera.to_torch_optimizer(mlp, net)
        self.assertIsInstance(sgd, torch.optim.SGD)
        self.assertEqual(sgd.defaults["momentum"], 0.9)  # as written, not float32(0.9) widened
        l, w, _, wn, _ = net.params()[-1]
        t = mlp.tensors["optimizer.%s.momentum_buffer" % wn]
        self.assertTrue(torch.equal(sgd.state[w]["momentum_buffer"], torch.from_numpy(t.T.copy())))

    def test_model_and_data_metadata_read_as_tessera_wrote_them(self):
        ckpt = tessera.read_checkpoint(self.paths["cnn"])
        self.assertEqual(ckpt.graph.describe(), ckpt.metadata["model"])
        self.assertEqual(ckpt.graph.to_ini(), ckpt.metadata["model_ini"])
        self.assertEqual([l.kind for l in ckpt.layers],
                         [l.kind for l in tessera.model.shorthand("cnn", 10)])
        data, mean, std = tessera.data.describe(SETS["train"].limit(1000))
        self.assertEqual(data, ckpt.metadata["data"])
        self.assertEqual((mean, std), (ckpt.input_mean, ckpt.input_std))

    def test_a_damaged_tensor_is_refused(self):
        path = tmp("flip.st")
        shutil.copy(self.paths["mlp"], path)
        with open(path, "r+b") as f:
            f.seek(-100, os.SEEK_END)
            byte = f.read(1)
            f.seek(-100, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0x7f]))
        with self.assertRaisesRegex(tessera.CheckpointError, r"tensor \S+ is damaged"):
            tessera.read_checkpoint(path)
        with open(self.paths["mlp"], "rb") as f:
            blob = f.read()
        with open(path, "wb") as f:
            f.write(blob[:1000])
        with self.assertRaisesRegex(ValueError, "not a valid safetensors file"):
            tessera.read_checkpoint(path)


def few_adam_steps(model, steps=3):
    """A torch Adam after `steps` steps on the first training samples: non-zero state."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_set = SETS["train"].limit(2000)
    mean, std = tessera.data.stats(train_set.x)
    x = tessera.torch_inputs(train_set.x[:64], mean, std, shape=train_set.shape)
    y = torch.from_numpy(train_set.y[:64])
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return opt


class ToTessera(unittest.TestCase):
    """PyTorch models in tessera."""

    def starts_from_torch_loss_and_trains(self, model, name, optimizer, train_args):
        train_set = SETS["train"].limit(2000)
        path = tmp(name + ".st")
        ckpt = tessera.from_torch(model, path, input_shape=(1, 28, 28), dataset=train_set,
                                  optimizer=optimizer)
        loss = torch_loss(torch_logits(model, ckpt))
        e = evaluate(path)
        self.assertAlmostEqual(e["loss"], loss, delta=2e-5, msg="tessera eval's loss")
        ini = tmp(name + ".ini")
        with open(ini, "w") as f:
            f.write(ckpt.metadata["model_ini"])
        log = tmp(name + ".jsonl")
        run("train", "--data", DATA, "--train-limit", 2000, "--test-limit", TEST_N, "--epochs",
            1, "--model", ini, "--resume", path, "--log", log, "--quiet", *train_args)
        epochs = tessera.read_log(log).epochs
        self.assertEqual([o["epoch"] for o in epochs], [1])
        self.assertLess(epochs[0]["test_loss"], loss - 0.05, "the loss falls")

    def test_torch_mlp_starts_in_tessera_from_its_loss(self):
        torch.manual_seed(3)
        model = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
        self.starts_from_torch_loss_and_trains(model, "torch-mlp", None, [])

    def test_torch_cnn_with_adam_starts_in_tessera_from_its_loss(self):
        torch.manual_seed(4)
        model = nn.Sequential(
            nn.Conv2d(1, 8, 5, stride=2, padding=2), nn.ReLU(), nn.AvgPool2d(2),
            nn.Sequential(nn.Conv2d(8, 6, 3, padding="same"), nn.ReLU()),
            nn.MaxPool2d(2, stride=1), nn.Flatten(), nn.Linear(6 * 6 * 6, 32), nn.ReLU(),
            nn.Dropout(0.25), nn.Linear(32, 10))
        opt = few_adam_steps(model)
        self.starts_from_torch_loss_and_trains(model, "torch-cnn", opt,
                                               ["--optimizer", "adam"])
        ckpt = tessera.read_checkpoint(tmp("torch-cnn.st"))
        self.assertEqual(ckpt.optimizer, "adam")
        self.assertEqual(ckpt.optimizer_steps, 3)

    def test_what_tessera_lacks_is_refused(self):
        for model, why in ((nn.Sequential(nn.Conv2d(2, 4, 3, groups=2), nn.Flatten(),
                                          nn.Linear(4 * 26 * 26, 10)), "groups 1"),
                           (nn.Sequential(nn.Linear(784, 10), nn.Softmax(1)), "drop the softmax"),
                           (nn.Sequential(nn.Linear(784, 10), nn.GELU(), nn.Linear(10, 10)),
                            "not a layer tessera has"),
                           (nn.Sequential(nn.Linear(784, 10), nn.BatchNorm1d(10, affine=False),
                                          nn.Linear(10, 10)), "affine=True"),
                           (nn.Sequential(nn.Linear(784, 10, bias=False)), "bias")):
            with self.subTest(why), self.assertRaisesRegex(ValueError, why):
                tessera.from_torch(model, tmp("refused.st"), input_shape=(2, 28, 28),
                                   input_mean=0, input_std=1)
        with self.assertRaisesRegex(ValueError, "standardization"):
            tessera.from_torch(nn.Sequential(nn.Linear(784, 10)), tmp("refused.st"))


class Graphs(unittest.TestCase):
    """Graph models (add, concat, input/inputs) in torch against the NumPy reference."""

    # Every path of the feature orders: a residual block and a channel concat on images, an
    # activation key whose section name means its ReLU, a dense layer straight on a c > 1
    # image, a flatten of one added to a dense output (torch must reorder it), a 1 x 1 conv on
    # the flattened features, a concat of all that, a pooling on it.
    INI = """
[c1]
type = conv
filters = 3
kernel = 3
padding = 1
activation = relu

[c2]
type = conv
filters = 3
kernel = 3
padding = 1

[res]
type = add
inputs = c1, c2

[cat]
type = concat
inputs = res, c1

[pool]
type = maxpool
kernel = 2

[flat]
type = flatten

[d]
type = dense
units = 24
input = pool

[e]
type = dense
units = 72

[mix]
type = add
inputs = flat, e

[cf]
type = conv
filters = 5
kernel = 1
input = flat

[k]
type = concat
inputs = mix, cf, flat

[p]
type = avgpool
kernel = 1

[out]
type = dense
units = 10
"""

    def graph(self):
        return tessera.Graph(tessera.model.read_ini(self.INI, "graph.ini"), (2, 8, 6))

    def test_graph_in_torch_matches_the_reference(self):
        torch.manual_seed(5)
        net = TesseraNet(self.graph()).eval()
        self.assertTrue(net.reorders, "the add of a flattened image and a dense output")
        path = tmp("graph.st")
        ckpt = tessera.from_torch(net, path, input_mean=0.25, input_std=0.5)
        x = np.random.default_rng(0).random((9, 96), dtype=np.float32)
        ref = tessera.reference.forward(ckpt, tessera.reference.standardize(x, ckpt))
        got = torch_logits_of(net, x, ckpt)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
        again = tessera.to_torch(tessera.read_checkpoint(path))
        np.testing.assert_array_equal(torch_logits_of(again, x, ckpt), got)
        back = tessera.from_torch(again, tmp("graph2.st"), like=ckpt)
        for k, v in ckpt.tensors.items():
            self.assertEqual(back.tensors[k].tobytes(), v.tobytes(), k)
        self.assertEqual(back.metadata["model_ini"], ckpt.metadata["model_ini"])

    def test_graph_from_torch_modules(self):
        torch.manual_seed(6)
        entries = [("a", nn.Conv2d(1, 4, 3, padding=1)), ("r", nn.ReLU()),
                   ("b", nn.Conv2d(4, 4, 3, padding=1)), ("s", Add(), ["r", "b"]),
                   ("c", Concat(), ["s", "a"]), ("f", nn.Flatten()), ("o", nn.Linear(8 * 28 * 28, 10))]
        net = TesseraNet.from_modules((1, 28, 28), entries).eval()
        ckpt = tessera.from_torch(net, tmp("modules.st"), dataset=SETS["train"].limit(1000))
        self.assertIn("inputs = r, b", ckpt.metadata["model_ini"])
        self.assertEqual(ckpt.metadata["model"],
                         "784-conv3x3/4p1x1-relu-conv3x3/4p1x1-add[r,b]-concat[s,a]-flatten-10")
        x = SETS["test"].x[:20]
        ref = tessera.reference.forward(ckpt, tessera.reference.standardize(x, ckpt))
        np.testing.assert_allclose(torch_logits_of(net, x, ckpt), ref, rtol=1e-5, atol=1e-5)

    def test_graph_errors_name_the_layers(self):
        base = "[a]\ntype = dense\nunits = 8\n\n[b]\ntype = dense\nunits = 8\ninput = a\n\n"
        cases = [
            (base + "[c]\ntype = dense\nunits = 10\ninput = nope\n", "takes nope, but no layer"),
            (base + "[c]\ntype = dense\nunits = 10\ninput = d\n\n[d]\ntype = relu\n",
             "comes at or after it"),
            (base + "[c]\ntype = dense\nunits = 10\ninput = a\n", "output of b is used by no"),
            ("[a]\ntype = dense\nunits = 8\n\n[b]\ntype = dense\nunits = 4\ninput = a\n\n"
             "[s]\ntype = add\ninputs = a, b\n\n[o]\ntype = dense\nunits = 10\n",
             r"\[s\] adds inputs of different shapes: a 1x1x8 .*b 1x1x4"),
            (base + "[s]\ntype = add\ninput = b\n\n[o]\ntype = dense\nunits = 10\n",
             "needs at least two inputs"),
            ("[a]\ntype = dense\nunits = 8\n\n[a]\ntype = dense\nunits = 10\n",
             "two layers are named a"),
            ("[a]\ntype = dense\nunits = 8\ninputs = ,\n", "expected layer names"),
            ("[a]\ntype = dense\n", "without 'units'"),
        ]
        for text, message in cases:
            with self.subTest(message), self.assertRaisesRegex(tessera.ModelError, message):
                tessera.Graph(tessera.model.read_ini(text, "m.ini"), (1, 28, 28), "m.ini")


def torch_logits_of(net, x, ckpt):
    with torch.no_grad():
        return net(tessera.torch_inputs(x, ckpt)).numpy()


class Logs(unittest.TestCase):
    def test_read_log_of_a_run(self):
        log = tmp("run.jsonl")
        run("train", "--data", DATA, "--train-limit", 1000, "--test-limit", 200, "--epochs", 2,
            "--model", "mlp:16", "--log", log, "--stats", "--quiet")
        r = tessera.read_log(log)
        self.assertEqual(r.column("epoch"), [1, 2])
        self.assertLess(r.column("loss")[1], r.column("loss")[0])
        self.assertTrue(r.stats and r.stats["workers"], "the --stats line")
        self.assertEqual((r.lines[0], r.run["command"][1], r.run["config"]["epochs"]),
                         (r.run, "train", 2), "the run line first")
        self.assertEqual(len(r.elapsed()), 2)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("matplotlib is not installed (scripts/setup.sh installs it)")
        png = tmp("runs.png")
        subprocess.run([sys.executable, os.path.join(HERE, "..", "benchmarks", "plot_logs.py"),
                        log, "--out", png], check=True, capture_output=True)
        self.assertGreater(os.path.getsize(png), 10000)

    def test_read_log_turns_nonfinite_strings_back(self):
        path = tmp("odd.jsonl")
        with open(path, "w") as f:
            f.write('{"epoch":1,"loss":"nan","test_loss":null,"sync":"none","lr_end":"-inf"}\n\n'
                    '{"event":"ranks","sync":"epoch","ranks":[{"rank":0,"seconds":"inf"}]}\n')
        r = tessera.read_log(path)
        self.assertTrue(np.isnan(r.epochs[0]["loss"]))
        self.assertEqual((r.epochs[0]["lr_end"], r.epochs[0]["test_loss"]), (-np.inf, None))
        self.assertEqual((r.epochs[0]["sync"], r.ranks["ranks"][0]["seconds"]), ("none", np.inf))
        with open(path, "a") as f:
            f.write('{"epoch": 2, "loss"\n')
        with self.assertRaisesRegex(ValueError, "odd.jsonl:4: not a JSON object"):
            tessera.read_log(path)


if __name__ == "__main__":
    unittest.main(verbosity=2)
